//! The parts of the permit table that queueing adds: a group's live handle ([`GroupQueue`]),
//! the per-shard slab of parked waiters with one intrusive FIFO per bucket ([`Slab`],
//! [`WaitList`]), the future a parked request awaits ([`Waiter`]) and the list of wakers to call
//! once a shard lock is released ([`WakeList`]).
//!
//! Everything here that touches a bucket runs under its shard's lock; the only state shared
//! across shards is a group's [`GroupQueue`], made of atomics (see its `# Ordering`).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use smallvec::SmallVec;

#[cfg(doc)]
use super::PermitTable;
use super::{BucketState, HashedKey, Permit, Shard, ShardState};
use crate::bucket::BucketKey;
use crate::sync::{Arc, AtomicBool, AtomicU64};
use std::sync::atomic::Ordering;

/// Most requests one group may have parked on one node (N5, seed 002's `MAX_GROUP_QUEUE_DEPTH`).
///
/// A footprint backstop, not a fairness knob: username and role bucket keys come from the
/// callers, so a per-bucket cap alone would let many distinct principals each park
/// `size_per_bucket` requests. A parked request costs about 140 bytes here (a 72-byte
/// [`Waiter`], a 40-byte slab node and the slab's spare capacity; `benches/handoff.rs`
/// measures it), so 10,000 cost about 1.4 MB per group, connection state aside. It equals
/// [`MAX_QUEUE_SIZE_PER_BUCKET`](crate::bags::MAX_QUEUE_SIZE_PER_BUCKET), so no configurable
/// per-bucket size is unreachable.
pub const MAX_PARKED_PER_GROUP: u64 = crate::bags::MAX_QUEUE_SIZE_PER_BUCKET as u64;

/// Marks "no node" in a [`WaitList`] link or the slab's free list.
const NIL: u32 = u32::MAX;

/// Wakers a [`WakeList`] holds inline before it spills to the heap: a release hands its slot to
/// one waiter, so only a raised limit or a backlog release wakes more at once, and those are
/// rare enough to allocate.
pub(super) const INLINE_WAKERS: usize = 4;

/// The live throttle state of one workload group on this node, shared by the server (which
/// updates it when the group changes) and every bucket of the group that has parked waiters.
///
/// The server keeps one per group (an `Arc`), passes it to [`PermitTable::acquire`], and after
/// a change calls [`set_node_limit`](Self::set_node_limit) then
/// [`PermitTable::drain_group`], or [`PermitTable::release_group`] when the group stops being
/// throttled. A released handle stays released: a group that is throttled again gets a new
/// handle.
///
/// # Ordering
/// Each field is one atomic and nothing is published through it, so `Relaxed` suffices:
/// - `num_parked` is changed only by read-modify-writes under some bucket's shard lock; a
///   new waiter takes its place with a compare-exchange against the ceiling, and the RMWs on one
///   location are totally ordered, so two shards can never both take the last place (N5 is
///   exact, not check-then-act).
/// - `num_waiting_buckets` and `contended` feed the fair share (D13) only; a concurrent park on
///   another shard may make one decision use a count that is off by the buckets changing at that
///   instant. Fairness is therefore approximate under races; the ceiling never is.
/// - `node_limit` is read on every hand-off. A release that races a raise may use the old
///   value; the server's `drain_group` after the store (same thread, then a lock) sees the new
///   one, so no raise is lost.
/// - `released` is stored before `release_group` locks the shards and read under a shard lock
///   by `acquire`: the mutex orders the two, so an acquire either parks before the release walks
///   its shard (and is released by it) or sees the flag (and is not parked): none is stranded.
pub struct GroupQueue {
    /// The group's live `node_limit`.
    node_limit: AtomicU64,
    /// Waiters of the group parked on this node (all shards).
    num_parked: AtomicU64,
    /// Buckets of the group with at least one parked waiter.
    num_waiting_buckets: AtomicU64,
    /// Set when the ceiling turned away a bucket that was under its fair share; cleared when a
    /// bucket gets its first waiter or the group has none. Counts as one more bucket with
    /// waiters in the share, so a bucket that filled the ceiling alone yields to the newcomer.
    contended: AtomicBool,
    /// Set by `release_group`: no waiter parks any more, every acquire is unthrottled.
    released: AtomicBool,
}

