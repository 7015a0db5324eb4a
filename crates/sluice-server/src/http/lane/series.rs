//! The HTTP metrics series of the fast lane's requests, one per route and method, resolved at
//! their first request answered 200 and kept for the node's life ([`PinnedSeries`]): a lane
//! request is counted in the same series as on the general path, without the metrics' lock
//! and lookup.

use http::Method;

use crate::backend::upstream::routes::{LANE_PATTERNS, LaneRoute};
use crate::metrics::route::PinnedSeries;

/// The lane's series, by route (its `slot` in [`LANE_PATTERNS`]) and method (`GET`, `POST`:
/// the only methods the lane takes).
#[derive(Debug)]
pub struct LaneSeries([[PinnedSeries; 2]; LANE_PATTERNS.len()]);

impl LaneSeries {
    /// Series with nothing counted (none made yet).
    pub fn new() -> LaneSeries {
        LaneSeries(LANE_PATTERNS.map(|p| {
            [
                PinnedSeries::new(&Method::GET, p),
                PinnedSeries::new(&Method::POST, p),
            ]
        }))
    }

    /// The series of a `method` request of `route`.
    pub fn get(&self, route: LaneRoute, method: &Method) -> &PinnedSeries {
        // `lane_route` takes `GET` and `POST` only.
        debug_assert!(
            *method == Method::GET || *method == Method::POST,
            "{method}"
        );
        &self.0[route.slot][usize::from(*method != Method::GET)]
    }
}

impl Default for LaneSeries {
    fn default() -> Self {
        LaneSeries::new()
    }
}
