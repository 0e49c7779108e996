//! What a node counts as it happens, for `/metrics`: how long clients wait
//! for a lock and hold it, what comes of their requests, how their
//! sessions are lost, how often the coordinator changes and peer links are
//! dialled again. The parts that record are handed a [`Metrics`] (cheap to
//! clone: every metric shares its value); what is read off the node's state
//! at scrape time (names, waiters, messages by kind, the coordinator) is
//! the [`exporter`](crate::exporter)'s.
//!
//! No label carries a lock's name, a session or a client: a node serving
//! ten thousand names exports the same few dozen series as one serving
//! one. The labels that exist take a handful of values fixed in this file
//! (or, for messages, by the algorithm's message kinds).

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};
use std::fmt::Write;
use std::time::Duration;

/// Bucket bounds of the wait and hold histograms, in seconds: from a
/// lock taken on loopback (a fraction of a millisecond) to a job that
/// holds for minutes.
const BUCKETS: [f64; 16] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];

/// Why a session lost what it held (or waited for).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Loss {
    /// Its connection closed or broke.
    Disconnected,
    /// Its client fell silent for a failure timeout.
    Silent,
    /// Its TTL ran out without a keepalive.
    Expired,
    /// Its node lost its lease (majority mode): what it held, the node
    /// gave up.
    NoQuorum,
}

impl Loss {
    /// The label value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Loss::Disconnected => "disconnected",
            Loss::Silent => "silent",
            Loss::Expired => "expired",
            Loss::NoQuorum => "no_quorum",
        }
    }
}

impl EncodeLabelValue for Loss {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        encoder.write_str(self.as_str())
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct LossLabels {
    reason: Loss,
}

/// Which of the node's ports a TLS refusal was on.
#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct PortLabels {
    port: &'static str,
}

/// The node's counters and histograms; see the module documentation.
#[derive(Clone)]
pub(crate) struct Metrics {
    wait: Histogram,
    hold: Histogram,
    grants: Counter,
    won: Counter,
    timeouts: Counter,
    busy: Counter,
    lost: Family<LossLabels, Counter>,
    coordinators: Counter,
    views: Counter,
    redials: Counter,
    revokes: Counter,
    connections: Gauge,
    tls_refusals: Family<PortLabels, Counter>,
    tls_expiry: Gauge,
}

impl Default for Metrics {
    fn default() -> Metrics {
        let metrics = Metrics {
            wait: Histogram::new(BUCKETS),
            hold: Histogram::new(BUCKETS),
            grants: Counter::default(),
            won: Counter::default(),
            timeouts: Counter::default(),
            busy: Counter::default(),
            lost: Family::default(),
            coordinators: Counter::default(),
            views: Counter::default(),
            redials: Counter::default(),
            revokes: Counter::default(),
            connections: Gauge::default(),
            tls_refusals: Family::default(),
            tls_expiry: Gauge::default(),
        };
        for port in ["peer", "client", "http"] {
            metrics.tls_refusals.get_or_create(&PortLabels { port }).inc_by(0);
        }
        for reason in [Loss::Disconnected, Loss::Silent, Loss::Expired, Loss::NoQuorum] {
            // Every reason is exported from the start, at 0: a rate over a
            // series that appears only with its first loss misses that loss.
            metrics.lost.get_or_create(&LossLabels { reason }).inc_by(0);
        }
        metrics
    }
}

impl Metrics {
    /// A name was handed to a client session after `waited`; `campaign`:
    /// the session asked for it as a candidate of the name's election, and
    /// now leads it.
    pub(crate) fn granted(&self, waited: Duration, campaign: bool) {
        self.grants.inc();
        if campaign {
            self.won.inc();
        }
        self.wait.observe(waited.as_secs_f64());
    }

    /// A client session stopped holding a name (released it, or was lost)
    /// after `held`.
    pub(crate) fn held(&self, held: Duration) {
        self.hold.observe(held.as_secs_f64());
    }

    /// A request's time limit ran out: a try found the lock busy (`try`),
    /// or a wait with a timeout timed out.
    pub(crate) fn gave_up(&self, try_lock: bool) {
        if try_lock { &self.busy } else { &self.timeouts }.inc();
    }

    /// A session holding a name was lost, for `reason`.
    pub(crate) fn lost(&self, reason: Loss) {
        self.lost.get_or_create(&LossLabels { reason }).inc();
    }

    /// The node follows a new coordinator (or a new epoch of one).
    pub(crate) fn coordinator_changed(&self) {
        self.coordinators.inc();
    }

    /// The node installed a new view (majority mode).
    pub(crate) fn view_changed(&self) {
        self.views.inc();
    }

    /// A peer connection closed and is dialled again (by this node, or by
    /// the peer below it whose connection it is to dial).
    pub(crate) fn redialed(&self) {
        self.redials.inc();
    }

    /// `holders` of this node's sessions were asked to let go of a lock
    /// they hold (`coterie revoke`).
    pub(crate) fn asked_to_let_go(&self, holders: u32) {
        self.revokes.inc_by(holders.into());
    }

