//! Consumers of a shared reader: each element goes to one stream; what a stream was given
//! stays "in flight" until it is acknowledged, and goes to the other streams when its
//! stream vanishes first. A stream gets the end-of-sequence marker only once no other
//! stream holds unacknowledged elements (they might come back to it); what is left when
//! the last stream goes waits in the reader for the next one.
//!
//! On a replica, a stream that vanishes may be a consumer that left this replica alive
//! (it found it silent) and re-sent what it consumed here through another: its elements
//! are parked until the consumer's session is flushed for this replica, or the grace
//! period passed, and then only those whose records the split ledger does not hold
//! acknowledged go to the other streams (`Coordinator::watch_session`).

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use crate::coordinator::Coordinator;
use crate::element::{Element, RecordId};
use crate::watch::consumer_time::{ConsumerTime, TimeSpent};
use readerd_common::sync::MutexUnpoisoned;

/// One stream's view.
#[derive(Debug)]
pub struct Consumer {
    pub stream_id: String,
    /// Delivered, not acknowledged, by seq.
    unacked: Mutex<BTreeMap<i64, Element>>,
    delivered: AtomicU64,
    acknowledged: AtomicU64,
    redelivered: AtomicU64,
    /// Acknowledgements not known to be committed yet, and the elements that are.
    commits: Mutex<Commits>,
    /// On a replica: the consumer session the stream belongs to (`ReadRequest.session_id`).
    session: std::sync::OnceLock<String>,
    /// Where its trainer's time goes, as its client reports it.
    pub time: ConsumerTime,
}

/// Which of a stream's acknowledgements are committed: each `(up_to_seq, ticket)` waits
/// until its job has committed ticket `ticket` (outside a cluster, at once).
#[derive(Debug, Default)]
struct Commits {
    waiting: VecDeque<(i64, u64)>,
    /// Elements with a seq below this have their acknowledgement committed.
    through: i64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConsumerStats {
    pub stream_id: String,
    pub delivered: u64,
    pub acknowledged: u64,
    pub redelivered: u64,
    /// Its trainer's time over its last reports (`None` before the first).
    pub time: Option<TimeSpent>,
}

impl Consumer {
    /// The stream belongs to consumer session `session` (on a replica).
    pub fn set_session(&self, session: String) {
        let _ = self.session.set(session);
    }

    /// Whether the stream belongs to a consumer session on a replica (whose client
    /// acknowledges every element it returned before it asks for the next).
    pub fn in_session(&self) -> bool {
        self.session.get().is_some()
    }

    /// Elements delivered to this stream and not acknowledged yet.
    pub fn unacknowledged(&self) -> usize {
        lock(&self.unacked).len()
    }

    /// The payload bytes of the elements delivered to this stream and not acknowledged
    /// yet: the reader holds them until they are.
    pub fn unacknowledged_bytes(&self) -> usize {
        lock(&self.unacked).values().map(Element::payload_bytes).sum()
    }
}

/// A reader's deliveries across its streams.
#[derive(Debug, Default)]
pub struct Delivery {
    consumers: Mutex<Vec<Arc<Consumer>>>,
    /// Elements of vanished streams, for the next stream that asks.
    redelivery: Mutex<VecDeque<Element>>,
    /// Reader numbers of elements taken from `redelivery` by a stream that has not sent
    /// them yet (nor given them back), with how many of each: they are still pending.
    handing: Mutex<std::collections::BTreeMap<u64, usize>>,
    /// On a replica: elements of vanished streams of consumer sessions, by session, until
    /// the job says which of them the session consumed.
    parked: Mutex<Vec<(String, Vec<Element>)>>,
    /// Elements delivered and not acknowledged, over all streams.
    in_flight: AtomicU64,
    /// Reader numbers of acknowledged elements not older than the reader's oldest
    /// snapshot (a shared checkpoint lists them so a restore skips them).
    acknowledged: Mutex<std::collections::BTreeSet<u64>>,
    changed: Notify,
    /// What the reader answers to, once it answers to more than this server (on
    /// replicas, the split ledger): acknowledged records go there.
    coordinator: std::sync::OnceLock<Arc<dyn Coordinator>>,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock_unpoisoned()
}

impl Delivery {
    pub fn attach(&self, stream_id: String) -> Arc<Consumer> {
        let consumer = Arc::new(Consumer {
            stream_id,
            unacked: Mutex::default(),
            delivered: AtomicU64::new(0),
            acknowledged: AtomicU64::new(0),
            redelivered: AtomicU64::new(0),
            commits: Mutex::default(),
            session: Default::default(),
            time: ConsumerTime::default(),
        });
        lock(&self.consumers).push(consumer.clone());
        consumer
    }

