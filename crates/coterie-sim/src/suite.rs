//! Many seeds of one configuration, summarised.

use crate::invariant::Invariant;
use crate::sim::{self, Counts, Injected, RunReport, SimConfig};
use coterie_core::registry::{ElectionInfo, MutexInfo};
use serde::Serialize;
use std::collections::BTreeMap;

/// A seed whose run broke an invariant.
#[derive(Clone, Debug, Serialize)]
pub struct Failure {
    /// Replays the failing run: `coterie sim --seed SEED --trace ...`.
    pub seed: u64,
    /// Which invariant broke.
    pub invariant: Invariant,
    /// What was seen.
    pub detail: String,
}

/// The outcome of many seeds.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    /// Mutual-exclusion algorithm.
    pub mutex: &'static MutexInfo,
    /// Election algorithm.
    pub election: &'static ElectionInfo,
    /// Cluster size.
    pub nodes: u32,
    /// How many seeds ran.
    pub seeds: u64,
    /// Runs that broke an invariant.
    pub violations: u64,
    /// Those runs, by the first invariant each broke (`safety`, `fence`,
    /// `liveness`, `agreement`, `wire`).
    pub violations_by_invariant: BTreeMap<Invariant, u64>,
    /// Mutex messages per entry, over all runs.
    pub messages_per_entry: f64,
    /// What the workloads did, over all runs: entries, mutex messages,
    /// records, grants that overtook an older waiting request, and so on
    /// (see [`Counts`]).
    #[serde(flatten)]
    pub counts: Counts,
    /// Faults injected and what the links went through, over all runs.
    #[serde(flatten)]
    pub injected: Injected,
    /// Messages sent during workloads, by kind, over all runs.
    pub messages_by_kind: BTreeMap<String, u64>,
    /// The most reads granted while one writer waited, in any run (see
    /// `RunReport::write_bypass_max`).
    pub write_bypass_max: u64,
    /// Each failing seed (the first 50).
    pub failures: Vec<Failure>,
}

/// Runs `base` once for every seed in `seeds`, calling `progress` after
/// each run with the number done.
pub fn run_seeds(
    base: &SimConfig,
    seeds: std::ops::Range<u64>,
    mut progress: impl FnMut(u64, &RunReport),
) -> Summary {
    let mut summary = Summary {
        mutex: base.mutex,
        election: base.election,
        nodes: base.nodes,
        seeds: seeds.end - seeds.start,
        violations: 0,
        violations_by_invariant: BTreeMap::new(),
        messages_per_entry: 0.0,
        counts: Counts::default(),
        injected: Injected::default(),
        messages_by_kind: BTreeMap::new(),
        write_bypass_max: 0,
        failures: Vec::new(),
    };
    for (done, seed) in seeds.enumerate() {
        let report = sim::run(SimConfig { seed, ..base.clone() });
        summary.counts += report.counts;
        summary.injected += report.injected;
        summary.write_bypass_max = summary.write_bypass_max.max(report.write_bypass_max);
        for (kind, n) in &report.messages_by_kind {
            *summary.messages_by_kind.entry(kind.to_string()).or_default() += n;
        }
        if let Some(v) = report.violations.first() {
            summary.violations += 1;
            *summary.violations_by_invariant.entry(v.invariant).or_default() += 1;
            if summary.failures.len() < 50 {
                summary.failures.push(Failure {
                    seed,
                    invariant: v.invariant,
                    detail: v.detail.clone(),
                });
            }
        }
        progress(done as u64 + 1, &report);
    }
    let Counts { entries, mutex_messages, .. } = summary.counts;
    if entries > 0 {
        summary.messages_per_entry = mutex_messages as f64 / entries as f64;
    }
    summary
}
