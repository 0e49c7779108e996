//! A heartbeat failure detector, free of I/O.
//!
//! Any message from a peer counts as hearing from it. A peer that has been
//! heard from is *up*; once a peer this node *watches* has been silent for
//! `failure_timeout` it is suspected *down*; hearing from it again brings
//! it back up.
//!
//! Which peers are watched is the engine's choice
//! ([`Detector`](crate::algorithm::Detector)): with `all`, every peer, each
//! of which heartbeats this node every period; with `ring`, a few, each
//! probed every period it was not heard from (and answering at once),
//! plus any peer another
//! node has announced it suspects, until it is heard from
//! ([`check_on`](FailureDetector::check_on)). A peer that is not watched
//! keeps its standing, however long it is silent: its watchers speak for
//! it.
//!
//! Heartbeats carry the sender's incarnation (boot id). A peer that comes
//! back with a new one restarted, however quickly: it is reported down (and
//! then up again, as heard from), so every layer forgets what it expected of
//! the old process.
//!
//! A node that was itself stalled (SIGSTOP, a long pause) notices the gap
//! in its own timer and does not blame its peers for the silence it could
//! not hear: see [`FailureDetector::forgive_stall`]. A node that is merely
//! starved (its timer firing a period or more late, as on a machine with
//! more busy processes than cores) cannot trust short silences either: it
//! raises an *awareness* score that stretches its timeout, and lowers it
//! again once its timer keeps time (Dadgar, Phillips and Currey, "Lifeguard:
//! Local Health Awareness for More Accurate Failure Detection", 2018; the
//! score plays the part of their local health multiplier). See
//! [`FailureDetector::ran_late`].
//!
//! The transport may also report that a peer's connection closed and that a
//! redial was refused: the peer's process is gone, so the detector declares
//! it down at once instead of waiting out the timeout. A hung process (one
//! stopped with SIGSTOP, say) keeps its sockets open and is caught only by
//! the timeout.

use crate::outbox::Time;
use crate::types::NodeId;
use std::collections::BTreeMap;
use std::time::Duration;

/// A change of opinion about one peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// The peer was heard from and is now counted as up.
    Up(NodeId),
    /// The peer was heard from again after this node suspected it on a
    /// timeout or a lost link, with no sign that it restarted: it is
    /// counted as up, and it does not know that this node forgot what it
    /// had asked of it meanwhile (see [`Engine`](crate::Engine)'s
    /// re-admission).
    Back(NodeId),
    /// The peer is now suspected down.
    Down(NodeId),
}

#[derive(Clone, Copy, Debug)]
struct Health {
    /// When the peer was last heard from (or when watching began).
    last_heard: Time,
    /// Whether the peer currently counts as up.
    up: bool,
    /// The incarnation its heartbeats last carried.
    incarnation: Option<u64>,
    /// Whether its silence counts: this node expects to hear from it
    /// every period.
    watched: bool,
    /// Another node announced it suspects the peer: its silence counts
    /// until it is heard from.
    checking: bool,
    /// It was suspected on a timeout or a lost link rather than seen to
    /// restart: if it comes back, it comes back as itself, unaware.
    forgotten: bool,
}

impl Health {
    /// Whether the peer's silence would make it suspected now.
    fn expected(&self) -> bool {
        self.up && (self.watched || self.checking)
    }
}

/// Tracks which peers are up.
#[derive(Clone, Debug)]
pub struct FailureDetector {
    /// The configured failure timeout: the timeout while this node keeps
    /// time.
    timeout: Duration,
    /// How many times over the configured timeout this node waits, less
    /// one: raised each time its own timer runs late, lowered after each
    /// timeout's length on time.
    awareness: u32,
    /// When the awareness was last raised or lowered.
    awareness_moved: Time,
    peers: BTreeMap<NodeId, Health>,
}

impl FailureDetector {
    /// Starts watching `peers` at `now`. Every peer starts out not up: it is
    /// counted up once heard from. Every peer is watched until
    /// [`set_watched`](Self::set_watched) says otherwise.
    pub fn new(peers: impl IntoIterator<Item = NodeId>, timeout: Duration, now: Time) -> Self {
        let health = Health {
            last_heard: now,
            up: false,
            incarnation: None,
            watched: true,
            checking: false,
            forgotten: false,
        };
        FailureDetector {
            timeout,
            awareness: 0,
            awareness_moved: now,
            peers: peers.into_iter().map(|p| (p, health)).collect(),
        }
    }

    /// The highest awareness: a starved node waits at most
    /// `MAX_AWARENESS + 1` = 8 times the configured timeout, Lifeguard's
    /// default multiplier.
    pub const MAX_AWARENESS: u32 = 7;

