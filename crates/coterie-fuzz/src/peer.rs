//! Target `peer`: what an authenticated peer can send once its connection
//! is open, through the same decoders and into the same engine as the
//! node's transport (`serve_peer`).
//!
//! The input: byte 0 picks the mutex algorithm, byte 1 the election, byte
//! 2 the cluster's shape (2 to 6 nodes, the fault-tolerant and priority
//! options, the count of a counting algorithm); the rest is frames as on
//! the wire. A `Hello` opens a connection (it must pass the node's check,
//! or the stream ends, as the node closes it), `Message`s are numbered by
//! the sender's session and carry an encoded envelope. Anything else ends
//! the stream. The harness's clock moves forward by the low byte of each
//! message's `ack`, in milliseconds, and fires the engine's timers as the
//! node does; the node asks for the critical section whenever it is idle
//! and leaves it as soon as it is granted, so that grants, releases and
//! every state between are reachable.
//!
//! Checked: nothing panics (arithmetic overflow included, in fuzz builds);
//! every record the engine asks to store reads back as itself; every
//! message it sends encodes.

use crate::frames;
use coterie_core::session::{Limits, Received, Session};
use coterie_core::wire::{self, Envelope, Hello, PeerFrame, PROTOCOL_VERSION};
use coterie_core::{registry, AlgoConfig, Delta, Engine, NodeId, Output};
use std::collections::BTreeMap;
use std::time::Duration;

/// Runs one input.
pub fn run(data: &[u8]) {
    let [m, e, shape, rest @ ..] = data else { return };
    let Some(mut node) = Node::new(*m, *e, *shape) else { return };
    for body in frames(rest) {
        if !node.frame(body) {
            break;
        }
    }
}

/// The node under test, id 1, as its transport and agent drive it.
struct Node {
    engine: Engine,
    hello: Hello,
    members: Vec<NodeId>,
    sessions: BTreeMap<NodeId, Session>,
    /// The open connection: its peer and that peer's incarnation.
    connection: Option<(NodeId, u64)>,
    now: Duration,
}

impl Node {
    fn new(m: u8, e: u8, shape: u8) -> Option<Node> {
        let mutex = &registry::MUTEXES[m as usize % registry::MUTEXES.len()];
        let election = &registry::ELECTIONS[e as usize % registry::ELECTIONS.len()];
        let n = 2 + u32::from(shape % 5);
        let mut cfg = AlgoConfig::for_test(1, n);
        cfg.mutex_options.fault_tolerant = shape & 0x08 != 0;
        cfg.mutex_options.priority = match (shape >> 4) % 3 {
            0 => coterie_core::Priority::Timestamp,
            1 => coterie_core::Priority::FewestEntries,
            _ => coterie_core::Priority::LeastRecent,
        };
        if mutex.claims.counting {
            cfg.capacity = 1 + usize::from(shape >> 6);
        }
        let members = cfg.members.clone();
        let detector = cfg.timing.detector.to_string();
        let engine = Engine::new(cfg, mutex, election, Duration::ZERO);
        let hello = Hello {
            cluster: "fuzz".into(),
            node: NodeId(1),
            protocol: PROTOCOL_VERSION,
            mutex: mutex.name.into(),
            election: election.name.into(),
            detector,
            boot: 1,
            expects: None,
            delivered: 0,
            dial_back: false,
            partitions: "detector".into(),
        };
        let mut node = Node {
            engine,
            hello,
            members,
            sessions: BTreeMap::new(),
            connection: None,
            now: Duration::ZERO,
        };
        node.engine.request(node.now, &coterie_core::Name::default(), 1).ok();
        node.drain();
        Some(node)
    }

    /// Handles one frame's body; `false` when the node would close the
    /// connection.
    fn frame(&mut self, body: &[u8]) -> bool {
        let Ok(frame) = wire::decode::<PeerFrame>(body) else { return false };
        match frame {
            PeerFrame::Hello(theirs) => {
                if self.hello.check(&theirs, &self.members).is_err() {
                    return false;
                }
                let session = self
                    .sessions
                    .entry(theirs.node)
                    .or_insert_with(|| Session::new(Limits::default()));
                session.bind(theirs.boot);
                self.connection = Some((theirs.node, theirs.boot));
                true
            }
            PeerFrame::Message { seq, ack, body } => {
                let Some((peer, boot)) = self.connection else { return false };
                self.now += Duration::from_millis(ack & 0xff);
                self.fire_timers();
                let session = self.sessions.get_mut(&peer).expect("bound by its Hello");
                match session.receive(boot, seq) {
                    Received::Deliver => {}
                    Received::Gap { .. } => self.engine.handle_link_down(self.now, peer),
                    Received::Duplicate | Received::Stale => return true,
                }
                if let Ok(envelope) = wire::decode::<Envelope>(&body) {
                    let _ = self.engine.describe(&envelope);
                    let _ = self.engine.handle_message(self.now, peer, envelope);
                }
                self.drain();
                true
            }
            PeerFrame::Welcome { .. } | PeerFrame::Refused(_) => false,
        }
    }

    fn fire_timers(&mut self) {
        while let Some(deadline) = self.engine.next_deadline() {
            if deadline > self.now {
                break;
            }
            self.engine.handle_timeout(deadline.max(self.now));
            self.drain();
        }
    }

    /// Carries out what the engine asks, as the agent does, and keeps the
    /// application busy: leaves the critical section as soon as it is
    /// granted, asks again when idle.
    fn drain(&mut self) {
        // Each round's release or request may produce outputs of its own;
        // a few rounds take them all (a grant needs at most one).
        for _ in 0..4 {
            let mut granted = false;
            let mut any = false;
            while let Some(output) = self.engine.poll_output() {
                any = true;
                match output {
                    Output::Send { envelope, .. } => {
                        let bytes = wire::encode(&envelope);
                        assert_eq!(wire::decode::<Envelope>(&bytes).ok(), Some(envelope));
                    }
                    Output::Persist(change) => {
                        assert_eq!(Delta::decode(&change.encode()), Some(change));
                    }
                    Output::Granted { .. } => granted = true,
                    _ => {}
                }
            }
            if granted {
                self.engine.release(self.now, &coterie_core::Name::default());
            }
            self.engine.request(self.now, &coterie_core::Name::default(), 1).ok();
            if !any {
                break;
            }
        }
    }
}