impl GroupQueue {
    /// Creates the handle of a group whose `node_limit` is `node_limit`.
    pub fn new(node_limit: u64) -> Arc<GroupQueue> {
        Arc::new(GroupQueue {
            node_limit: AtomicU64::new(node_limit),
            num_parked: AtomicU64::new(0),
            num_waiting_buckets: AtomicU64::new(0),
            contended: AtomicBool::new(false),
            released: AtomicBool::new(false),
        })
    }

    /// Returns the live `node_limit`.
    pub fn node_limit(&self) -> u64 {
        self.node_limit.load(Ordering::Relaxed)
    }

    /// Stores a new `node_limit`; it applies from the next hand-off or admission. Follow a raise
    /// with [`PermitTable::drain_group`] so parked waiters get the new room at once.
    pub fn set_node_limit(&self, node_limit: u64) {
        self.node_limit.store(node_limit, Ordering::Relaxed);
    }

    /// Returns the number of this group's requests parked on this node (`queued_current`).
    pub fn num_parked(&self) -> u64 {
        self.num_parked.load(Ordering::Relaxed)
    }

    /// Returns the number of this group's buckets with parked requests.
    pub fn num_waiting_buckets(&self) -> u64 {
        self.num_waiting_buckets.load(Ordering::Relaxed)
    }

    /// Whether [`PermitTable::release_group`] released it.
    pub fn is_released(&self) -> bool {
        self.released.load(Ordering::Acquire)
    }

    /// Marks the handle released (under no lock; `release_group` then walks the shards).
    pub(super) fn mark_released(&self) {
        self.released.store(true, Ordering::Release);
    }

    /// Takes one parked place if fewer than `ceiling` are taken (exact: one compare-exchange
    /// loop on one atomic); returns the count it made (its own place included), or the count
    /// seen when refused.
    pub(super) fn try_take_place(&self, ceiling: u64) -> Result<u64, u64> {
        let mut current = self.num_parked.load(Ordering::Relaxed);
        loop {
            if current >= ceiling {
                return Err(current);
            }
            match self.num_parked.compare_exchange_weak(
                current,
                current + 1,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok(current + 1),
                Err(seen) => current = seen,
            }
        }
    }

    /// Gives back `n` parked places.
    pub(super) fn leave_places(&self, n: u64) {
        if n == 0 {
            return;
        }
        let before = self.num_parked.fetch_sub(n, Ordering::Relaxed);
        debug_assert!(before >= n, "N5: parked count underflow");
        if before == n {
            self.contended.store(false, Ordering::Relaxed);
        }
    }

    /// Records that a bucket got its first waiter.
    pub(super) fn bucket_started_waiting(&self) {
        self.num_waiting_buckets.fetch_add(1, Ordering::Relaxed);
        self.contended.store(false, Ordering::Relaxed);
    }

    /// Records that a bucket's last waiter left.
    pub(super) fn bucket_stopped_waiting(&self) {
        let before = self.num_waiting_buckets.fetch_sub(1, Ordering::Relaxed);
        debug_assert!(before >= 1, "waiting-bucket count underflow");
    }

    /// The fair share of `ceiling` for a bucket that has `has_waiters` (D13): the ceiling
    /// divided by the buckets with waiters, counting the asking bucket and, while `contended`,
    /// one turned-away bucket.
    pub(super) fn fair_share(&self, ceiling: u64, has_waiters: bool) -> u64 {
        let waiting = self.num_waiting_buckets.load(Ordering::Relaxed);
        // A bucket without waiters is not yet counted; one with waiters counts the turned-away
        // one while contended (a newcomer is below any share, so it needs no such term).
        let extra = !has_waiters || self.contended.load(Ordering::Relaxed);
        fair_share_of(ceiling, waiting + u64::from(extra))
    }

