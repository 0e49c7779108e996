//! # coterie-diagram
//!
//! A run drawn as a space-time diagram, the way Lamport drew them
//! ("Time, Clocks, and the Ordering of Events in a Distributed System",
//! 1978) and every textbook since: a line per process, time running along
//! it, an arrow per message from its send to its delivery, the critical
//! section as a thick bar on its holder's line.
//!
//! [`Run`] is what a run is reduced to, whoever recorded it (the
//! simulator, or the nodes' event streams of a real cluster); [`svg`]
//! draws one, and [`shiviz`] writes it as a log with vector clocks for
//! ShiViz. Times are microseconds on one clock: simulated time, or
//! positions the recorder worked out for a real run (where a delivery is
//! never put before its send).
#![warn(missing_docs)]

pub mod label;
pub mod place;
pub mod shiviz;
pub mod svg;
pub mod timeline;

use serde::Serialize;

/// A whole run, as drawn.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Run {
    /// A line of words under the title (algorithms, cluster size, seed).
    pub title: String,
    /// Every node, a line each, in this order from the top.
    pub nodes: Vec<u32>,
    /// When the run ends, in µs (its start is 0).
    pub end_us: u64,
    /// Every message sent.
    pub messages: Vec<Message>,
    /// Every stay in the critical section.
    pub sections: Vec<Section>,
    /// Everything else worth marking: faults, suspicions, elections.
    pub marks: Vec<Mark>,
}

/// One message.
#[derive(Clone, Debug, Serialize)]
pub struct Message {
    /// Sender.
    pub from: u32,
    /// Receiver.
    pub to: u32,
    /// When it was sent.
    pub sent_us: u64,
    /// When it was delivered to the receiver's algorithm; `None` if it
    /// never was (lost to a fault, or to a crash).
    pub delivered_us: Option<u64>,
    /// Its kind, as the message counters name it (`request`, `reply`).
    pub kind: String,
    /// What it said, in full (shown when the arrow is pointed at).
    pub text: String,
    /// Whether it is a heartbeat (hidden unless asked for).
    pub heartbeat: bool,
}

/// One stay in the critical section.
#[derive(Clone, Debug, Serialize)]
pub struct Section {
    /// The holder.
    pub node: u32,
    /// Its grant's fence.
    pub fence: u64,
    /// When it entered.
    pub enter_us: u64,
    /// When it left; `None` if it still held when the run ended.
    pub exit_us: Option<u64>,
}

/// Something that happened at a node, or to the whole cluster.
#[derive(Clone, Debug, Serialize)]
pub struct Mark {
    /// Where: a node, or `None` for the whole cluster (a partition).
    pub node: Option<u32>,
    /// When it began.
    pub at_us: u64,
    /// When it ended, for what lasts (a pause, a partition); `None` for
    /// an instant.
    pub until_us: Option<u64>,
    /// What it was.
    pub kind: MarkKind,
    /// In words, for the tooltip and the label.
    pub text: String,
}

/// The kinds of [`Mark`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MarkKind {
    /// The node's process died.
    Crash,
    /// It came back.
    Restart,
    /// It was frozen (until `until_us`).
    Pause,
    /// It suspected a peer.
    Suspect,
    /// It follows a new coordinator.
    Coordinator,
    /// The network was cut (until `until_us`); `text` names the sides.
    Partition,
    /// Its connections broke.
    Reset,
    /// Its messages were slowed, or lost at random (until `until_us`).
    Degraded,
    /// An invariant broke here.
    Violation,
}

impl MarkKind {
    /// Every kind, in legend order.
    pub const ALL: [MarkKind; 9] = [
        MarkKind::Crash,
        MarkKind::Restart,
        MarkKind::Pause,
        MarkKind::Suspect,
        MarkKind::Coordinator,
        MarkKind::Partition,
        MarkKind::Reset,
        MarkKind::Degraded,
        MarkKind::Violation,
    ];

    /// Its name in the legend.
    pub fn name(self) -> &'static str {
        match self {
            MarkKind::Crash => "crash",
            MarkKind::Restart => "restart",
            MarkKind::Pause => "paused",
            MarkKind::Suspect => "suspects",
            MarkKind::Coordinator => "new coordinator",
            MarkKind::Partition => "partition",
            MarkKind::Reset => "connections reset",
            MarkKind::Degraded => "slow or lossy links",
            MarkKind::Violation => "violation",
        }
    }
}