    /// The stream is gone: what it did not acknowledge goes to the others.
    pub fn detach(&self, consumer: &Arc<Consumer>) {
        lock(&self.consumers).retain(|c| !Arc::ptr_eq(c, consumer));
        let unacked = std::mem::take(&mut *lock(&consumer.unacked));
        if let (Some(coordinator), Some(session)) = (self.coordinator.get(), consumer.session.get())
            && !unacked.is_empty()
        {
            // Still in flight until the job resolves the session (`take_redelivery`).
            tracing::info!(stream = %consumer.stream_id, elements = unacked.len(), "unacknowledged elements wait for their session");
            let elements: Vec<Element> = unacked.into_values().collect();
            coordinator.watch_session(session, &mut elements.iter().flat_map(|e| &e.records).map(RecordId::split));
            lock(&self.parked).push((session.clone(), elements));
            self.changed.notify_waiters();
            return;
        }
        if !unacked.is_empty() {
            tracing::info!(stream = %consumer.stream_id, elements = unacked.len(), "unacknowledged elements go to other streams");
            self.in_flight.fetch_sub(unacked.len() as u64, Ordering::Relaxed);
            lock(&self.redelivery).extend(unacked.into_values());
        }
        self.changed.notify_waiters();
    }

    /// Acknowledged records go to `coordinator` from now on.
    pub fn answer_to(&self, coordinator: Arc<dyn Coordinator>) {
        let _ = self.coordinator.set(coordinator);
    }

    /// Up to `max` elements waiting for a stream.
    pub fn take_redelivery(&self, max: usize) -> Vec<Element> {
        self.unpark();
        let mut queue = lock(&self.redelivery);
        let n = max.min(queue.len());
        let taken: Vec<Element> = queue.drain(..n).collect();
        if !taken.is_empty() {
            let mut handing = lock(&self.handing);
            for element in &taken {
                *handing.entry(element.index).or_default() += 1;
            }
        }
        taken
    }

    /// An element taken from `redelivery` was sent or given back.
    fn handed(&self, index: u64) {
        let mut handing = lock(&self.handing);
        if let Some(count) = handing.get_mut(&index) {
            *count -= 1;
            if *count == 0 {
                handing.remove(&index);
            }
        }
    }

    /// Parked elements of sessions the job has resolved: those whose records are all
    /// acknowledged in the ledger were consumed (and re-sent through another replica),
    /// the others go to the other streams.
    fn unpark(&self) {
        let Some(coordinator) = self.coordinator.get() else { return };
        let mut parked = lock(&self.parked);
        if parked.is_empty() {
            return;
        }
        let mut sessions: Vec<String> = parked.iter().map(|(session, _)| session.clone()).collect();
        sessions.sort_unstable();
        sessions.dedup();
        let mut settled = 0;
        for session in sessions {
            let Some(acked) = coordinator.session_acked(&session) else { continue };
            let consumed = |element: &Element| {
                !element.records.is_empty()
                    && element.records.iter().all(|r| acked.get(&r.split()).is_some_and(|set| set.contains(r.number)))
            };
            for (_, elements) in parked.extract_if(.., |(parked_for, _)| *parked_for == session) {
                // Out of flight: consumed, or waiting for redelivery.
                settled += elements.len() as u64;
                lock(&self.redelivery).extend(elements.into_iter().filter(|element| !consumed(element)));
            }
        }
        if settled > 0 {
            self.in_flight.fetch_sub(settled, Ordering::Relaxed);
            self.changed.notify_waiters();
        }
    }

    /// Records that `consumer` was given `element` as `seq`.
    pub fn delivered(&self, consumer: &Consumer, seq: i64, element: Element, redelivered: bool) {
        let index = element.index;
        lock(&consumer.unacked).insert(seq, element);
        consumer.delivered.fetch_add(1, Ordering::Relaxed);
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        if redelivered {
            consumer.redelivered.fetch_add(1, Ordering::Relaxed);
            self.handed(index);
        }
    }

    /// The consumer has every element up to `up_to_seq`; returns how many that settled.
    pub fn acknowledge(&self, consumer: &Consumer, up_to_seq: i64) -> u64 {
        let settled = {
            let mut unacked = lock(&consumer.unacked);
            let keep = unacked.split_off(&(up_to_seq.saturating_add(1)));
            let done = std::mem::replace(&mut *unacked, keep);
            lock(&self.acknowledged).extend(done.values().map(|e| e.index));
            let ticket = match self.coordinator.get() {
                Some(coordinator) => coordinator.acknowledge(&mut done.values().flat_map(|e| &e.records)),
                None => 0,
            };
            lock(&consumer.commits).waiting.push_back((up_to_seq, ticket));
            done.len() as u64
        };
        consumer.acknowledged.fetch_add(settled, Ordering::Relaxed);
        self.in_flight.fetch_sub(settled, Ordering::Relaxed);
        if settled > 0 {
            self.changed.notify_waiters();
        }
        settled
    }

