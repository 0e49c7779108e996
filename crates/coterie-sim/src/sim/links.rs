//! The links between the nodes: connections dialled and welcomed, and
//! frames written into them and delivered through each node's sessions
//! (or stopped above them by a partition).

use super::*;

impl<C: Chooser> Simulation<C> {
    pub(super) fn session(&mut self, node: NodeId, peer: NodeId) -> &mut Session {
        let n = self.nodes.get_mut(&node).expect("known node");
        n.sessions.get_mut(&peer).expect("a session per peer")
    }

    /// When a frame `from` → `to` written now lands: a random delay, plus
    /// any delay spike on `from`, after the frame written before it.
    pub(super) fn flight(&mut self, from: NodeId, to: NodeId) -> Time {
        let delay = self.uniform(self.cfg.delay) + self.net.spike(from);
        self.net.land(from, to, self.now + delay, STEP)
    }

    /// `from` dials `to` (anew, breaking any connection it had), writing
    /// every frame its session keeps right behind the Hello.
    pub(super) fn dial(&mut self, from: NodeId, to: NodeId) {
        let boot = self.boot_id(from);
        let expects = self.session(from, to).peer_boot();
        let conn = self.net.dial(from, to, boot, expects);
        let at = self.flight(from, to);
        self.push(at, Event::Hello { from, to, conn, boot });
        let frames: Vec<(u64, Vec<u8>)> =
            self.session(from, to).after(0).map(|(seq, body)| (seq, body.to_vec())).collect();
        for (seq, body) in frames {
            self.report.injected.resent += 1;
            let carries = match wire::decode::<Envelope>(&body) {
                Ok(envelope) => Carries::of(&envelope),
                Err(_) => Carries::Mutex, // reported as a wire violation on arrival
            };
            self.write(from, to, seq, body, carries);
        }
    }

    pub(super) fn dial_peers(&mut self, node: NodeId) {
        for peer in self.peers(node) {
            self.dial(node, peer);
        }
    }

    /// Writes frame `seq` of `from`'s session with `to` into their
    /// connection, if there is one; otherwise it waits in the session.
    pub(super) fn write(
        &mut self,
        from: NodeId,
        to: NodeId,
        seq: u64,
        bytes: Vec<u8>,
        carries: Carries,
    ) {
        let Some(conn) = self.net.writable(from, to) else {
            return;
        };
        let ack = self.session(from, to).ack();
        if carries == Carries::Mutex {
            self.net.mutex_written();
        }
        let fixed = self.cfg.heartbeat_delay.filter(|_| carries == Carries::Heartbeat);
        let at = match fixed {
            Some(delay) => self.net.land(from, to, self.now + delay, STEP),
            None => self.flight(from, to),
        };
        self.push(at, Event::Deliver { from, to, conn: conn.id, seq, ack, bytes, carries });
    }

    /// Frame `seq` on connection `conn` reaches `to`, through its session.
    pub(super) fn deliver(
        &mut self,
        from: NodeId,
        to: NodeId,
        conn: u64,
        seq: u64,
        ack: u64,
        bytes: Vec<u8>,
    ) {
        let Some(&c) = self.net.get(from, to).filter(|c| c.id == conn && c.accepted) else {
            return; // lost with its connection, or refused with its Hello
        };
        if !self.live(to, c.to_boot as u32) {
            return; // written to a process that is gone
        }
        let session = self.session(to, from);
        session.acked(c.from_boot, ack);
        match session.receive(c.from_boot, seq) {
            Received::Deliver => {}
            Received::Duplicate | Received::Stale => return,
            Received::Gap { lost } => {
                self.report.injected.gaps += 1;
                self.trace(|| format!("{to} missed {lost} frames from {from}: declared failed"));
                let now = self.now;
                self.engine(to).handle_link_down(now, from);
            }
        }
        // A partition drops what arrives above the session, as a node's
        // `coterie fault partition` does.
        if self.net.severed(from, to) {
            return self.after_input(to);
        }
        self.record(|r, at| r.delivered(at, from, to, seq));
        let now = self.now;
        let envelope: Envelope = match wire::decode(&bytes) {
            Ok(e) => e,
            Err(e) => return self.violation(Invariant::Wire, format!("{from} -> {to}: {e}")),
        };
        if let Err(e) = self.engine(to).handle_message(now, from, envelope) {
            return self.violation(Invariant::Wire, format!("{to} refused a message: {e}"));
        }
        self.after_input(to);
    }

    /// `from`'s dial (incarnation `boot`) reaches `to`.
    pub(super) fn hello(&mut self, from: NodeId, to: NodeId, conn: u64, boot: u64) {
        if !self.net.current(from, to, conn) || !self.live(from, boot as u32) {
            return;
        }
        if self.nodes[&to].engine.is_none() {
            // Refused, or no answer: the dialler waits to be poked.
            self.net.close(from, to);
            return;
        }
        let my_boot = self.boot_id(to);
        let delay = self.uniform(self.cfg.delay) + self.net.spike(to);
        let expects = self.net.get(from, to).and_then(|c| c.expects);
        if expects.is_some_and(|b| b != my_boot) {
            // Meant for a previous incarnation of this node: answered (so
            // the dialler learns) and closed, its frames unread.
            let welcome = Event::Welcome { from, to, conn, boot: my_boot, delivered: 0 };
            return self.push(self.now + delay, welcome);
        }
        self.net.accepted(from, to, conn, my_boot);
        let restarted = self.session(to, from).bind(boot);
        let delivered = self.session(to, from).ack();
        self.push(self.now + delay, Event::Welcome { from, to, conn, boot: my_boot, delivered });
        // The peer is up: a dialler of ours that gave up on it, or that is
        // connected to its previous incarnation, dials again at once.
        if restarted || self.net.writable(to, from).is_none() {
            self.dial(to, from);
        }
    }

    /// `to` (incarnation `boot`) answered `from`'s dial, having delivered
    /// `delivered` of `from`'s frames (those written behind the Hello went
    /// again already; the duplicates among them are dropped).
    pub(super) fn welcome(
        &mut self,
        from: NodeId,
        to: NodeId,
        conn: u64,
        boot: u64,
        delivered: u64,
    ) {
        if !self.net.welcomed(from, to, conn) {
            return;
        }
        if self.session(from, to).bind(boot) {
            // A new incarnation: what was kept for the old one is dropped,
            // and the connection is made again for the new session.
            return self.dial(from, to);
        }
        self.session(from, to).acked(boot, delivered);
    }
}