    /// Records that the ceiling turned away a bucket under its fair share.
    pub(super) fn mark_contended(&self) {
        self.contended.store(true, Ordering::Relaxed);
    }

    /// Whether the contended flag is set (tests and stats).
    pub fn is_contended(&self) -> bool {
        self.contended.load(Ordering::Relaxed)
    }
}

impl fmt::Debug for GroupQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GroupQueue")
            .field("node_limit", &self.node_limit())
            .field("num_parked", &self.num_parked())
            .field("num_waiting_buckets", &self.num_waiting_buckets())
            .field("contended", &self.is_contended())
            .field("released", &self.is_released())
            .finish()
    }
}

/// How many requests may park, passed with each [`PermitTable::acquire`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueuePolicy {
    /// Parked requests per bucket (the group's `queue.size_per_bucket`); 0 never parks.
    pub size_per_bucket: u64,
    /// Parked requests per group on this node; [`MAX_PARKED_PER_GROUP`] outside tests.
    pub group_ceiling: u64,
}

impl QueuePolicy {
    /// `size_per_bucket` under the production ceiling, [`MAX_PARKED_PER_GROUP`].
    pub fn new(size_per_bucket: u64) -> QueuePolicy {
        QueuePolicy {
            size_per_bucket,
            group_ceiling: MAX_PARKED_PER_GROUP,
        }
    }

    /// The bound that refuses one more waiter of a bucket holding `queued` parked requests,
    /// while its group has `group_parked` parked and the bucket's fair share of the ceiling is
    /// `share` (D13), in the order the permit table applies them; `None` when it may park
    /// (N5, N5a). One function for the permit table and for the dry run's would-be queue
    /// ([`crate::throttle::would_park`]), so the dry run refuses what `enabled` refuses.
    pub fn refusal(&self, queued: u64, group_parked: u64, share: u64) -> Option<RefusalReason> {
        if self.size_per_bucket == 0 {
            Some(RefusalReason::NotQueued)
        } else if queued >= self.size_per_bucket {
            Some(RefusalReason::BucketQueueFull)
        } else if group_parked >= self.group_ceiling {
            Some(RefusalReason::GroupQueueFull)
        } else if queued >= share {
            Some(RefusalReason::OverFairShare { share })
        } else {
            None
        }
    }
}

/// A bucket's fair share of a group's `ceiling` of parked requests when `buckets` buckets
/// share it (D13; at least one: the asking bucket).
pub fn fair_share_of(ceiling: u64, buckets: u64) -> u64 {
    ceiling / buckets.max(1)
}

/// Why [`PermitTable::acquire`] neither admitted nor parked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalReason {
    /// The bucket is full and the group does not queue (`size_per_bucket` 0): today's 429.
    NotQueued,
    /// The bucket already has `size_per_bucket` parked requests.
    BucketQueueFull,
    /// The group already has its ceiling of parked requests on this node.
    GroupQueueFull,
    /// The bucket already holds its fair share of the group ceiling (D13); the share is given.
    OverFairShare {
        /// Ceiling ÷ buckets with waiters when the request was refused.
        share: u64,
    },
}

/// A refused acquire, with what the server needs for a clear 429.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "too many requests for this bucket: {in_flight} running (limit {limit}), {queued} queued in the bucket, {group_queued} in the group ({reason:?})"
)]
pub struct Refused {
    /// Which bound refused it.
    pub reason: RefusalReason,
    /// The bucket's in-flight count.
    pub in_flight: u64,
    /// The live `node_limit` it was checked against.
    pub limit: u64,
    /// Requests parked in the bucket.
    pub queued: u64,
    /// Requests of the group parked on this node.
    pub group_queued: u64,
}

