//! A workload group's search settings applied to one request (facts §3): a group value beats
//! the cluster setting; an explicit request value beats the group value unless the group sets
//! `override_request_values: true`.

use std::time::Duration;

use crate::bags::{SearchSettings, TimeSetting};

/// The search settings a request's group imposes, resolved from its `settings` bag.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupSearchSettings {
    /// `search.default_search_timeout`: `Some(None)` means the group sets `-1` (no timeout).
    pub timeout: Option<Option<Duration>>,
    /// `search.cancel_after_time_interval`, as `timeout`.
    pub cancel_after: Option<Option<Duration>>,
    /// `search.max_buckets`.
    pub max_buckets: Option<u32>,
    /// `search.max_concurrent_shard_requests`.
    pub max_concurrent_shard_requests: Option<u32>,
    /// `search.batched_reduce_size`.
    pub batched_reduce_size: Option<u32>,
    /// `override_request_values`.
    pub override_request: bool,
}

/// The `batched_reduce_size` a search request has when it sets none: OpenSearch reads a request
/// with this value as one that set nothing (an explicit 512 is indistinguishable, facts §3).
pub const DEFAULT_BATCHED_REDUCE_SIZE: u32 = 512;

impl GroupSearchSettings {
    /// The settings of a group's bag; `None` (DEFAULT) imposes nothing.
    pub fn of(settings: Option<&SearchSettings>) -> GroupSearchSettings {
        let Some(s) = settings else {
            return GroupSearchSettings::default();
        };
        GroupSearchSettings {
            timeout: s.default_search_timeout().map(time_setting),
            cancel_after: s.cancel_after_time_interval().map(time_setting),
            max_buckets: s.max_buckets(),
            max_concurrent_shard_requests: s.max_concurrent_shard_requests(),
            batched_reduce_size: s.batched_reduce_size(),
            override_request: s.override_request_values(),
        }
    }

    /// The `max_concurrent_shard_requests` of a request that set `request` (`None`: it set
    /// none), by the precedence of [`Self::timeout`]; `None` when neither sets one.
    pub fn max_concurrent_shard_requests(&self, request: Option<u32>) -> Option<u32> {
        match self.max_concurrent_shard_requests {
            Some(group) if request.is_none() || self.override_request => Some(group),
            _ => request,
        }
    }

    /// The `batched_reduce_size` of a request that set `request`, as
    /// [`Self::max_concurrent_shard_requests`], but that a request's
    /// [`DEFAULT_BATCHED_REDUCE_SIZE`] counts as none set, as OpenSearch counts it.
    pub fn batched_reduce_size(&self, request: Option<u32>) -> Option<u32> {
        match self.batched_reduce_size {
            Some(group)
                if request.is_none_or(|r| r == DEFAULT_BATCHED_REDUCE_SIZE)
                    || self.override_request =>
            {
                Some(group)
            }
            _ => request,
        }
    }

    /// The search timeout of a request whose own (`request`, `None` when it set none) is given.
    pub fn timeout(&self, request: Option<Duration>) -> Option<Duration> {
        match self.timeout {
            Some(group) if request.is_none() || self.override_request => group,
            _ => request,
        }
    }

    /// The aggregation bucket limit: the group's, else the cluster setting `cluster`.
    pub fn max_buckets(&self, cluster: Option<u32>) -> Option<u32> {
        self.max_buckets.or(cluster)
    }

    /// The cancel-after interval of a task: `request` is the request's own
    /// `cancel_after_time_interval` (`Some(None)` for an explicit `-1`), `cluster` the cluster
    /// setting.
    pub fn cancel_after(
        &self,
        request: Option<Option<Duration>>,
        cluster: Option<Duration>,
    ) -> Option<Duration> {
        match (request, self.cancel_after) {
            (Some(_), Some(group)) if self.override_request => group,
            (Some(r), _) => r,
            (None, Some(group)) => group,
            (None, None) => cluster,
        }
    }
}

fn time_setting(t: TimeSetting) -> Option<Duration> {
    match t {
        TimeSetting::Disabled => None,
        TimeSetting::After(d) => Some(d),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S1: Duration = Duration::from_secs(1);
    const S2: Duration = Duration::from_secs(2);
    const S3: Duration = Duration::from_secs(3);

    fn group(timeout: Option<Option<Duration>>, override_request: bool) -> GroupSearchSettings {
        GroupSearchSettings {
            timeout,
            cancel_after: timeout,
            max_buckets: Some(10),
            max_concurrent_shard_requests: Some(3),
            batched_reduce_size: Some(100),
            override_request,
        }
    }

    #[test]
    fn test_request_value_beats_group_unless_the_group_overrides() {
        let g = group(Some(Some(S1)), false);
        assert_eq!(g.timeout(Some(S2)), Some(S2));
        assert_eq!(g.timeout(None), Some(S1));
        assert_eq!(g.cancel_after(Some(Some(S2)), Some(S3)), Some(S2));
        assert_eq!(g.cancel_after(Some(None), Some(S3)), None);
        let o = group(Some(Some(S1)), true);
        assert_eq!(o.timeout(Some(S2)), Some(S1));
        assert_eq!(o.cancel_after(Some(Some(S2)), Some(S3)), Some(S1));
    }

    #[test]
    fn test_shard_request_settings_follow_the_same_precedence() {
        let g = group(None, false);
        assert_eq!(g.max_concurrent_shard_requests(None), Some(3));
        assert_eq!(g.max_concurrent_shard_requests(Some(7)), Some(7));
        assert_eq!(g.batched_reduce_size(None), Some(100));
        assert_eq!(g.batched_reduce_size(Some(64)), Some(64));
        // The request's default is no request value.
        assert_eq!(
            g.batched_reduce_size(Some(DEFAULT_BATCHED_REDUCE_SIZE)),
            Some(100)
        );
        let o = group(None, true);
        assert_eq!(o.max_concurrent_shard_requests(Some(7)), Some(3));
        assert_eq!(o.batched_reduce_size(Some(64)), Some(100));
        let none = GroupSearchSettings::of(None);
        assert_eq!(none.max_concurrent_shard_requests(Some(7)), Some(7));
        assert_eq!(none.batched_reduce_size(None), None);
    }

    #[test]
    fn test_group_value_beats_the_cluster_setting_and_minus_one_disables() {
        let g = group(Some(None), false);
        assert_eq!(g.timeout(None), None);
        assert_eq!(g.cancel_after(None, Some(S3)), None);
        let none = GroupSearchSettings::of(None);
        assert_eq!(none.cancel_after(None, Some(S3)), Some(S3));
        assert_eq!(none.timeout(Some(S2)), Some(S2));
        assert_eq!(none.max_buckets(Some(7)), Some(7));
        assert_eq!(group(None, false).max_buckets(Some(7)), Some(10));
    }
}
