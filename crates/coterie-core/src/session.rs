//! A reliable session between two incarnations of two nodes: what turns a
//! series of TCP connections, any of which may break while both processes
//! live, into the reliable FIFO channel every algorithm here assumes.
//! Free of I/O: the node's transport and the simulator's links drive the
//! same code.
//!
//! ## The protocol
//! Node A keeps one [`Session`] per peer B, bound to the incarnation (boot
//! id) of B it talks to. Its two halves:
//! - **sending**: every frame A sends B gets the next sequence number
//!   (1, 2, ...) and is kept until B acknowledges it;
//! - **receiving**: the highest number A has delivered from B, in order.
//!   A frame numbered at or below it is a duplicate and dropped.
//!
//! Acknowledgements are cumulative and cost no frame of their own: every
//! frame A sends B carries A's delivered count ([`Session::ack`]). With
//! every peer watched, heartbeats flow both ways every period, so an idle
//! link acknowledges within a heartbeat; on a ring of watchers
//! ([`Detector::Ring`](crate::algorithm::Detector::Ring)) a link that goes
//! quiet keeps its last few frames until the next frame back, which
//! memory bounds (below) and nothing else notices.
//!
//! Each connection opens with a handshake that names both sides' boot ids
//! (so each [`bind`](Session::bind)s its session). The dialler writes its
//! Hello and, right behind it, every frame it keeps, in order
//! ([`after`](Session::after)`(0)`): no round trip passes before data
//! flows, and the receiver drops the duplicates. The acceptor's answer says
//! how much it had delivered, which the dialler lets go
//! ([`acked`](Session::acked)). The Hello also names the acceptor's
//! incarnation the dialler's session is bound to: a different process
//! answers and closes without reading the frames behind it, which were
//! meant for its predecessor.
//!
//! ## Incarnations
//! Numbers count from 1 within one pair of incarnations. When a handshake
//! names a boot id other than the one the session is bound to, the peer
//! restarted: both halves start afresh, and whatever was kept for the old
//! process is dropped (it would mean nothing to the new one). The engine
//! hears of the new incarnation from the peer's heartbeats, as it always
//! has: its detector reports the peer down and up again, and every
//! algorithm treats that as a crash and a recovery. Frames that arrive on a
//! connection of an older incarnation are refused ([`Received::Stale`]).
//!
//! ## Across a suspicion: kept
//! A suspicion is the failure detector's guess, and it is often wrong (a
//! pause, a slow link, a partition that heals). The session does not end
//! when the detector suspects the peer: it lives as long as both
//! incarnations do, and what the peer did not acknowledge is sent when it
//! can be, late. This is what the algorithms already meet when a process is
//! paused (its messages arrive when it resumes) and what TCP itself does
//! within one connection; the simulator's pause, delay and crash suites hold
//! with it. Ending sessions at a suspicion would need both sides to agree
//! on the moment, and a peer that never suspected anything would lose
//! frames without being told. Loss that the algorithms must hear of comes
//! only from the one place below.
//!
//! ## Bounded memory
//! A peer that stays unreachable (a stopped process, a long partition)
//! fills its session with frames, heartbeats among them. [`Limits`] caps
//! them in count and bytes. Past the cap the session **overflows**: every
//! unacknowledged frame is dropped and [`Sent::Overflowed`] tells the
//! driver, which declares the peer failed to its engine (as if its
//! connection closed and a redial were refused). Numbers go on rising, so
//! the peer, when it is reached again, sees a **gap** ([`Received::Gap`]):
//! its driver declares *this* node failed to its own engine before
//! delivering what follows. Both sides thus see a failure and a recovery
//! around the lost frames, as after a crash: never a silent loss.

use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// How much one session may keep unacknowledged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Limits {
    /// Frames kept at most.
    pub max_frames: usize,
    /// Bytes kept at most (frame bodies).
    pub max_bytes: usize,
}

impl Default for Limits {
    /// 8192 frames or 8 MiB: several minutes of heartbeats to a peer that
    /// is unreachable, far more than any algorithm has in flight.
    fn default() -> Self {
        Limits { max_frames: 8192, max_bytes: 8 << 20 }
    }
}