/// The outcome of [`PermitTable::acquire`].
#[must_use = "dropping a permit releases it and dropping a waiter leaves the queue"]
#[derive(Debug)]
pub enum Acquire {
    /// Admitted at once.
    Admitted(Permit),
    /// Parked: await the waiter.
    Parked(Waiter),
    /// Neither admitted nor parked.
    Refused(Refused),
    /// The group's handle was released (throttling off, group gone): run without a permit.
    Unthrottled,
}

/// What a parked request gets when its wait ends.
#[must_use = "dropping a permit releases it"]
#[derive(Debug)]
pub enum Grant {
    /// A slot handed over by a release or a drain (N4).
    Permit(Permit),
    /// The group's backlog was released: run without a permit.
    Unthrottled,
    /// A grant from outside the node tier (a shared-tier lease, pushed or acquired for this
    /// bucket): the request holds no node slot; the token names what it holds, and the caller
    /// (who handed it over with [`PermitTable::grant_external`]) owns its release.
    External(u64),
}

/// The state of a slab node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum NodeState {
    /// On the free list.
    Free,
    /// In its bucket's wait list.
    Parked,
    /// Unlinked and holding one in-flight slot of its bucket, not yet taken by its waiter.
    Granted,
    /// Unlinked by a backlog release; holds nothing.
    Released,
    /// Unlinked by [`PermitTable::grant_external`]: holds the external grant in `token`, no node
    /// slot.
    External,
}

/// One parked request's entry.
pub(super) struct Node {
    /// Previous node of the bucket's list, or the next free node while free.
    prev: u32,
    /// Next node of the bucket's list.
    next: u32,
    /// Where the node is.
    pub(super) state: NodeState,
    /// The caller's value (a task id), for listing.
    pub(super) tag: u64,
    /// The external grant's token while `state` is `External`.
    pub(super) token: u64,
    /// The waiter's waker once polled.
    waker: Option<Waker>,
}

impl Node {
    /// Takes the waiter's waker, to wake it after the lock is released.
    pub(super) fn take_waker(&mut self) -> Option<Waker> {
        self.waker.take()
    }
}

/// The nodes of one shard's parked waiters, addressed by index; freed nodes are reused, so the
/// steady state does not allocate and a node never moves while its waiter holds its index.
#[derive(Default)]
pub(super) struct Slab {
    /// The nodes, free or not.
    nodes: Vec<Node>,
    /// Head of the free list.
    free: Option<u32>,
    /// Nodes not free.
    num_used: usize,
}

impl Slab {
    /// Takes a node for a parked waiter.
    fn alloc(&mut self, tag: u64) -> u32 {
        self.num_used += 1;
        let node = Node {
            prev: NIL,
            next: NIL,
            state: NodeState::Parked,
            tag,
            token: 0,
            waker: None,
        };
        match self.free {
            Some(i) => {
                let slot = &mut self.nodes[i as usize];
                debug_assert_eq!(slot.state, NodeState::Free);
                self.free = (slot.prev != NIL).then_some(slot.prev);
                *slot = node;
                i
            }
            None => {
                let i = u32::try_from(self.nodes.len()).expect("fewer than 2^32 parked waiters");
                assert!(i != NIL, "fewer than 2^32 - 1 parked waiters");
                self.nodes.push(node);
                i
            }
        }
    }

    /// Returns a node to the free list; gives back its waker, to be dropped outside the lock.
    pub(super) fn free(&mut self, i: u32) -> Option<Waker> {
        let next_free = self.free.unwrap_or(NIL);
        let node = &mut self.nodes[i as usize];
        debug_assert_ne!(node.state, NodeState::Free, "double free of a waiter node");
        node.state = NodeState::Free;
        node.prev = next_free;
        node.next = NIL;
        self.free = Some(i);
        self.num_used -= 1;
        node.waker.take()
    }

