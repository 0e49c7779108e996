//! What a run looks like, recorded for its space-time diagram
//! ([`coterie_diagram`]): every message from its send to its delivery to
//! the receiver's algorithm (or to nowhere), every stay in the critical
//! section, faults, suspicions and coordinator changes. Kept only when
//! [`SimConfig::record`](crate::sim::SimConfig::record) asks.
//!
//! A message is matched with its delivery by its number in the sender's
//! session with the receiver: the session delivers each number once, and
//! a number used again (the session started afresh after a restart) was
//! lost before.

use coterie_core::NodeId;
use coterie_diagram::{Mark, MarkKind, Message, Run, Section};
use std::collections::BTreeMap;

/// The run being recorded.
#[derive(Clone)]
pub(crate) struct Recorder {
    run: Run,
    /// Messages in their sessions, not yet delivered: by sender, receiver
    /// and number.
    in_flight: BTreeMap<(u32, u32, u64), usize>,
    /// Each holder's open section.
    holding: BTreeMap<(u32, u64), usize>,
    /// Marks that last, still open: by node (or none) and kind.
    open: BTreeMap<(Option<u32>, MarkKind), usize>,
}

impl Recorder {
    pub(crate) fn new(nodes: &[NodeId], title: String) -> Recorder {
        let run = Run { title, nodes: nodes.iter().map(|n| n.0).collect(), ..Run::default() };
        Recorder {
            run,
            in_flight: BTreeMap::new(),
            holding: BTreeMap::new(),
            open: BTreeMap::new(),
        }
    }

    /// `from` sent a message; its index, for [`numbered`](Self::numbered).
    pub(crate) fn sent(
        &mut self,
        at: u64,
        from: NodeId,
        to: NodeId,
        kind: &str,
        text: String,
    ) -> usize {
        self.run.messages.push(Message {
            from: from.0,
            to: to.0,
            sent_us: at,
            delivered_us: None,
            kind: kind.to_string(),
            text,
            heartbeat: kind == "heartbeat",
        });
        self.run.messages.len() - 1
    }

    /// Message `index` went into its session as number `seq`.
    pub(crate) fn numbered(&mut self, index: usize, seq: u64) {
        let m = &self.run.messages[index];
        self.in_flight.insert((m.from, m.to, seq), index);
    }

    /// Number `seq` of `from`'s session with `to` reached `to`'s algorithm.
    pub(crate) fn delivered(&mut self, at: u64, from: NodeId, to: NodeId, seq: u64) {
        if let Some(index) = self.in_flight.remove(&(from.0, to.0, seq)) {
            self.run.messages[index].delivered_us = Some(at);
        }
    }

    /// `node` entered the critical section with `fence`.
    pub(crate) fn enter(&mut self, at: u64, node: NodeId, fence: u64) {
        self.run.sections.push(Section { node: node.0, fence, enter_us: at, exit_us: None });
        self.holding.insert((node.0, fence), self.run.sections.len() - 1);
    }

    /// `node` left the section it entered with `fence`.
    pub(crate) fn exit(&mut self, at: u64, node: NodeId, fence: u64) {
        if let Some(index) = self.holding.remove(&(node.0, fence)) {
            self.run.sections[index].exit_us = Some(at);
        }
    }

    /// `node` died in every section it was in.
    pub(crate) fn exit_all(&mut self, at: u64, node: NodeId) {
        let gone: Vec<(u32, u64)> =
            self.holding.range((node.0, 0)..=(node.0, u64::MAX)).map(|(&k, _)| k).collect();
        for key in gone {
            if let Some(index) = self.holding.remove(&key) {
                self.run.sections[index].exit_us = Some(at);
            }
        }
    }

    /// Something that happened at one instant.
    pub(crate) fn mark(&mut self, at: u64, node: Option<NodeId>, kind: MarkKind, text: String) {
        let node = node.map(|n| n.0);
        self.run.marks.push(Mark { node, at_us: at, until_us: None, kind, text });
    }

    /// Something that lasts began (one of a kind at a time per node).
    pub(crate) fn begin(&mut self, at: u64, node: Option<NodeId>, kind: MarkKind, text: String) {
        let node = node.map(|n| n.0);
        self.run.marks.push(Mark { node, at_us: at, until_us: Some(u64::MAX), kind, text });
        self.open.insert((node, kind), self.run.marks.len() - 1);
    }

    /// It ended.
    pub(crate) fn end(&mut self, at: u64, node: Option<NodeId>, kind: MarkKind) {
        if let Some(index) = self.open.remove(&(node.map(|n| n.0), kind)) {
            self.run.marks[index].until_us = Some(at);
        }
    }

    /// The run, ended at `at`: what still lasts is cut there.
    pub(crate) fn finish(mut self, at: u64) -> Run {
        for (_, index) in std::mem::take(&mut self.open) {
            self.run.marks[index].until_us = Some(at);
        }
        self.run.end_us = at;
        self.run
    }
}