    /// How many of `consumer`'s elements (those with a seq below the number returned)
    /// have their acknowledgement committed: to the split ledger in a cluster (every
    /// 100 ms, by the cluster's thread), at once otherwise.
    pub fn committed_elements(&self, consumer: &Consumer) -> i64 {
        let committed = self.coordinator.get().map_or(u64::MAX, |coordinator| coordinator.committed_ticket());
        let mut commits = lock(&consumer.commits);
        while let Some(&(up_to_seq, ticket)) = commits.waiting.front() {
            if ticket > committed {
                break;
            }
            commits.through = commits.through.max(up_to_seq.saturating_add(1));
            commits.waiting.pop_front();
        }
        commits.through
    }

    /// The acknowledged elements numbered from `from` on, ascending.
    pub fn acknowledged_since(&self, from: u64) -> Vec<u64> {
        lock(&self.acknowledged).range(from..).copied().collect()
    }

    /// Forgets acknowledgements older than `from` (no checkpoint restores before it).
    pub fn forget_acknowledged_before(&self, from: u64) {
        let mut acknowledged = lock(&self.acknowledged);
        *acknowledged = acknowledged.split_off(&from);
    }

    /// The oldest element delivered and not acknowledged, waiting for redelivery, or
    /// taken from that queue by a stream that has not sent it yet.
    pub fn oldest_pending(&self) -> Option<u64> {
        // The queue's lock first: an element taken from it is in `handing` before the
        // lock goes (`take_redelivery`).
        let waiting = lock(&self.redelivery).iter().map(|e| e.index).min();
        let handing = lock(&self.handing).keys().next().copied();
        let held = lock(&self.consumers).iter().filter_map(|c| lock(&c.unacked).values().map(|e| e.index).min()).min();
        waiting.into_iter().chain(handing).chain(held).min()
    }

    /// Elements to deliver again (a restored checkpoint's unacknowledged ones).
    pub fn requeue(&self, elements: Vec<Element>) {
        let mut redelivery = lock(&self.redelivery);
        for element in elements {
            self.handed(element.index);
            redelivery.push_back(element);
        }
        drop(redelivery);
        self.changed.notify_waiters();
    }

    /// Elements delivered and not acknowledged, over all streams (parked ones included).
    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// No element is unacknowledged (parked ones included) and none waits for
    /// redelivery: every element delivered so far was consumed.
    pub fn settled(&self) -> bool {
        self.in_flight.load(Ordering::Relaxed) == 0
            && lock(&self.redelivery).is_empty()
            && lock(&self.handing).is_empty()
    }

    /// No other stream holds unacknowledged elements and none waits for redelivery: for
    /// `consumer`, the sequence is over.
    pub fn settled_for(&self, consumer: &Consumer) -> bool {
        let own = lock(&consumer.unacked).len() as u64;
        self.in_flight.load(Ordering::Relaxed) <= own && lock(&self.redelivery).is_empty()
    }

    /// Resolves at the next acknowledgement or departure.
    pub async fn changed(&self) {
        self.changed.notified().await;
    }

    pub fn stats(&self) -> (Vec<ConsumerStats>, u64, u64) {
        let consumers = lock(&self.consumers)
            .iter()
            .map(|c| ConsumerStats {
                stream_id: c.stream_id.clone(),
                delivered: c.delivered.load(Ordering::Relaxed),
                acknowledged: c.acknowledged.load(Ordering::Relaxed),
                redelivered: c.redelivered.load(Ordering::Relaxed),
                time: c.time.recent(),
            })
            .collect();
        let parked: usize = lock(&self.parked).iter().map(|(_, elements)| elements.len()).sum();
        (consumers, self.in_flight.load(Ordering::Relaxed), (lock(&self.redelivery).len() + parked) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn element(key: &str) -> Element {
        Element::new(crate::element::Keys::Strings(vec![key.to_owned()]), Vec::new(), Vec::new())
    }

    #[test]
    fn unacknowledged_elements_of_a_departed_stream_are_redelivered() {
        let delivery = Delivery::default();
        let a = delivery.attach("a".into());
        let b = delivery.attach("b".into());
        for (seq, key) in ["k0", "k1", "k2"].iter().enumerate() {
            delivery.delivered(&a, seq as i64, element(key), false);
        }
        assert_eq!(delivery.acknowledge(&a, 0), 1);
        assert!(!delivery.settled_for(&b), "a still holds two");
        assert!(delivery.settled_for(&a), "its own elements do not hold a stream back");
        delivery.detach(&a);
        let again = delivery.take_redelivery(10);
        assert_eq!(again.iter().map(|e| e.keys.key(0)).collect::<Vec<_>>(), ["k1", "k2"]);
        for (seq, e) in again.into_iter().enumerate() {
            delivery.delivered(&b, seq as i64, e, true);
        }
        assert_eq!(delivery.acknowledge(&b, 1), 2);
        assert!(delivery.settled_for(&b));
        let (stats, in_flight, waiting) = delivery.stats();
        assert_eq!((in_flight, waiting), (0, 0));
        assert_eq!(
            stats,
            vec![ConsumerStats { stream_id: "b".into(), delivered: 2, acknowledged: 2, redelivered: 2, time: None }]
        );
    }
}