    /// The timeout in force: the configured one times one plus the
    /// awareness.
    pub fn timeout(&self) -> Duration {
        self.timeout * (1 + self.awareness)
    }

    /// How many times over the configured timeout this node now waits,
    /// less one (0 while it keeps time).
    pub fn awareness(&self) -> u32 {
        self.awareness
    }

    /// This node's own timer fired a period or more late at `now`: it was
    /// starved of the processor (or busy), so the messages its peers sent
    /// meanwhile may still be waiting unread, and silences it measures are
    /// not to be trusted as they were. The timeout in force grows by the
    /// configured one, up to [`MAX_AWARENESS`](Self::MAX_AWARENESS) times.
    /// Without it, a machine with more busy processes than cores sees every
    /// node suspect live peers, and each suspicion of a coordinator starts
    /// an election that wakes every node and starves them further.
    pub fn ran_late(&mut self, now: Time) {
        self.awareness = (self.awareness + 1).min(Self::MAX_AWARENESS);
        self.awareness_moved = now;
    }

    /// This node's timer fired on time at `now`: after each configured
    /// timeout's length on time, the awareness comes down by one.
    pub fn kept_time(&mut self, now: Time) {
        if self.awareness > 0 && now.saturating_sub(self.awareness_moved) >= self.timeout {
            self.awareness -= 1;
            self.awareness_moved = now;
        }
    }

    /// Whether `peer`'s silence counts from now on. A peer that becomes
    /// watched has its silence counted from `now`: before, nobody here
    /// expected to hear from it.
    pub fn set_watched(&mut self, peer: NodeId, watched: bool, now: Time) {
        if let Some(h) = self.peers.get_mut(&peer) {
            if watched && !h.watched {
                h.last_heard = h.last_heard.max(now);
            }
            h.watched = watched;
        }
    }

    /// Whether `peer` is watched.
    pub fn watched(&self, peer: NodeId) -> bool {
        self.peers.get(&peer).is_some_and(|h| h.watched)
    }

    /// Another node announced that it suspects `peer`. If this node counts
    /// it up, its silence counts until it is heard from, whether or not it
    /// stays watched meanwhile (a coordinator stops being watched once an
    /// election moves on). Returns true if it was not watched: its silence
    /// counts from `now`, and the caller asks it for an answer.
    pub fn check_on(&mut self, peer: NodeId, now: Time) -> bool {
        match self.peers.get_mut(&peer) {
            Some(h) if h.up && !h.checking => {
                h.checking = true;
                if !h.watched {
                    h.last_heard = h.last_heard.max(now);
                }
                !h.watched
            }
            _ => false,
        }
    }

    /// Feeds the detector's state to `h`, its times as seen from `now`
    /// (see [`relative`](crate::outbox::relative)).
    pub fn hash_at<H: std::hash::Hasher>(&self, h: &mut H, now: Time) {
        use std::hash::Hash;
        self.timeout.hash(h);
        self.awareness.hash(h);
        if self.awareness > 0 {
            crate::outbox::relative(self.awareness_moved, now).hash(h);
        }
        for (peer, health) in &self.peers {
            peer.hash(h);
            crate::outbox::relative(health.last_heard, now).hash(h);
            health.up.hash(h);
            health.incarnation.hash(h);
            health.watched.hash(h);
            health.forgotten.hash(h);
            health.checking.hash(h);
        }
    }

    /// Something arrived from `peer`. Returns [`Verdict::Up`] (or
    /// [`Verdict::Back`], for a peer suspected without a restart) if that
    /// changes the peer's standing. Unknown peers are ignored.
    pub fn heard_from(&mut self, peer: NodeId, now: Time) -> Option<Verdict> {
        let health = self.peers.get_mut(&peer)?;
        health.last_heard = health.last_heard.max(now);
        health.checking = false;
        if health.up {
            None
        } else {
            health.up = true;
            let back = std::mem::take(&mut health.forgotten);
            Some(if back { Verdict::Back(peer) } else { Verdict::Up(peer) })
        }
    }

    /// A heartbeat from `peer` carried `incarnation`. If the peer was up
    /// under another incarnation it restarted: it is suspected at once and
    /// [`Verdict::Down`] returned (hearing from it next brings it back up).
    pub fn incarnation(&mut self, peer: NodeId, incarnation: u64) -> Option<Verdict> {
        let health = self.peers.get_mut(&peer)?;
        let previous = health.incarnation.replace(incarnation);
        let restarted = previous.is_some_and(|p| p != incarnation);
        if restarted {
            // It forgot everything itself: nothing to tell it.
            health.forgotten = false;
        }
        if health.up && restarted {
            health.up = false;
            health.checking = false;
            Some(Verdict::Down(peer))
        } else {
            None
        }
    }