    /// The node at `i`.
    pub(super) fn get_mut(&mut self, i: u32) -> &mut Node {
        &mut self.nodes[i as usize]
    }

    /// The node at `i`.
    pub(super) fn get(&self, i: u32) -> &Node {
        &self.nodes[i as usize]
    }

    /// Nodes in use (parked, granted or released, not yet taken by their waiter).
    pub(super) fn num_used(&self) -> usize {
        self.num_used
    }

    /// Nodes allocated, free or not (the high-water mark of this shard).
    pub(super) fn capacity(&self) -> usize {
        self.nodes.len()
    }
}

impl Node {
    /// Stores `waker` unless it already wakes the same task; returns the replaced one, to be
    /// dropped outside the lock.
    fn register(&mut self, waker: &Waker) -> Option<Waker> {
        match &self.waker {
            Some(w) if w.will_wake(waker) => None,
            _ => self.waker.replace(waker.clone()),
        }
    }
}

/// A bucket's FIFO of parked waiters: a doubly linked list through the shard's [`Slab`], so a
/// cancelled waiter leaves in O(1) wherever it stands.
#[derive(Debug, Clone, Copy)]
pub(super) struct WaitList {
    /// Oldest waiter.
    head: u32,
    /// Newest waiter.
    tail: u32,
    /// Waiters in the list.
    len: u64,
}

impl Default for WaitList {
    fn default() -> Self {
        WaitList {
            head: NIL,
            tail: NIL,
            len: 0,
        }
    }
}

impl WaitList {
    /// Number of parked waiters.
    pub(super) fn len(&self) -> u64 {
        self.len
    }

    /// Whether nobody waits.
    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends a new waiter's node.
    pub(super) fn push_back(&mut self, slab: &mut Slab, tag: u64) -> u32 {
        let i = slab.alloc(tag);
        slab.get_mut(i).prev = self.tail;
        if self.tail == NIL {
            self.head = i;
        } else {
            slab.get_mut(self.tail).next = i;
        }
        self.tail = i;
        self.len += 1;
        i
    }

    /// Unlinks node `i`, which must be in this list; O(1).
    pub(super) fn unlink(&mut self, slab: &mut Slab, i: u32) {
        let (prev, next) = {
            let n = slab.get_mut(i);
            debug_assert_eq!(n.state, NodeState::Parked, "unlinking a node not parked");
            let links = (n.prev, n.next);
            n.prev = NIL;
            n.next = NIL;
            links
        };
        if prev == NIL {
            debug_assert_eq!(self.head, i);
            self.head = next;
        } else {
            slab.get_mut(prev).next = next;
        }
        if next == NIL {
            debug_assert_eq!(self.tail, i);
            self.tail = prev;
        } else {
            slab.get_mut(next).prev = prev;
        }
        self.len -= 1;
    }

    /// Unlinks the oldest waiter and returns its node.
    pub(super) fn pop_front(&mut self, slab: &mut Slab) -> Option<u32> {
        let i = self.head;
        if i == NIL {
            return None;
        }
        self.unlink(slab, i);
        Some(i)
    }

    /// The tags, oldest first.
    pub(super) fn tags(&self, slab: &Slab) -> impl Iterator<Item = u64> {
        let mut i = self.head;
        std::iter::from_fn(move || {
            if i == NIL {
                return None;
            }
            let n = slab.get(i);
            i = n.next;
            Some(n.tag)
        })
    }
}

/// Wakers collected under a shard lock and called after it is released (never wake under the
/// lock: a woken task may run at once on another thread and contend for it).
///
/// A `SmallVec`: most lists stay empty (an admission or a release with nobody waiting), and an
/// empty one is dropped by looking at its length, where an array of `Option<Waker>` slots
/// was dropped slot by slot (two lists a tagged search, about 140 instructions of its
/// throttle: BENCHMARKS.md "The tagged path, cut again").
#[derive(Default)]
pub(super) struct WakeList(SmallVec<[Waker; INLINE_WAKERS]>);

