//! The node's own wait queue, after the picture in Jones's
//! lecture notes (22C:116, Iowa, 2002): the algorithms
//! grant the *node*, and the node hands each grant to one client session
//! at a time, in the order they asked.
//!
//! It also keeps the **lock delay** (Chubby's and Consul's): after a holder
//! is lost involuntarily, no grant is handed to a session for a while, so
//! that a resource which cannot check fences sees the lost holder's last
//! writes land first. A session lost while holding leaves the node holding
//! on its behalf until the delay ends ([`LocalQueue::lose`]); a peer
//! suspected (it may have held) holds back the grants this node hands out
//! until the delay ends ([`LocalQueue::block_until`]). Times are the
//! agent's, measured from its start.

use coterie_core::Fence;
use std::collections::VecDeque;
use std::time::Duration;
use tokio::sync::oneshot;

/// A session waiting for the critical section.
struct Waiter {
    session: u64,
    grant: oneshot::Sender<Fence>,
}

/// What became of a grant handed to the queue.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Handed {
    /// To this session.
    To(u64),
    /// Held back by the lock delay, to be handed on once it ends.
    Later,
    /// Nobody waits any more: the node should give it back.
    Nobody,
}

/// What is due when the queue's deadline comes.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Due {
    /// The delay for a session lost while holding ended: release.
    Release,
    /// The delay ended with a grant held back: hand it on.
    Grant(Fence),
}

/// The node's own queue of client sessions; see the module documentation.
#[derive(Default)]
pub(crate) struct LocalQueue {
    waiters: VecDeque<Waiter>,
    /// The session holding, and its fence.
    holder: Option<(u64, Fence)>,
    next_session: u64,
    /// No grant is handed to a session before this.
    blocked_until: Duration,
    /// A grant that came while blocked, or before every peer was heard
    /// from.
    held_back: Option<Fence>,
    /// A grant held back until every peer is heard from is looked at again
    /// by this time at the latest ([`hold_back`](Self::hold_back)).
    recheck_at: Option<Duration>,
    /// When the grant being handed out first came.
    arrived: Option<Duration>,
    /// The node holds for a session lost while holding, until this.
    orphaned_until: Option<Duration>,
}

impl LocalQueue {
    pub(crate) fn new_session(&mut self) -> u64 {
        self.next_session += 1;
        self.next_session
    }

    /// Queues `session`; `false` if it already holds.
    pub(crate) fn wait(&mut self, session: u64, grant: oneshot::Sender<Fence>) -> bool {
        if self.holder.is_some_and(|(h, _)| h == session) {
            return false;
        }
        self.waiters.push_back(Waiter { session, grant });
        true
    }

    /// How many sessions wait.
    pub(crate) fn waiting(&self) -> usize {
        self.waiters.len()
    }

    /// Hands `fence` to the first session still waiting, unless the lock
    /// delay holds it back.
    pub(crate) fn grant(&mut self, fence: Fence, now: Duration) -> Handed {
        if now < self.blocked_until {
            self.held_back = Some(fence);
            return Handed::Later;
        }
        self.arrived = None;
        while let Some(waiter) = self.waiters.pop_front() {
            if waiter.grant.send(fence).is_ok() {
                self.holder = Some((waiter.session, fence));
                return Handed::To(waiter.session);
            }
        }
        Handed::Nobody
    }

    /// Holds `fence` back until `recheck` (or until
    /// [`recheck_now`](Self::recheck_now)): the node waits to hear from
    /// every peer before it hands the grant on.
    pub(crate) fn hold_back(&mut self, fence: Fence, recheck: Duration) {
        self.held_back = Some(fence);
        self.recheck_at = Some(recheck);
    }

    /// When the grant held back until every peer is heard from came, if
    /// one is.
    pub(crate) fn awaiting_peers(&self) -> Option<Duration> {
        self.recheck_at.and(self.held_back).and(self.arrived)
    }

    /// Every peer has been heard from: the held-back grant is due as soon
    /// as the lock delay (if any) allows.
    pub(crate) fn recheck_now(&mut self) {
        self.recheck_at = None;
    }

    /// When the grant about to be handed out first came (`now`, unless it
    /// was held back before).
    pub(crate) fn arrived(&mut self, now: Duration) -> Duration {
        *self.arrived.get_or_insert(now)
    }