/// What became of a frame handed to [`Session::send`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sent {
    /// Kept under this number; write it now if a connection is up.
    Kept(u64),
    /// Kept under this number, but the cap was reached first: the `dropped`
    /// frames before it, never acknowledged, are gone. The driver must
    /// declare the peer failed to its engine.
    Overflowed {
        /// The new frame's number.
        seq: u64,
        /// How many unacknowledged frames were dropped.
        dropped: usize,
    },
}

impl Sent {
    /// The frame's number.
    pub fn seq(self) -> u64 {
        match self {
            Sent::Kept(seq) | Sent::Overflowed { seq, .. } => seq,
        }
    }
}

/// What to do with a frame that arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Received {
    /// Next in order: deliver it.
    Deliver,
    /// Delivered before (a resend after a reconnection): drop it.
    Duplicate,
    /// Frames before it were lost (the sender's session overflowed): the
    /// driver declares the sender failed to its engine, then delivers it.
    Gap {
        /// How many frames are missing.
        lost: u64,
    },
    /// It came on a connection of another incarnation than the one the
    /// session is bound to: drop it.
    Stale,
}

/// Where one session stands, for `coterie status`: the session's own
/// numbers, and the counters its driver keeps.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionStatus {
    /// The peer.
    pub peer: u32,
    /// The peer's incarnation the session is bound to.
    pub peer_boot: Option<u64>,
    /// Frames sent and not yet acknowledged.
    pub unacked: usize,
    /// The highest number the peer acknowledged.
    pub acked: u64,
    /// The highest number delivered from the peer.
    pub delivered: u64,
    /// Connections to the peer that were answered (the first, then every
    /// reconnection).
    pub connections: u64,
    /// Times the session overflowed (the peer declared failed).
    pub overflows: u64,
    /// Gaps seen in what the peer sent (it was declared failed).
    pub gaps: u64,
}

/// One node's session with one peer; see the module documentation.
#[derive(Clone, Debug, Hash)]
pub struct Session {
    limits: Limits,
    /// The peer's incarnation this session is bound to; `None` until a
    /// handshake names it (frames sent meanwhile go to whichever
    /// incarnation answers first).
    peer_boot: Option<u64>,
    /// The number the next frame gets.
    next_seq: u64,
    /// Frames sent and not acknowledged, oldest first, with their numbers.
    unacked: VecDeque<(u64, Vec<u8>)>,
    unacked_bytes: usize,
    /// The highest number delivered from the peer.
    delivered: u64,
}

impl Session {
    /// A session bound to no incarnation yet.
    pub fn new(limits: Limits) -> Session {
        Session {
            limits,
            peer_boot: None,
            next_seq: 1,
            unacked: VecDeque::new(),
            unacked_bytes: 0,
            delivered: 0,
        }
    }

    /// The peer's incarnation, once a handshake named it.
    pub fn peer_boot(&self) -> Option<u64> {
        self.peer_boot
    }

    /// A handshake named the peer's incarnation. Returns `true` when it
    /// differs from the one the session was bound to: the peer restarted,
    /// and both halves started afresh.
    pub fn bind(&mut self, boot: u64) -> bool {
        match self.peer_boot.replace(boot) {
            Some(old) if old != boot => {
                self.next_seq = 1;
                self.unacked.clear();
                self.unacked_bytes = 0;
                self.delivered = 0;
                true
            }
            _ => false,
        }
    }

    /// Numbers `body` and keeps it until acknowledged.
    pub fn send(&mut self, body: Vec<u8>) -> Sent {
        let seq = self.next_seq;
        self.next_seq += 1;
        let full = self.unacked.len() >= self.limits.max_frames
            || self.unacked_bytes + body.len() > self.limits.max_bytes;
        let dropped = if full { self.unacked.len() } else { 0 };
        if full {
            self.unacked.clear();
            self.unacked_bytes = 0;
        }
        self.unacked_bytes += body.len();
        self.unacked.push_back((seq, body));
        if full {
            Sent::Overflowed { seq, dropped }
        } else {
            Sent::Kept(seq)
        }
    }

    /// The peer (incarnation `boot`) has delivered everything up to `ack`:
    /// those frames are let go. An acknowledgement from another
    /// incarnation, or of more than was sent, changes nothing beyond what
    /// was sent.
    pub fn acked(&mut self, boot: u64, ack: u64) {
        if self.peer_boot != Some(boot) {
            return;
        }
        while let Some((seq, body)) = self.unacked.front() {
            if *seq > ack {
                break;
            }
            self.unacked_bytes -= body.len();
            self.unacked.pop_front();
        }
    }