impl WakeList {
    /// Adds a waker.
    pub(super) fn push(&mut self, w: Waker) {
        self.0.push(w);
    }

    /// Wakes them all; call with no lock held. An empty list returns at once.
    pub(super) fn wake_all(&mut self) {
        if self.0.is_empty() {
            return;
        }
        for w in self.0.drain(..) {
            w.wake();
        }
    }
}

impl Drop for WakeList {
    fn drop(&mut self) {
        self.wake_all();
    }
}

/// Hands free slots of `bucket` to its oldest waiters while its in-flight count is below its
/// group's live limit (N4, N1); returns how many were granted. Runs under the shard lock; the
/// wakers go to `wakes`.
pub(super) fn settle(bucket: &mut BucketState, slab: &mut Slab, wakes: &mut WakeList) -> u64 {
    let Some(group) = &bucket.group else {
        return 0;
    };
    let limit = group.node_limit();
    let mut granted = 0;
    while bucket.in_flight < limit {
        let Some(i) = bucket.queue.pop_front(slab) else {
            break;
        };
        bucket.in_flight += 1;
        let node = slab.get_mut(i);
        node.state = NodeState::Granted;
        if let Some(w) = node.waker.take() {
            wakes.push(w);
        }
        granted += 1;
    }
    debug_assert!(
        granted == 0 || bucket.in_flight <= limit,
        "N1: hand-off above the limit"
    );
    group.leave_places(granted);
    bucket.after_leaving_queue();
    granted
}

/// Resolves every waiter of `bucket` as unthrottled (backlog release); returns how many.
pub(super) fn release_all(bucket: &mut BucketState, slab: &mut Slab, wakes: &mut WakeList) -> u64 {
    let mut n = 0;
    while let Some(i) = bucket.queue.pop_front(slab) {
        let node = slab.get_mut(i);
        node.state = NodeState::Released;
        if let Some(w) = node.waker.take() {
            wakes.push(w);
        }
        n += 1;
    }
    if let Some(group) = &bucket.group {
        group.leave_places(n);
    }
    bucket.after_leaving_queue();
    n
}

/// A parked request: a future that resolves to a [`Grant`] when a release or drain hands it a
/// slot, or when its group's backlog is released.
///
/// # Cancel safety
/// Dropping it at any time leaves nothing behind. Still parked: it leaves its bucket's queue at
/// once, in O(1), and the bucket's entry goes if that makes it idle. Already handed a slot but
/// not yet polled to completion: the slot passes to the next waiter of the bucket, or is
/// released (never leaked, never released twice). Released unthrottled: nothing to undo.
#[must_use = "a waiter leaves the queue as soon as it is dropped"]
pub struct Waiter {
    /// The parked entry; `None` once the future has completed.
    inner: Option<ParkedAt>,
    /// The caller's value.
    tag: u64,
    /// Its group's parked count right after it parked, itself included.
    group_parked: u64,
}

/// Where a waiter's node is.
struct ParkedAt {
    /// The bucket's shard.
    shard: Arc<Shard>,
    /// The bucket.
    key: HashedKey,
    /// The node in the shard's slab.
    slot: u32,
}

impl Waiter {
    /// Wraps a node just parked.
    pub(super) fn new(
        shard: Arc<Shard>,
        key: HashedKey,
        slot: u32,
        tag: u64,
        group_parked: u64,
    ) -> Waiter {
        Waiter {
            inner: Some(ParkedAt { shard, key, slot }),
            tag,
            group_parked,
        }
    }

    /// Returns the caller's value given to `acquire`.
    pub fn tag(&self) -> u64 {
        self.tag
    }