    /// The transport has evidence that `peer`'s process is gone: its
    /// connection closed and a redial was refused.
    pub fn link_down(&mut self, peer: NodeId) -> Option<Verdict> {
        let health = self.peers.get_mut(&peer)?;
        if health.up {
            health.up = false;
            health.checking = false;
            health.forgotten = true;
            Some(Verdict::Down(peer))
        } else {
            None
        }
    }

    /// This node itself was not running (stopped, swapped out, starved)
    /// until `now`: silence it could not hear proves nothing about its
    /// peers, so every up peer's silence is counted from `now` instead.
    pub fn forgive_stall(&mut self, now: Time) {
        for health in self.peers.values_mut().filter(|h| h.expected()) {
            health.last_heard = health.last_heard.max(now);
        }
    }

    /// Suspects every up peer whose silence counts and has lasted the
    /// timeout, in id order.
    pub fn check(&mut self, now: Time) -> Vec<Verdict> {
        let timeout = self.timeout();
        self.peers
            .iter_mut()
            .filter(|(_, h)| h.expected() && now.saturating_sub(h.last_heard) >= timeout)
            .map(|(&peer, h)| {
                h.up = false;
                h.checking = false;
                h.forgotten = true;
                Verdict::Down(peer)
            })
            .collect()
    }

    /// The earliest time at which [`check`](Self::check) could suspect
    /// someone, if any peer's silence counts.
    pub fn next_deadline(&self) -> Option<Time> {
        let timeout = self.timeout();
        self.peers.values().filter(|h| h.expected()).map(|h| h.last_heard + timeout).min()
    }

    /// Whether `peer` currently counts as up.
    pub fn is_up(&self, peer: NodeId) -> bool {
        self.peers.get(&peer).is_some_and(|h| h.up)
    }

    /// The incarnation of `peer`, if it counts as up and its heartbeats
    /// have said which.
    pub fn up_incarnation(&self, peer: NodeId) -> Option<u64> {
        self.peers.get(&peer).filter(|h| h.up).and_then(|h| h.incarnation)
    }

    /// Whether `peer` has been heard from after `since`.
    pub fn heard_since(&self, peer: NodeId, since: Time) -> bool {
        self.peers.get(&peer).is_some_and(|h| h.last_heard > since)
    }

    /// Whether every peer counted as up has been heard from after
    /// `since`: none of them can have died unnoticed before then.
    pub fn all_heard_since(&self, since: Time) -> bool {
        self.peers.values().all(|h| !h.up || h.last_heard > since)
    }