    /// Takes `session` out of the queue; `true` if it held.
    pub(crate) fn leave(&mut self, session: u64) -> bool {
        self.waiters.retain(|w| w.session != session);
        if self.holder.is_some_and(|(s, _)| s == session) {
            self.holder = None;
            true
        } else {
            false
        }
    }

    /// `session` was lost (it vanished or fell silent): takes it out of
    /// the queue, and if it held, keeps the node holding on its behalf
    /// until `until`. `true` if it held.
    pub(crate) fn lose(&mut self, session: u64, until: Duration) -> bool {
        let held = self.leave(session);
        if held {
            self.orphaned_until = Some(until);
        }
        held
    }

    /// Hands no grant to a session before `until`.
    pub(crate) fn block_until(&mut self, until: Duration) {
        self.blocked_until = self.blocked_until.max(until);
    }

    /// When [`due`](Self::due) next has something.
    pub(crate) fn deadline(&self) -> Option<Duration> {
        let held_back =
            self.held_back.map(|_| self.blocked_until.max(self.recheck_at.unwrap_or_default()));
        [self.orphaned_until, held_back].into_iter().flatten().min()
    }

    /// What the delay lets happen by `now`.
    pub(crate) fn due(&mut self, now: Duration) -> Option<Due> {
        if self.orphaned_until.is_some_and(|t| t <= now) {
            self.orphaned_until = None;
            return Some(Due::Release);
        }
        if now >= self.blocked_until && self.recheck_at.is_none_or(|t| t <= now) {
            self.recheck_at = None;
            return self.held_back.take().map(Due::Grant);
        }
        None
    }

    pub(crate) fn anyone_waiting(&self) -> bool {
        !self.waiters.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn a_session_lost_while_holding_keeps_the_node_holding_for_the_delay() {
        let mut q = LocalQueue::default();
        let (tx, mut rx) = oneshot::channel();
        let s = q.new_session();
        assert!(q.wait(s, tx));
        assert_eq!(q.grant(Fence(7), ms(0)), Handed::To(s));
        assert_eq!(rx.try_recv(), Ok(Fence(7)));
        assert!(q.lose(s, ms(500)));
        assert_eq!(q.deadline(), Some(ms(500)));
        assert_eq!(q.due(ms(499)), None);
        assert_eq!(q.due(ms(500)), Some(Due::Release));
        assert_eq!(q.deadline(), None);
        // A session that only waited leaves no delay behind.
        let (tx, _rx) = oneshot::channel();
        let w = q.new_session();
        q.wait(w, tx);
        assert!(!q.lose(w, ms(900)));
        assert_eq!(q.deadline(), None);
    }

    #[test]
    fn a_grant_held_back_for_the_peers_goes_when_they_are_heard_and_not_before_the_delay() {
        let mut q = LocalQueue::default();
        assert_eq!(q.arrived(ms(100)), ms(100));
        q.hold_back(Fence(4), ms(110));
        assert_eq!(q.awaiting_peers(), Some(ms(100)));
        assert_eq!(q.deadline(), Some(ms(110)), "looked at again by then at the latest");
        assert_eq!(q.due(ms(105)), None);
        q.recheck_now(); // every peer heard from
        assert_eq!(q.awaiting_peers(), None);
        assert_eq!(q.due(ms(105)), Some(Due::Grant(Fence(4))));
        // Heard from, but a lock delay runs: it still waits for the delay.
        q.hold_back(Fence(5), ms(210));
        q.block_until(ms(500));
        q.recheck_now();
        assert_eq!(q.deadline(), Some(ms(500)));
        assert_eq!(q.due(ms(300)), None);
        assert_eq!(q.due(ms(500)), Some(Due::Grant(Fence(5))));
    }

    #[test]
    fn a_grant_during_the_delay_is_handed_on_when_it_ends() {
        let mut q = LocalQueue::default();
        q.block_until(ms(300));
        q.block_until(ms(100)); // an earlier end does not shorten it
        let (tx, mut rx) = oneshot::channel();
        let s = q.new_session();
        q.wait(s, tx);
        assert_eq!(q.grant(Fence(9), ms(50)), Handed::Later);
        assert!(rx.try_recv().is_err());
        assert_eq!(q.deadline(), Some(ms(300)));
        assert_eq!(q.due(ms(299)), None);
        assert_eq!(q.due(ms(300)), Some(Due::Grant(Fence(9))));
        assert_eq!(q.grant(Fence(9), ms(300)), Handed::To(s));
        assert_eq!(rx.try_recv(), Ok(Fence(9)));
    }
}