    /// A connection to the `port` port was refused at its TLS handshake
    /// (a certificate from another CA, expired, naming another node, or
    /// plain TCP to a TLS port).
    pub(crate) fn tls_refused(&self, port: &'static str) {
        self.tls_refusals.get_or_create(&PortLabels { port }).inc();
    }

    /// The node's certificates (its chain and its CA) stop being valid at
    /// `at`, the earliest of them.
    pub(crate) fn tls_expiry(&self, at: Option<std::time::SystemTime>) {
        let at = at.and_then(|at| at.duration_since(std::time::UNIX_EPOCH).ok());
        self.tls_expiry.set(at.map_or(0, |d| d.as_secs() as i64));
    }

    /// A binary-protocol client connection opened; it counts until the
    /// guard is dropped.
    pub(crate) fn connection(&self) -> Connected {
        self.connections.inc();
        Connected(self.connections.clone())
    }

    /// Registers every metric with `registry`, under its exported name.
    pub(crate) fn register(&self, registry: &mut Registry) {
        let wait_help = "Time from a client's request for a name to its grant, per name granted";
        let hold_help = "Time a client session held a name, until it released it or was lost";
        registry.register_with_unit(
            "coterie_acquire_wait",
            wait_help,
            Unit::Seconds,
            self.wait.clone(),
        );
        registry.register_with_unit("coterie_hold", hold_help, Unit::Seconds, self.hold.clone());
        let counters = [
            ("coterie_grants", "Names granted to client sessions", &self.grants),
            (
                "coterie_elections_won",
                "Named elections (coterie elect, an HTTP campaign) won by a session at this node",
                &self.won,
            ),
            (
                "coterie_acquire_timeouts",
                "Requests whose timeout ran out before the grant",
                &self.timeouts,
            ),
            (
                "coterie_acquire_busy",
                "Tries refused because the lock was held elsewhere",
                &self.busy,
            ),
            (
                "coterie_coordinator_changes",
                "Coordinators (or epochs) this node came to follow",
                &self.coordinators,
            ),
            (
                "coterie_view_changes",
                "Views this node installed (partitions = \"majority\")",
                &self.views,
            ),
            (
                "coterie_link_redials",
                "Peer connections that closed and were dialled again",
                &self.redials,
            ),
            (
                "coterie_revoke_asked",
                "Holders at this node asked to let go of a lock (coterie revoke)",
                &self.revokes,
            ),
        ];
        for (name, help, counter) in counters {
            registry.register(name, help, counter.clone());
        }
        let lost_help =
            "Names lost by a client session that held them, by why the session was lost";
        registry.register("coterie_locks_lost", lost_help, self.lost.clone());
        let connections = "Binary-protocol client connections open (the CLI's sessions)";
        registry.register("coterie_client_connections", connections, self.connections.clone());
        let tls_help = "Connections refused at the TLS handshake (another CA, an expired \
            certificate, one naming another node, plain TCP to a TLS port), by port";
        registry.register("coterie_tls_refusals", tls_help, self.tls_refusals.clone());
        let expiry_help =
            "When the earliest of this node's TLS certificates and its CA's expires, \
            in seconds since the Unix epoch (0 without TLS)";
        registry.register_with_unit(
            "coterie_tls_cert_expiry_timestamp",
            expiry_help,
            Unit::Seconds,
            self.tls_expiry.clone(),
        );
    }
}

/// An open client connection, counted while it lives.
pub(crate) struct Connected(Gauge);

impl Drop for Connected {
    fn drop(&mut self) {
        self.0.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exposition(metrics: &Metrics) -> String {
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        text
    }

    #[test]
    fn what_is_recorded_is_exported_under_its_name() {
        let m = Metrics::default();
        m.granted(Duration::from_millis(3), false);
        m.granted(Duration::from_millis(30), true);
        m.held(Duration::from_secs(2));
        m.gave_up(true);
        m.lost(Loss::Expired);
        let open = m.connection();
        let text = exposition(&m);
        assert!(text.contains("coterie_grants_total 2\n"), "{text}");
        assert!(text.contains("coterie_elections_won_total 1\n"), "{text}");
        assert!(text.contains("coterie_acquire_wait_seconds_count 2\n"), "{text}");
        assert!(text.contains("coterie_acquire_wait_seconds_bucket{le=\"0.005\"} 1\n"), "{text}");
        assert!(text.contains("coterie_hold_seconds_sum 2.0\n"), "{text}");
        assert!(text.contains("coterie_acquire_busy_total 1\n"), "{text}");
        assert!(text.contains("coterie_acquire_timeouts_total 0\n"), "{text}");
        assert!(text.contains("coterie_locks_lost_total{reason=\"expired\"} 1\n"), "{text}");
        assert!(text.contains("coterie_locks_lost_total{reason=\"silent\"} 0\n"), "{text}");
        assert!(text.contains("coterie_client_connections 1\n"), "{text}");
        drop(open);
        assert!(exposition(&m).contains("coterie_client_connections 0\n"));
    }
}