    /// The frames kept that are numbered above `after`, in order: what a
    /// connection that has written up to `after` writes next.
    pub fn after(&self, after: u64) -> impl Iterator<Item = (u64, &[u8])> {
        // Numbers rise along the queue: skip from the front.
        let skip = self.unacked.partition_point(|(seq, _)| *seq <= after);
        self.unacked.range(skip..).map(|(seq, body)| (*seq, body.as_slice()))
    }

    /// Frame `seq` arrived on a connection from the peer's incarnation
    /// `boot`.
    pub fn receive(&mut self, boot: u64, seq: u64) -> Received {
        if self.peer_boot != Some(boot) {
            return Received::Stale;
        }
        if seq <= self.delivered {
            return Received::Duplicate;
        }
        let lost = seq - self.delivered - 1;
        self.delivered = seq;
        if lost == 0 {
            Received::Deliver
        } else {
            Received::Gap { lost }
        }
    }

    /// The highest number the peer has acknowledged (everything sent, when
    /// nothing is kept). A connection that writes frames and sees this
    /// stand still for long is presumed dead.
    pub fn acked_upto(&self) -> u64 {
        self.unacked.front().map_or(self.next_seq - 1, |(seq, _)| seq - 1)
    }

    /// What to acknowledge on every frame to the peer: the highest number
    /// delivered from it.
    pub fn ack(&self) -> u64 {
        self.delivered
    }

    /// The session's own numbers, for a [`SessionStatus`] of `peer` (the
    /// driver adds its counters).
    pub fn status(&self, peer: u32) -> SessionStatus {
        SessionStatus {
            peer,
            peer_boot: self.peer_boot,
            unacked: self.unacked.len(),
            acked: self.acked_upto(),
            delivered: self.delivered,
            ..SessionStatus::default()
        }
    }

    /// Frames kept unacknowledged.
    pub fn unacked(&self) -> usize {
        self.unacked.len()
    }

