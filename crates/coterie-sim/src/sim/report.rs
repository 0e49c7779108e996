//! What a run saw: entries, messages, faults injected, broken invariants.

use crate::invariant::Invariant;
use coterie_core::Mode;
use serde::Serialize;
use std::collections::BTreeMap;

/// A broken invariant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// Which one.
    pub invariant: Invariant,
    /// What was seen.
    pub detail: String,
    /// Simulated time, in microseconds.
    pub at_us: u64,
}

/// What one entry of a sequential load cost.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct EntryCost {
    /// The mutex messages it cost.
    pub messages: u64,
    /// Whether its requester was the coordinator.
    pub local: bool,
    /// Whether it read or wrote.
    pub mode: Mode,
}

/// What one run saw.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RunReport {
    /// The run's seed.
    pub seed: u64,
    /// What the workload did, counted.
    #[serde(flatten)]
    pub counts: Counts,
    /// Every message sent once the workload began, by kind.
    pub messages_by_kind: BTreeMap<&'static str, u64>,
    /// Sequential load only: what each entry cost.
    pub per_entry: Vec<EntryCost>,
    /// Every coordinator change: (time in µs, node, leader, epoch).
    pub elections: Vec<(u64, u32, u32, u64)>,
    /// The faults injected and what the links went through.
    #[serde(flatten)]
    pub injected: Injected,
    /// Simulated time at the end, in microseconds.
    pub end_us: u64,
    /// Broken invariants, in the order seen.
    pub violations: Vec<Violation>,
    /// One line per event, when tracing.
    pub trace: Vec<String>,
    /// Every message sent in the whole run (from the start, not the
    /// workload's), by kind.
    pub sent_by_kind: BTreeMap<&'static str, u64>,
    /// The run, for its space-time diagram, when recording.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diagram: Option<coterie_diagram::Run>,
    /// Synchronisation delays: from a release to the next grant, when
    /// someone was waiting at the release (µs).
    pub sync_delays_us: Vec<u64>,
    /// The most reads of a lock granted to others while one writer of it
    /// waited: bounded however long readers keep coming, unless they
    /// starve writers.
    pub write_bypass_max: u64,
}

/// Declares a struct of `u64` counters that a run keeps and a suite adds
/// up over its seeds, with the `+=` that adds one to another: the fields
/// are named once, so a counter cannot be left out of the sum.
macro_rules! counters {
    ($(#[$meta:meta])* pub struct $name:ident { $($(#[$doc:meta])* pub $field:ident: u64,)* }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
        pub struct $name {
            $($(#[$doc])* pub $field: u64,)*
        }

        impl std::ops::AddAssign for $name {
            fn add_assign(&mut self, other: $name) {
                $(self.$field += other.$field;)*
            }
        }
    };
}

counters! {
/// What a run's workload did, counted: a run's report carries one, and a
/// suite's summary adds them up.
pub struct Counts {
    /// Critical-section entries granted.
    pub entries: u64,
    /// Entries granted to the node that was the coordinator at the time
    /// (free under `centralized`: a node sends itself nothing).
    pub coordinator_entries: u64,
    /// Mutex-layer messages sent once the workload began.
    pub mutex_messages: u64,
    /// Records the nodes wrote to stable storage (the durable epoch, clock
    /// reserve and mutex state), start-up included.
    pub records: u64,
    /// Views installed, summed over the nodes (majority mode).
    pub views: u64,
    /// Majority mode: grants made while a paused node's client still held
    /// the lock, that node's lease over (it tells the client so the moment
    /// it runs again): a frozen holder's lease overlap, not two holders.
    pub lease_overlaps: u64,
    /// Grants made while a node that asked earlier was still waiting:
    /// earlier by request timestamp for algorithms that stamp requests
    /// (see `MutexAlgorithm::request_stamp`), by time of asking otherwise.
    pub out_of_order: u64,
    /// Simulated time from the workload's start to its last release (µs).
    pub workload_us: u64,
    /// Idle locks the nodes forgot (with `forgetting`).
    pub forgotten: u64,
    /// Entries that read ([`Mode::Read`](coterie_core::Mode::Read)).
    pub read_entries: u64,
    /// Reads granted while another reader held the lock: readers sharing.
    pub shared_reads: u64,
}
}

counters! {
/// The faults a run injected and what its links went through, counted: a
/// run's report carries one, and a suite's summary adds them up.
pub struct Injected {
    /// Crashes.
    pub crashes: u64,
    /// Partitions, one-way ones included.
    pub partitions: u64,
    /// One-way partitions.
    pub one_way_partitions: u64,
    /// Pauses.
    pub pauses: u64,
    /// Delay spikes.
    pub delays: u64,
    /// Loss windows.
    pub drops: u64,
    /// Messages lost in loss windows.
    pub lost: u64,
    /// Connection resets.
    pub resets: u64,
    /// Frames the sessions wrote once a connection came up, having waited
    /// in them (a connection being made, or one that broke with them in
    /// flight).
    pub resent: u64,
    /// Sessions that overflowed their cap (their peer declared failed).
    pub overflows: u64,
    /// Gaps receivers saw after an overflow (the sender declared failed).
    pub gaps: u64,
}
}
