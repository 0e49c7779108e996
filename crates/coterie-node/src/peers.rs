//! The handles of each peer's connection tasks: what the agent pokes when
//! it has numbered frames for a peer, and what a fault pokes to break or
//! slow a peer's connections. The tasks themselves are in
//! [`transport`](crate::transport); this file knows nothing of them, nor
//! of the agent, so both can hold it.

use coterie_core::NodeId;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;
use tokio::sync::{mpsc, watch, Notify};

/// Frames held back by an injected delay, each with when it is due.
pub(crate) type Lane = mpsc::UnboundedReceiver<(Instant, Vec<u8>)>;

/// The handles of one peer's tasks.
pub(crate) struct Peer {
    /// Where the peer listens.
    pub(crate) addr: String,
    /// Frames were numbered: the connection writes them.
    pub(crate) wake: Notify,
    /// The peer, above this node, asked to be dialled (it is up): a dialler
    /// backing off dials now.
    pub(crate) redial: Notify,
    /// The connection the peer, below this node, dialled closed: is the
    /// peer still there?
    pub(crate) closed: Notify,
    /// Bumped by `coterie fault reset`: the connection closes.
    pub(crate) reset: watch::Sender<u64>,
    /// Frames held back by an injected delay.
    lane: mpsc::UnboundedSender<(Instant, Vec<u8>)>,
    /// How many frames are in the lane: while any are, the undelayed wait
    /// behind them (order is kept).
    delayed: AtomicUsize,
}

/// Every peer's handles; see the module documentation.
pub(crate) struct Peers {
    peers: BTreeMap<NodeId, Peer>,
}

impl Peers {
    /// Handles for `peers` (id, peer address), and the receiving end of
    /// each one's delay lane, for its [`delay_lane`](crate::transport::delay_lane) task.
    pub(crate) fn new(peers: &[(NodeId, String)]) -> (Peers, Vec<(NodeId, Lane)>) {
        let mut handles = BTreeMap::new();
        let mut lanes = Vec::new();
        for (peer, addr) in peers {
            let (lane, rx) = mpsc::unbounded_channel();
            lanes.push((*peer, rx));
            handles.insert(
                *peer,
                Peer {
                    addr: addr.clone(),
                    wake: Notify::new(),
                    redial: Notify::new(),
                    closed: Notify::new(),
                    reset: watch::channel(0).0,
                    lane,
                    delayed: AtomicUsize::new(0),
                },
            );
        }
        (Peers { peers: handles }, lanes)
    }

    /// `peer`'s handles. Every peer of the configuration has them.
    pub(crate) fn get(&self, peer: NodeId) -> &Peer {
        &self.peers[&peer]
    }

    /// Frames to `peer` were numbered: its connection writes them.
    pub(crate) fn wake(&self, peer: NodeId) {
        if let Some(h) = self.peers.get(&peer) {
            h.wake.notify_one();
        }
    }

    /// Whether frames to `peer` wait in its delay lane.
    pub(crate) fn delaying(&self, peer: NodeId) -> bool {
        self.peers.get(&peer).is_some_and(|h| h.delayed.load(Ordering::Acquire) > 0)
    }

    /// Holds `body` for `peer` back until `due`, behind what is held
    /// already.
    pub(crate) fn delay(&self, peer: NodeId, due: Instant, body: Vec<u8>) {
        if let Some(h) = self.peers.get(&peer) {
            h.delayed.fetch_add(1, Ordering::AcqRel);
            let _ = h.lane.send((due, body));
        }
    }

    /// A frame left `peer`'s delay lane.
    pub(crate) fn undelayed(&self, peer: NodeId) {
        if let Some(h) = self.peers.get(&peer) {
            h.delayed.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Closes the connections with `peers` (`coterie fault reset`). They
    /// are redialled as after any break.
    pub(crate) fn reset(&self, peers: &[NodeId]) {
        for peer in peers {
            if let Some(h) = self.peers.get(peer) {
                h.reset.send_modify(|n| *n += 1);
            }
        }
    }
}
