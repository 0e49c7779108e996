//! The transport's bookkeeping, in the agent's state: one
//! [`Session`] per peer, the number of the connection allowed to read and
//! write for it, and the frames a connection writes next. Kept under the
//! agent's lock with the engine, so frames are numbered in the order the
//! engine sends them and delivered in the order they were numbered.

use coterie_core::session::{Limits, Received, Sent, Session, SessionStatus};
use coterie_core::wire;
use coterie_core::NodeId;
use std::collections::BTreeMap;

/// The sessions with every peer, in the agent's state.
pub(crate) struct PeerLinks {
    links: BTreeMap<NodeId, PeerLink>,
}

struct PeerLink {
    session: Session,
    /// The number of the newest connection with the peer, dialled or
    /// accepted: only it delivers and writes.
    connection: u64,
    /// Counters for `coterie status`: connections made, overflows, gaps.
    connections: u64,
    overflows: u64,
    gaps: u64,
}

/// What to do with a frame that arrived, after the session saw it.
pub(crate) enum Inbound {
    /// Hand it to the engine.
    Deliver,
    /// Frames before it were lost: declare the peer failed, then deliver.
    AfterGap(u64),
    /// A duplicate, or from an older incarnation: drop it.
    Skip,
    /// A newer connection from the peer took over: stop reading this one.
    Superseded,
}

impl PeerLinks {
    pub(crate) fn new(peers: &[NodeId]) -> PeerLinks {
        let link = || PeerLink {
            session: Session::new(Limits::default()),
            connection: 0,
            connections: 0,
            overflows: 0,
            gaps: 0,
        };
        PeerLinks { links: peers.iter().map(|&p| (p, link())).collect() }
    }

    fn link(&mut self, peer: NodeId) -> &mut PeerLink {
        self.links.get_mut(&peer).expect("a session per peer of the configuration")
    }

    /// Numbers `body` for `peer`: its number, and `Some(dropped)` when
    /// the session overflowed (the peer must be declared failed).
    pub(crate) fn send(&mut self, peer: NodeId, body: Vec<u8>) -> (u64, Option<usize>) {
        let link = self.link(peer);
        let sent = link.session.send(body);
        match sent {
            Sent::Kept(_) => (sent.seq(), None),
            Sent::Overflowed { dropped, .. } => {
                link.overflows += 1;
                (sent.seq(), Some(dropped))
            }
        }
    }

    /// The peer (incarnation `boot`) dialled in, having delivered up to
    /// `delivered` of our session (if it expected this incarnation): the
    /// new connection's terms.
    pub(crate) fn accepted(&mut self, peer: NodeId, boot: u64, delivered: u64) -> Accepted {
        let (restarted, connection) = self.welcomed(peer, boot, delivered);
        Accepted { restarted, delivered: self.link(peer).session.ack(), connection }
    }

    /// A dial to `peer` is connected: the incarnation our session expects
    /// and how much of its session we delivered (for the Hello), and every
    /// frame ours keeps, to write right behind it.
    pub(crate) fn dialling(&mut self, peer: NodeId) -> (Option<u64>, u64, Batch) {
        let session = &self.link(peer).session;
        (session.peer_boot(), session.ack(), Batch::after(session, 0))
    }

    /// Our dial was answered by the peer's incarnation `boot`, which has
    /// delivered up to `delivered` (or, through [`accepted`](Self::accepted),
    /// its dial was): whether it restarted (what was written behind the
    /// Hello was meant for the old process, and the session starts afresh),
    /// and the connection's number.
    pub(crate) fn welcomed(&mut self, peer: NodeId, boot: u64, delivered: u64) -> (bool, u64) {
        let link = self.link(peer);
        let restarted = link.session.bind(boot);
        link.session.acked(boot, delivered);
        link.connection += 1;
        link.connections += 1;
        (restarted, link.connection)
    }

    /// The peer's incarnation `boot` asked us to dial it: whether that is
    /// a new incarnation (the session starts afresh, and a connection to
    /// the old one writes no more).
    pub(crate) fn called(&mut self, peer: NodeId, boot: u64) -> bool {
        self.link(peer).session.bind(boot)
    }

    /// What connection `connection`, to `boot`, having written up to
    /// `after`, writes next; `None` if a newer connection took over or the
    /// session is now bound to another incarnation.
    pub(crate) fn pending(
        &mut self,
        peer: NodeId,
        (connection, boot): (u64, u64),
        after: u64,
    ) -> Option<Batch> {
        let link = self.link(peer);
        (link.connection == connection && link.session.peer_boot() == Some(boot))
            .then(|| Batch::after(&link.session, after))
    }

    /// Where every session stands, for `coterie status`.
    pub(crate) fn status(&self) -> Vec<SessionStatus> {
        self.links
            .iter()
            .map(|(peer, l)| SessionStatus {
                connections: l.connections,
                overflows: l.overflows,
                gaps: l.gaps,
                ..l.session.status(peer.0)
            })
            .collect()
    }

    /// Frame `seq`, acknowledging `ack`, arrived on connection
    /// `connection` from `peer`'s incarnation `boot`.
    pub(crate) fn receive(
        &mut self,
        peer: NodeId,
        connection: u64,
        boot: u64,
        seq: u64,
        ack: u64,
    ) -> Inbound {
        let link = self.link(peer);
        if link.connection != connection {
            return Inbound::Superseded;
        }
        link.session.acked(boot, ack);
        match link.session.receive(boot, seq) {
            Received::Deliver => Inbound::Deliver,
            Received::Gap { lost } => {
                link.gaps += 1;
                Inbound::AfterGap(lost)
            }
            Received::Duplicate | Received::Stale => Inbound::Skip,
        }
    }
}

/// An accepted connection's terms.
pub(crate) struct Accepted {
    /// The peer is a new incarnation: the session started afresh.
    pub(crate) restarted: bool,
    /// How much of the peer's session was delivered, for the Welcome.
    pub(crate) delivered: u64,
    /// The connection's number.
    pub(crate) connection: u64,
}

/// Frames encoded for one write, and the number of the last.
pub(crate) struct Batch {
    pub(crate) bytes: Vec<u8>,
    pub(crate) last: Option<u64>,
}

impl Batch {
    fn after(session: &Session, after: u64) -> Batch {
        let ack = session.ack();
        let mut bytes = Vec::new();
        let mut last = None;
        for (seq, body) in session.after(after) {
            wire::write_message(seq, ack, body, &mut bytes);
            last = Some(seq);
        }
        Batch { bytes, last }
    }
}
