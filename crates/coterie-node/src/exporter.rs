//! `GET /metrics`: the node's metrics in the OpenMetrics text format that
//! Prometheus scrapes. What is counted as it happens comes from
//! [`Metrics`]; what the node *is* at the moment of the scrape — the
//! coordinator it follows, its peers up, its live names, the locks its
//! clients hold and wait for, its sessions, the messages it has sent and
//! received by kind — is read off the agent, the application's table and
//! the sessions then ([`Live`]), so it can never disagree with
//! `coterie status`.

use crate::agent::Agent;
use crate::locks::Locks;
use crate::metrics::Metrics;
use crate::sessions::Sessions;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Registry, Unit};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The content type of an exposition.
pub(crate) const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Every metric of one node, ready to be rendered.
pub(crate) struct Exporter {
    registry: Registry,
}

impl Exporter {
    /// The exporter of a node whose parts are these.
    pub(crate) fn new(
        metrics: &Metrics,
        agent: Arc<Agent>,
        locks: Arc<Locks>,
        sessions: Arc<Sessions>,
    ) -> Exporter {
        let mut registry = Registry::default();
        let status = agent.view().status();
        let info = Info::new(vec![
            ("node", status.id.to_string()),
            ("mutex", status.mutex),
            ("election", status.election),
        ]);
        registry.register("coterie_node", "The node and the algorithms it runs", info);
        metrics.register(&mut registry);
        registry.register_collector(Box::new(Live { agent, locks, sessions }));
        Exporter { registry }
    }

    /// The exposition, as of now.
    pub(crate) fn render(&self) -> String {
        let mut text = String::with_capacity(8 * 1024);
        // Writing into a String cannot fail, nor can encoding what is
        // registered here.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}

/// What is read off the node at each scrape.
struct Live {
    agent: Arc<Agent>,
    locks: Arc<Locks>,
    sessions: Arc<Sessions>,
}

impl std::fmt::Debug for Live {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Live").finish_non_exhaustive()
    }
}

impl Collector for Live {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let e = &mut encoder;
        let status = self.agent.view().status();
        let load = self.locks.load();
        if let Some(leader) = status.coordinator {
            let help = "The id of the coordinator this node follows (absent while it knows none).";
            one(e, "coterie_coordinator", help, None, ConstGauge::new(i64::from(leader)))?;
            let me = i64::from(leader == status.id);
            let help = "1 if this node is the coordinator.";
            one(e, "coterie_is_coordinator", help, None, ConstGauge::new(me))?;
        }
        let epoch = i64::try_from(status.epoch).unwrap_or(i64::MAX);
        let help = "The coordinator's epoch: election round * 65536 + the winner's id (status writes e7.3 for 458755).";
        one(e, "coterie_epoch", help, None, ConstGauge::new(epoch))?;
        if let Some(view) = &status.view {
            let epoch = i64::try_from(view.epoch).unwrap_or(i64::MAX);
            let help = "The epoch of the view this node installed (partitions = \"majority\").";
            one(e, "coterie_view_epoch", help, None, ConstGauge::new(epoch))?;
        }
        let help = "1 while the node holds a lease from a majority (always, with partitions = \
                    \"detector\"): without one it grants nothing.";
        one(e, "coterie_quorum", help, None, ConstGauge::new(i64::from(status.quorum)))?;
        let help = "1 once the node has joined the cluster.";
        one(e, "coterie_joined", help, None, ConstGauge::new(i64::from(status.joined)))?;
        let peers = status.alive.iter().filter(|&&n| n != status.id).count();
        let help = "Peers this node's failure detector believes up.";
        one(e, "coterie_peers_up", help, None, gauge(peers))?;
        let timeout = status.failure_timeout_ms as f64 / 1000.0;
        let help = "The failure timeout in force (grown while the node's own timer runs late).";
        one(e, "coterie_failure_timeout", help, Some(&Unit::Seconds), ConstGauge::new(timeout))?;
        let help = "Lock names with an algorithm instance at this node.";
        one(e, "coterie_names", help, None, gauge(status.names))?;
        let help = "Names this node's client sessions hold (or it holds for a lost one).";
        one(e, "coterie_locks_held", help, None, gauge(load.held))?;
        let help = "Client requests waiting for a name at this node.";
        one(e, "coterie_waiters", help, None, gauge(load.waiting))?;
        let help = "HTTP sessions with a TTL open at this node.";
        one(e, "coterie_sessions", help, None, gauge(self.sessions.len()))?;
        let help = "Critical-section entries the algorithms granted this node.";
        one(e, "coterie_cs_entries", help, None, ConstCounter::new(status.cs_entries))?;
        let help = "Protocol messages this node sent, by kind.";
        by_kind(e, "coterie_messages_sent", help, &status.messages_sent)?;
        let help = "Protocol messages this node received, by kind.";
        by_kind(e, "coterie_messages_received", help, &status.messages_received)?;
        let counts = self.agent.view().storage_counts();
        if let Some(c) = counts {
            let help = "Changes to the node's record appended to its state log.";
            one(e, "coterie_state_changes", help, None, ConstCounter::new(c.changes))?;
            let help = "Writes to the state log (one flush each when state_sync is on).";
            one(e, "coterie_state_batches", help, None, ConstCounter::new(c.batches))?;
            let help = "Snapshots written: the log folded into one.";
            one(e, "coterie_state_snapshots", help, None, ConstCounter::new(c.snapshots))?;
            let help = "Bytes appended to the state log.";
            let bytes = Some(&Unit::Bytes);
            one(e, "coterie_state_log", help, bytes, ConstCounter::new(c.log_bytes))?;
            let help = "Bytes of snapshots written.";
            one(e, "coterie_state_snapshot", help, bytes, ConstCounter::new(c.snapshot_bytes))?;
        }
        Ok(())
    }
}

fn gauge(n: impl TryInto<i64>) -> ConstGauge<i64> {
    ConstGauge::new(n.try_into().unwrap_or(i64::MAX))
}

/// Encodes one metric without labels.
fn one(
    e: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    metric: impl EncodeMetric,
) -> Result<(), std::fmt::Error> {
    metric.encode(e.encode_descriptor(name, help, unit, metric.metric_type())?)
}

/// Encodes a counter per message kind (a few per algorithm: bounded).
fn by_kind(
    e: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    counts: &BTreeMap<String, u64>,
) -> Result<(), std::fmt::Error> {
    let mut family =
        e.encode_descriptor(name, help, None, ConstCounter::new(0u64).metric_type())?;
    for (kind, &n) in counts {
        let labels = [("kind", kind.as_str())];
        ConstCounter::new(n).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}