    /// Bytes kept unacknowledged.
    pub fn unacked_bytes(&self) -> usize {
        self.unacked_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: u64 = 0xB;

    fn bound() -> Session {
        let mut s = Session::new(Limits::default());
        assert!(!s.bind(B), "the first incarnation named is no restart");
        s
    }

    /// What a new connection writes after the handshake said `delivered`.
    fn resent(s: &mut Session, delivered: u64) -> Vec<(u64, Vec<u8>)> {
        s.acked(B, delivered);
        s.after(0).map(|(seq, body)| (seq, body.to_vec())).collect()
    }

    #[test]
    fn frames_are_numbered_from_one_and_kept_until_acknowledged() {
        let mut s = bound();
        assert_eq!(s.send(b"a".to_vec()), Sent::Kept(1));
        assert_eq!(s.send(b"bc".to_vec()), Sent::Kept(2));
        assert_eq!(s.send(b"d".to_vec()), Sent::Kept(3));
        assert_eq!((s.unacked(), s.unacked_bytes()), (3, 4));
        assert_eq!(s.acked_upto(), 0);
        s.acked(B, 2);
        assert_eq!((s.unacked(), s.unacked_bytes()), (1, 1));
        assert_eq!(s.acked_upto(), 2);
        s.acked(B, 1); // an older acknowledgement, late: nothing changes
        assert_eq!(s.unacked(), 1);
        s.acked(B, 99); // more than was sent: everything sent is covered
        assert_eq!((s.unacked(), s.unacked_bytes(), s.acked_upto()), (0, 0, 3));
        assert_eq!(s.send(b"e".to_vec()), Sent::Kept(4), "numbers never go back");
    }

    #[test]
    fn a_reconnection_resends_what_the_peer_has_not_delivered_in_order() {
        let mut s = bound();
        for body in [b"1", b"2", b"3", b"4"] {
            s.send(body.to_vec());
        }
        s.acked(B, 1); // piggybacked on the peer's traffic
                       // The connection broke; the new one's handshake says 2 arrived.
        assert_eq!(resent(&mut s, 2), vec![(3, b"3".to_vec()), (4, b"4".to_vec())]);
        // It breaks again before anything is acknowledged: the same again.
        assert_eq!(resent(&mut s, 2), vec![(3, b"3".to_vec()), (4, b"4".to_vec())]);
        assert_eq!(resent(&mut s, 4), vec![]);
    }

    #[test]
    fn a_connection_writes_what_follows_what_it_wrote() {
        let mut s = bound();
        for body in [b"1", b"2", b"3"] {
            s.send(body.to_vec());
        }
        let next: Vec<u64> = s.after(1).map(|(seq, _)| seq).collect();
        assert_eq!(next, vec![2, 3]);
        assert_eq!(s.after(3).count(), 0);
        s.acked(B, 2);
        let next: Vec<u64> = s.after(0).map(|(seq, _)| seq).collect();
        assert_eq!(next, vec![3], "what is acknowledged is gone");
    }

    #[test]
    fn the_receiver_delivers_each_number_once_in_order() {
        let mut r = bound();
        assert_eq!(r.receive(B, 1), Received::Deliver);
        assert_eq!(r.receive(B, 2), Received::Deliver);
        assert_eq!(r.ack(), 2);
        // A resend after a reconnection repeats what already arrived.
        assert_eq!(r.receive(B, 1), Received::Duplicate);
        assert_eq!(r.receive(B, 2), Received::Duplicate);
        assert_eq!(r.receive(B, 3), Received::Deliver);
        assert_eq!(r.ack(), 3);
    }

    #[test]
    fn a_gap_is_reported_with_its_size_and_then_delivered() {
        let mut r = bound();
        assert_eq!(r.receive(B, 1), Received::Deliver);
        assert_eq!(r.receive(B, 5), Received::Gap { lost: 3 });
        assert_eq!(r.ack(), 5);
        assert_eq!(r.receive(B, 6), Received::Deliver);
    }

    #[test]
    fn a_new_incarnation_starts_both_halves_afresh() {
        let mut s = bound();
        s.send(b"for the old process".to_vec());
        assert_eq!(s.receive(B, 1), Received::Deliver);
        assert!(s.bind(0xC), "another boot id: the peer restarted");
        assert_eq!((s.unacked(), s.ack()), (0, 0));
        assert_eq!(s.send(b"x".to_vec()), Sent::Kept(1), "numbering starts again");
        assert_eq!(s.receive(0xC, 1), Received::Deliver);
        assert!(!s.bind(0xC), "the same boot again is no restart");
        assert_eq!(s.ack(), 1);
    }

    #[test]
    fn frames_and_acks_of_another_incarnation_are_refused() {
        let mut s = bound();
        s.send(b"x".to_vec());
        assert_eq!(s.receive(0xC, 1), Received::Stale);
        s.acked(0xC, 1);
        assert_eq!(s.unacked(), 1, "an old connection's ack covers nothing");
        let unbound = &mut Session::new(Limits::default());
        assert_eq!(unbound.receive(B, 1), Received::Stale, "no handshake yet");
    }

    #[test]
    fn frames_sent_before_any_handshake_go_to_the_first_incarnation_bound() {
        let mut s = Session::new(Limits::default());
        s.send(b"early".to_vec());
        assert!(!s.bind(B));
        assert_eq!(resent(&mut s, 0), vec![(1, b"early".to_vec())]);
    }

    #[test]
    fn the_frame_cap_overflows_by_dropping_the_unacknowledged_and_numbers_go_on() {
        let mut s = Session::new(Limits { max_frames: 3, max_bytes: 1 << 20 });
        s.bind(B);
        for _ in 0..3 {
            assert!(matches!(s.send(vec![0]), Sent::Kept(_)));
        }
        assert_eq!(s.send(vec![1]), Sent::Overflowed { seq: 4, dropped: 3 });
        assert_eq!(resent(&mut s, 0), vec![(4, vec![1])]);
        assert_eq!(s.send(vec![2]), Sent::Kept(5));
        // The receiver, reached again, sees the gap.
        let mut r = bound();
        assert_eq!(r.receive(B, 4), Received::Gap { lost: 3 });
    }

    #[test]
    fn the_byte_cap_overflows_too() {
        let mut s = Session::new(Limits { max_frames: 100, max_bytes: 10 });
        s.bind(B);
        assert_eq!(s.send(vec![0; 6]), Sent::Kept(1));
        assert_eq!(s.send(vec![0; 6]), Sent::Overflowed { seq: 2, dropped: 1 });
        assert_eq!(s.unacked_bytes(), 6);
    }
}
