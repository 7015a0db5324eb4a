//! [`SharedCall`] and [`SharedReply`] to and from their protobuf messages.

use std::time::Duration;

use super::proto::shared_request::Call;
use super::proto::shared_response::Reply;
use super::proto::{
    Header, SharedAcquire, SharedBuckets, SharedDenied, SharedGranted, SharedLeases, SharedOffer,
    SharedOfferAnswer, SharedRequest, SharedResponse, SharedRoom,
};
use super::{SharedCall, SharedReply};

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The request message of `call`.
pub fn request(header: Option<Header>, call: SharedCall) -> SharedRequest {
    let call = match call {
        SharedCall::Acquire {
            bucket,
            limit,
            wants_queue,
            extra,
        } => Call::Acquire(SharedAcquire {
            bucket,
            limit,
            wants_queue,
            extra,
        }),
        SharedCall::Renew { leases } => Call::Renew(SharedLeases { leases }),
        SharedCall::Release { leases } => Call::Release(SharedLeases { leases }),
        SharedCall::Offer {
            bucket,
            lease,
            ttl,
            limit,
        } => Call::Offer(SharedOffer {
            bucket,
            lease,
            ttl_ms: millis(ttl),
            limit,
        }),
        SharedCall::Room { buckets } => Call::Room(SharedBuckets { buckets }),
    };
    SharedRequest {
        header,
        call: Some(call),
    }
}

/// The call a request message carries; `None` when it carries none (a newer sender's call
/// this build does not know).
pub fn call_of(req: SharedRequest) -> Option<SharedCall> {
    Some(match req.call? {
        Call::Acquire(a) => SharedCall::Acquire {
            bucket: a.bucket,
            limit: a.limit,
            wants_queue: a.wants_queue,
            extra: a.extra,
        },
        Call::Renew(l) => SharedCall::Renew { leases: l.leases },
        Call::Release(l) => SharedCall::Release { leases: l.leases },
        Call::Offer(o) => SharedCall::Offer {
            bucket: o.bucket,
            lease: o.lease,
            ttl: Duration::from_millis(o.ttl_ms),
            limit: o.limit,
        },
        Call::Room(b) => SharedCall::Room { buckets: b.buckets },
    })
}

/// The response message of `reply`.
pub fn response(reply: SharedReply) -> SharedResponse {
    let reply = match reply {
        SharedReply::Granted { lease, ttl, extra } => Reply::Granted(SharedGranted {
            lease,
            ttl_ms: millis(ttl),
            extra,
        }),
        SharedReply::Denied {
            in_use,
            limit,
            waiter_registered,
        } => Reply::Denied(SharedDenied {
            in_use,
            limit,
            waiter_registered,
        }),
        SharedReply::Overloaded => Reply::Overloaded(true),
        SharedReply::Renewed { lost } => Reply::Lost(SharedLeases { leases: lost }),
        SharedReply::Released => Reply::Released(true),
        SharedReply::OfferAnswer { used, more_waiting } => {
            Reply::Offer(SharedOfferAnswer { used, more_waiting })
        }
        SharedReply::Room { free } => Reply::Room(SharedRoom { free }),
    };
    SharedResponse { reply: Some(reply) }
}

/// The reply a response message carries; `None` when it carries none.
pub fn reply_of(resp: SharedResponse) -> Option<SharedReply> {
    Some(match resp.reply? {
        Reply::Granted(g) => SharedReply::Granted {
            lease: g.lease,
            ttl: Duration::from_millis(g.ttl_ms),
            extra: g.extra,
        },
        Reply::Denied(d) => SharedReply::Denied {
            in_use: d.in_use,
            limit: d.limit,
            waiter_registered: d.waiter_registered,
        },
        Reply::Overloaded(_) => SharedReply::Overloaded,
        Reply::Lost(l) => SharedReply::Renewed { lost: l.leases },
        Reply::Released(_) => SharedReply::Released,
        Reply::Offer(o) => SharedReply::OfferAnswer {
            used: o.used,
            more_waiting: o.more_waiting,
        },
        Reply::Room(r) => SharedReply::Room { free: r.free },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_every_call_and_reply_round_trips() {
        let calls = [
            SharedCall::Acquire {
                bucket: "b".into(),
                limit: 3,
                wants_queue: true,
                extra: 5,
            },
            SharedCall::Renew { leases: vec![1, 2] },
            SharedCall::Release { leases: vec![3] },
            SharedCall::Offer {
                bucket: "b".into(),
                lease: 9,
                ttl: Duration::from_secs(30),
                limit: 4,
            },
            SharedCall::Room {
                buckets: vec!["b".into(), "c".into()],
            },
        ];
        for c in calls {
            assert_eq!(call_of(request(None, c.clone())), Some(c));
        }
        let replies = [
            SharedReply::Granted {
                lease: 4,
                ttl: Duration::from_millis(1500),
                extra: vec![5, 6],
            },
            SharedReply::Denied {
                in_use: 2,
                limit: 2,
                waiter_registered: true,
            },
            SharedReply::Overloaded,
            SharedReply::Renewed { lost: vec![7] },
            SharedReply::Released,
            SharedReply::OfferAnswer {
                used: true,
                more_waiting: false,
            },
            SharedReply::Room {
                free: vec![true, false],
            },
        ];
        for r in replies {
            assert_eq!(reply_of(response(r.clone())), Some(r));
        }
    }
}