    /// The peers currently counted as up, in id order.
    pub fn up_peers(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.peers.iter().filter(|(_, h)| h.up).map(|(&p, _)| p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn peer_counts_as_up_once_heard_from() {
        let mut d = FailureDetector::new([NodeId(2)], ms(250), ms(0));
        assert!(!d.is_up(NodeId(2)));
        assert_eq!(d.heard_from(NodeId(2), ms(10)), Some(Verdict::Up(NodeId(2))));
        assert_eq!(d.heard_from(NodeId(2), ms(20)), None);
        assert!(d.is_up(NodeId(2)));
    }

    #[test]
    fn silent_peer_is_suspected_after_the_timeout_and_not_before() {
        let mut d = FailureDetector::new([NodeId(2), NodeId(3)], ms(250), ms(0));
        d.heard_from(NodeId(2), ms(100));
        d.heard_from(NodeId(3), ms(200));
        assert_eq!(d.next_deadline(), Some(ms(350)));
        assert!(d.check(ms(349)).is_empty());
        assert_eq!(d.check(ms(350)), vec![Verdict::Down(NodeId(2))]);
        assert_eq!(d.next_deadline(), Some(ms(450)));
    }

    #[test]
    fn heartbeat_brings_a_suspected_peer_back() {
        let mut d = FailureDetector::new([NodeId(2)], ms(250), ms(0));
        d.incarnation(NodeId(2), 7);
        d.heard_from(NodeId(2), ms(0));
        assert_eq!(d.check(ms(300)), vec![Verdict::Down(NodeId(2))]);
        // The same incarnation: it was only silent, and does not know.
        assert_eq!(d.heard_from(NodeId(2), ms(310)), Some(Verdict::Back(NodeId(2))));
        assert_eq!(d.link_down(NodeId(2)), Some(Verdict::Down(NodeId(2))));
        // A new one: it restarted while suspected, and knows it forgot.
        assert_eq!(d.incarnation(NodeId(2), 8), None);
        assert_eq!(d.heard_from(NodeId(2), ms(400)), Some(Verdict::Up(NodeId(2))));
    }

    #[test]
    fn refused_redial_suspects_at_once() {
        let mut d = FailureDetector::new([NodeId(2)], ms(250), ms(0));
        d.heard_from(NodeId(2), ms(0));
        assert_eq!(d.link_down(NodeId(2)), Some(Verdict::Down(NodeId(2))));
        assert_eq!(d.link_down(NodeId(2)), None);
        assert!(d.check(ms(1000)).is_empty());
    }

    #[test]
    fn quick_restart_is_seen_through_the_incarnation() {
        let mut d = FailureDetector::new([NodeId(2)], ms(250), ms(0));
        assert_eq!(d.incarnation(NodeId(2), 7), None);
        d.heard_from(NodeId(2), ms(0));
        assert_eq!(d.incarnation(NodeId(2), 7), None);
        assert_eq!(d.incarnation(NodeId(2), 8), Some(Verdict::Down(NodeId(2))));
        assert_eq!(d.heard_from(NodeId(2), ms(1)), Some(Verdict::Up(NodeId(2))));
    }

    #[test]
    fn own_stall_is_not_blamed_on_peers() {
        let mut d = FailureDetector::new([NodeId(2)], ms(250), ms(0));
        d.heard_from(NodeId(2), ms(0));
        d.forgive_stall(ms(2000));
        assert!(d.check(ms(2000)).is_empty());
        assert_eq!(d.check(ms(2250)), vec![Verdict::Down(NodeId(2))]);
    }

    #[test]
    fn a_starved_node_waits_longer_and_comes_back_to_the_configured_timeout() {
        let mut d = FailureDetector::new([NodeId(2)], ms(250), ms(0));
        d.heard_from(NodeId(2), ms(0));
        // Two late ticks: three times the timeout.
        d.ran_late(ms(100));
        d.ran_late(ms(200));
        assert_eq!((d.awareness(), d.timeout()), (2, ms(750)));
        assert!(d.check(ms(749)).is_empty());
        assert_eq!(d.next_deadline(), Some(ms(750)));
        // On time again: down by one per configured timeout.
        d.kept_time(ms(300));
        assert_eq!(d.awareness(), 2, "too soon after the last late tick");
        d.kept_time(ms(450));
        assert_eq!(d.awareness(), 1);
        d.kept_time(ms(650));
        assert_eq!(d.awareness(), 1);
        d.kept_time(ms(700));
        assert_eq!((d.awareness(), d.timeout()), (0, ms(250)));
        assert_eq!(d.check(ms(700)), vec![Verdict::Down(NodeId(2))]);
        // Capped.
        for t in 0..20 {
            d.ran_late(ms(1000 + t));
        }
        assert_eq!(d.timeout(), ms(250) * (FailureDetector::MAX_AWARENESS + 1));
    }

    #[test]
    fn an_unwatched_peer_keeps_its_standing_until_checked_on() {
        let mut d = FailureDetector::new([NodeId(2), NodeId(3)], ms(250), ms(0));
        d.heard_from(NodeId(2), ms(0));
        d.heard_from(NodeId(3), ms(0));
        d.set_watched(NodeId(2), false, ms(0));
        assert_eq!(d.next_deadline(), Some(ms(250))); // n3's
        assert_eq!(d.check(ms(5000)), vec![Verdict::Down(NodeId(3))]);
        assert!(d.is_up(NodeId(2)));
        assert_eq!(d.next_deadline(), None);
        // Someone suspects n2: its silence counts from the announcement.
        assert!(d.check_on(NodeId(2), ms(6000)));
        assert!(!d.check_on(NodeId(2), ms(6010)), "already being checked");
        assert!(d.check(ms(6249)).is_empty());
        // Heard from: the check is over, and n2 is unwatched again.
        d.heard_from(NodeId(2), ms(6100));
        assert_eq!(d.next_deadline(), None);
        assert!(d.check_on(NodeId(2), ms(7000)));
        assert_eq!(d.check(ms(7250)), vec![Verdict::Down(NodeId(2))]);
        // Watched again after a long silence: counted from then.
        d.heard_from(NodeId(2), ms(8000));
        d.set_watched(NodeId(2), false, ms(8000));
        d.set_watched(NodeId(2), true, ms(9000));
        assert_eq!(d.next_deadline(), Some(ms(9250)));
        assert!(!d.check_on(NodeId(2), ms(9000)), "a watched peer needs no probe");
        // ... but its silence keeps counting once it is no longer watched.
        d.set_watched(NodeId(2), false, ms(9100));
        assert_eq!(d.next_deadline(), Some(ms(9250)));
    }

    #[test]
    fn unknown_peers_are_ignored() {
        let mut d = FailureDetector::new([NodeId(2)], ms(250), ms(0));
        assert_eq!(d.heard_from(NodeId(9), ms(1)), None);
        assert_eq!(d.link_down(NodeId(9)), None);
    }
}