    /// Returns how many of its group's requests were parked on this node right after it
    /// parked, itself included: the count its place was taken at (N5), exact, where a count
    /// read later may still hold a waiter already handed its slot but not yet run (N5b).
    pub fn group_parked(&self) -> u64 {
        self.group_parked
    }

    /// Returns the bucket it waits in (`None` once completed).
    pub fn key(&self) -> Option<&BucketKey> {
        self.inner.as_ref().map(|p| &p.key.key)
    }
}

impl Future for Waiter {
    type Output = Grant;

    /// # Panics
    /// When polled again after it returned `Ready`.
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Grant> {
        let this = self.get_mut();
        let at = this.inner.as_ref().expect("Waiter polled after completion");
        let mut old_waker = None;
        let mut token = 0;
        let state = {
            let mut guard = at.shard.state.lock();
            let node = guard.waiters.get_mut(at.slot);
            let state = node.state;
            match state {
                NodeState::Parked => old_waker = node.register(cx.waker()),
                NodeState::Granted | NodeState::Released | NodeState::External => {
                    token = guard.waiters.get(at.slot).token;
                    old_waker = guard.waiters.free(at.slot);
                }
                NodeState::Free => {
                    debug_assert!(false, "a waiter's node was freed under it");
                    guard.count_violation();
                }
            }
            state
        };
        drop(old_waker);
        match state {
            NodeState::Parked => Poll::Pending,
            NodeState::Granted => {
                let ParkedAt { shard, key, .. } = this.inner.take().expect("checked above");
                Poll::Ready(Grant::Permit(Permit { shard, key }))
            }
            NodeState::External => {
                this.inner = None;
                Poll::Ready(Grant::External(token))
            }
            // Free would be a bug (counted above); run unthrottled rather than hang.
            NodeState::Released | NodeState::Free => {
                this.inner = None;
                Poll::Ready(Grant::Unthrottled)
            }
        }
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        let Some(at) = self.inner.take() else {
            return;
        };
        let mut wakes = WakeList::default();
        let old_waker;
        {
            let mut guard = at.shard.state.lock();
            let state = &mut *guard;
            let node_state = state.waiters.get(at.slot).state;
            match node_state {
                NodeState::Parked => state.cancel_parked(&at.key, at.slot, &mut wakes),
                NodeState::Granted => state.release_slot(&at.key, &mut wakes),
                NodeState::External => {
                    let token = state.waiters.get(at.slot).token;
                    state.pass_external(&at.key, token, &mut wakes);
                }
                NodeState::Released => {}
                NodeState::Free => {
                    debug_assert!(false, "a waiter's node was freed under it");
                    state.count_violation();
                }
            }
            old_waker = if node_state == NodeState::Free {
                None
            } else {
                state.waiters.free(at.slot)
            };
        }
        drop(old_waker);
        wakes.wake_all();
    }
}

impl fmt::Debug for Waiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Waiter")
            .field("tag", &self.tag)
            .field("key", &self.key())
            .finish()
    }
}

impl ShardState {
    /// Counts an invariant violation.
    pub(super) fn count_violation(&mut self) {
        self.num_invariant_violations = self.num_invariant_violations.saturating_add(1);
    }

    /// Removes a parked node from its bucket's list (cancellation) and the entry if that makes
    /// the bucket idle (N3). If a raised limit left room that no drain has handed out yet, the
    /// waiters now at the front get it.
    fn cancel_parked(&mut self, key: &HashedKey, slot: u32, wakes: &mut WakeList) {
        let Some(bucket) = self.buckets.get_mut(key) else {
            self.count_violation();
            return;
        };
        bucket.queue.unlink(&mut self.waiters, slot);
        if let Some(group) = &bucket.group {
            group.leave_places(1);
        }
        bucket.after_leaving_queue();
        settle(bucket, &mut self.waiters, wakes);
        if bucket.is_idle() {
            self.buckets.remove(key);
        }
    }
}
