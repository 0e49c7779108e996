//! The cluster configuration file (TOML), checked as it is read.
//!
//! ```toml
//! [cluster]
//! name = "local"
//! mutex = "ricart-agrawala"
//! election = "bully"
//! # count = 1          # holders at once, for algorithms that allow more
//! # ra_fault_tolerant = false   # ricart-agrawala, raymond-k: NACKs and probes
//! # priority = "timestamp"      # ... or "fewest-entries", "least-recent"
//! # state_dir = "state"         # what must outlive a crash (epoch, clock, quorum grants)
//! # state_sync = true           # flush it to disk on every change
//! # lock_delay = "0s"           # after a holder is lost, grant nothing for this long
//! # partitions = "majority"     # who decides a peer is down: "majority" (views and
//! #                             # leases) or "detector" (trust the failure detector)
//!
//! [timing]
//! heartbeat = "50ms"
//! failure_timeout = "250ms"
//! # detector = "auto"           # who watches whom: "all", "ring", or "auto"
//! #                             # (all up to 16 nodes, ring above)
//! # watch = 2                   # ring: peers each node probes, besides its coordinator
//! # lease = "250ms"             # majority: how long a majority's echoes let a node act
//! #                             # (default: failure_timeout)
//! # max_clock_drift = 0.01      # majority: bound on any clock's rate error (1 %)
//!
//! [security]
//! # secret_file = "secret"      # the shared secret; COTERIE_SECRET_FILE overrides
//! # tls_ca = "ca.pem"           # TLS on every port (`coterie init --tls` writes these):
//! # tls_cert = "node{id}.pem"   # the CA, and each node's certificate and key
//! # tls_key = "node{id}.key"    # ({id} is the node's id)
//! # client_cert_auth = false    # clients too must show a certificate from tls_ca
//! # tls_client_cert = "client.pem"  # what commands show (COTERIE_TLS_CERT overrides)
//! # tls_client_key = "client.key"   # (COTERIE_TLS_KEY overrides)
//! # allow_faults = false        # take `coterie fault` commands (labs and tests only)
//!
//! [witness]            # optional: where workloads check their entries
//! addr = "127.0.0.1:7300"
//!
//! [[node]]
//! id = 1
//! peer = "127.0.0.1:7101"     # agent-to-agent
//! client = "127.0.0.1:7201"   # clients and status
//! ```

use coterie_core::registry::{self, ElectionInfo, MutexInfo, MutexOption};
use coterie_core::{
    AlgoConfig, Detector, Fence, LeaseTiming, MutexOptions, NodeId, Partitions, Priority, Timing,
};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Why a configuration could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {error}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error (said in the message, and so not a `source`:
        /// a chain printed whole would say it twice).
        error: std::io::Error,
    },
    /// The file is not valid TOML for a cluster.
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message, with the line.
        message: String,
    },
    /// The file parses but says something impossible.
    #[error("{path}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A TLS certificate, key or CA could not be read or used.
    #[error("TLS: {0}")]
    Tls(String),
}

/// `[cluster]`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterSection {
    /// The cluster's name; nodes refuse peers from another cluster.
    pub name: String,
    /// Mutual-exclusion algorithm.
    pub mutex: &'static MutexInfo,
    /// Election algorithm.
    pub election: &'static ElectionInfo,
    /// Holders allowed at once (a counting semaphore when > 1).
    #[serde(default = "one")]
    pub count: usize,
    /// `ricart-agrawala` and `raymond-k`: the fault-tolerant form (an
    /// immediate NACK for a deferred reply, probes to silent peers, giving
    /// up on a peer that never answers).
    #[serde(default)]
    pub ra_fault_tolerant: bool,
    /// `ricart-agrawala` and `raymond-k`: the order concurrent requests are
    /// served in, `"timestamp"` (the default), `"fewest-entries"` or
    /// `"least-recent"`.
    #[serde(default, deserialize_with = "priority_by_name", serialize_with = "priority_name")]
    pub priority: Priority,
    /// Where each node keeps what must outlive a crash (the highest epoch
    /// seen, a clock reserve, whom a quorum arbiter granted):
    /// `<state_dir>/<name>-node<id>.state`, relative to the configuration
    /// file. Without it, that state is kept in memory only: a quorum
    /// arbiter that restarts while its holder is silent may grant a second
    /// time, and after a restart of every node fences start low again.
    #[serde(default)]
    pub state_dir: Option<PathBuf>,
    /// Sync the state file to disk on every change (the default), so that
    /// it outlives a power loss and not only a crash of the process. The
    /// flushes run beside the node (a group-commit writer), and a quorum
    /// arbiter names its next grantees ahead, so under steady load no
    /// flush is on the path of an entry.
    #[serde(default = "yes")]
    pub state_sync: bool,
    /// After a holder is lost involuntarily (its client vanished or fell
    /// silent, or a node was suspected, which may have held), no grant is
    /// handed to a client for this long: the lock delay of Chubby and
    /// Consul sessions, which gives a resource that cannot check fences
    /// time for the lost holder's last writes to land. `"0s"` (the
    /// default) turns it off. A clean release never waits for it.
    #[serde(default, with = "humantime_serde")]
    pub lock_delay: Duration,
    /// A lock nobody at a node holds or wants is forgotten there after
    /// this long (its next use starts it again), so that idle locks cost
    /// no memory. `"0s"` keeps every lock for good.
    #[serde(default = "ClusterSection::default_forget_after", with = "humantime_serde")]
    pub forget_after: Duration,
    /// centralized, centralized-lending, token-ring: how many grants of a
    /// lock one coordinator term (one token generation) may number before
    /// a new one is opened. Unset, all that a fence's low 24 bits hold
    /// (16,777,215); set small, to watch terms renew on a real cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence_room: Option<u64>,
    /// Who decides that a peer is down: `"majority"`, the default (a peer
    /// leaves only through a view a majority agreed to, and a node acts
    /// only while a majority vouches for it: a minority grants nothing),
    /// or `"detector"` (the textbook assumption: a suspected peer has
    /// crashed; under a partition both sides go on, and both may grant).
    #[serde(default)]
    pub partitions: Partitions,
}

impl ClusterSection {
    /// Cluster `name` running `mutex` under `election`, every other key
    /// at its default.
    pub fn new(
        name: &str,
        mutex: &'static MutexInfo,
        election: &'static ElectionInfo,
    ) -> ClusterSection {
        ClusterSection {
            name: name.to_string(),
            mutex,
            election,
            count: one(),
            ra_fault_tolerant: false,
            priority: Priority::default(),
            state_dir: None,
            state_sync: yes(),
            lock_delay: Duration::ZERO,
            forget_after: Self::default_forget_after(),
            fence_room: None,
            partitions: Partitions::default(),
        }
    }

    fn default_forget_after() -> Duration {
        coterie_core::Forgetting::default().after
    }
}

fn yes() -> bool {
    true
}

fn priority_by_name<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Priority, D::Error> {
    let name = String::deserialize(d)?;
    name.parse().map_err(serde::de::Error::custom)
}

fn priority_name<S: serde::Serializer>(priority: &Priority, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(priority.name())
}

/// The environment variables that override `[cluster]` keys, over the
/// file (a command-line flag, where there is one, wins over both).
pub const OVERRIDES: [&str; 5] = [
    "COTERIE_MUTEX",
    "COTERIE_ELECTION",
    "COTERIE_COUNT",
    "COTERIE_LOCK_DELAY",
    "COTERIE_PARTITIONS",
];

impl ClusterSection {
    /// Sets the key that `var` (one of [`OVERRIDES`]) stands for.
    fn set(&mut self, var: &str, value: &str) -> Result<(), String> {
        match var {
            "COTERIE_MUTEX" => self.mutex = registry::mutex(value).map_err(|e| e.to_string())?,
            "COTERIE_ELECTION" => {
                self.election = registry::election(value).map_err(|e| e.to_string())?;
            }
            "COTERIE_COUNT" => {
                self.count = value.parse().map_err(|e| format!("not a count: {e}"))?;
            }
            "COTERIE_LOCK_DELAY" => {
                self.lock_delay = humantime::parse_duration(value)
                    .map_err(|e| format!("not a duration like \"2s\": {e}"))?;
            }
            "COTERIE_PARTITIONS" => self.partitions = value.parse().map_err(|e| format!("{e}"))?,
            other => return Err(format!("{other} overrides nothing")),
        }
        Ok(())
    }

    /// The mutual-exclusion variants chosen by `ra_fault_tolerant`,
    /// `priority` and `fence_room`.
    pub fn mutex_options(&self) -> MutexOptions {
        MutexOptions {
            fault_tolerant: self.ra_fault_tolerant,
            priority: self.priority,
            fence_room: self.fence_room,
        }
    }
}

fn one() -> usize {
    1
}

/// `[timing]`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TimingSection {
    /// How often heartbeats go out, e.g. `"50ms"`.
    #[serde(default = "default_heartbeat", with = "humantime_serde")]
    pub heartbeat: Duration,
    /// Silence after which a peer is suspected, e.g. `"250ms"`.
    #[serde(default = "default_failure_timeout", with = "humantime_serde")]
    pub failure_timeout: Duration,
    /// Who watches whom ([`Detector`]).
    #[serde(default)]
    pub detector: DetectorChoice,
    /// With the ring detector: how many peers each node probes, besides
    /// its coordinator.
    #[serde(default = "default_watch")]
    pub watch: u32,
    /// With `partitions = "majority"`: how long the echoes of a majority
    /// let a node act, on its own clock (default: `failure_timeout`). A
    /// node cut off from the majority stops this long after it last heard
    /// from it; the majority counts it down no sooner than this (a little
    /// more, for drift) after it last vouched for it.
    #[serde(default, with = "humantime_serde", skip_serializing_if = "Option::is_none")]
    pub lease: Option<Duration>,
    /// With `partitions = "majority"`: the most any node's clock may run
    /// fast or slow, as a fraction of real time (0.01: 1 %). No clock
    /// synchronisation is assumed, only this bound on rates.
    #[serde(default = "default_drift")]
    pub max_clock_drift: f64,
}

fn default_drift() -> f64 {
    f64::from(LeaseTiming::default().max_clock_drift_ppm) / 1e6
}

/// `detector`: a [`Detector`], or `auto` to pick by the cluster's size
/// ([`Detector::auto`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DetectorChoice {
    /// [`Detector::auto`].
    #[default]
    Auto,
    /// [`Detector::All`].
    All,
    /// [`Detector::Ring`].
    Ring,
}

fn default_watch() -> u32 {
    2
}

fn default_heartbeat() -> Duration {
    Timing::default().heartbeat
}

fn default_failure_timeout() -> Duration {
    Timing::default().failure_timeout
}

impl Default for TimingSection {
    fn default() -> Self {
        TimingSection {
            heartbeat: default_heartbeat(),
            failure_timeout: default_failure_timeout(),
            detector: DetectorChoice::default(),
            watch: default_watch(),
            lease: None,
            max_clock_drift: default_drift(),
        }
    }
}

/// `n` TCP ports free on `host` now, for a new cluster's nodes: bound
/// together, read, and let go (a process that starts meanwhile may take
/// one first).
pub fn free_ports(host: &str, n: usize) -> std::io::Result<Vec<u16>> {
    let listeners = (0..n)
        .map(|_| std::net::TcpListener::bind((host, 0)))
        .collect::<std::io::Result<Vec<_>>>()?;
    listeners.iter().map(|l| Ok(l.local_addr()?.port())).collect()
}

/// A client's TLS settings from the environment (`COTERIE_TLS_CA`,
/// `COTERIE_TLS_CERT`, `COTERIE_TLS_KEY`), each falling back on the file
/// given here; `None` without a CA.
pub fn client_tls_from(
    ca: Option<&Path>,
    cert: Option<&Path>,
    key: Option<&Path>,
) -> Result<Option<crate::tls::TlsClient>, ConfigError> {
    let env = |var: &str, file: Option<&Path>| match std::env::var_os(var) {
        Some(p) if !p.is_empty() => Some(PathBuf::from(p)),
        _ => file.map(Path::to_path_buf),
    };
    let Some(ca) = env("COTERIE_TLS_CA", ca) else { return Ok(None) };
    let (cert, key) = (env("COTERIE_TLS_CERT", cert), env("COTERIE_TLS_KEY", key));
    let identity = match (&cert, &key) {
        (Some(cert), Some(key)) => Some((cert.as_path(), key.as_path())),
        (None, None) => None,
        _ => {
            return Err(ConfigError::Invalid {
                path: cert.or(key).unwrap_or_default(),
                message: "a client certificate needs its key, and a key its certificate \
                          (COTERIE_TLS_CERT and COTERIE_TLS_KEY)"
                    .into(),
            })
        }
    };
    crate::tls::TlsClient::from_files(&ca, identity)
        .map(Some)
        .map_err(|e| ConfigError::Tls(e.to_string()))
}

/// Reads a secret file.
pub fn read_secret(path: &Path) -> Result<crate::auth::Secret, ConfigError> {
    let bytes = std::fs::read(path)
        .map_err(|error| ConfigError::Read { path: path.to_path_buf(), error })?;
    crate::auth::Secret::from_file_bytes(&bytes).ok_or_else(|| ConfigError::Invalid {
        path: path.to_path_buf(),
        message: "the secret file is empty".into(),
    })
}

/// `[security]`.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SecuritySection {
    /// A file holding the cluster's shared secret, relative to the
    /// configuration file (`COTERIE_SECRET_FILE` overrides it). With one,
    /// every peer and client connection opens with a mutual
    /// challenge–response (see `coterie_node::auth`); without, the node
    /// runs open and says so at start.
    #[serde(default)]
    pub secret_file: Option<PathBuf>,
    /// Whether the node takes `coterie fault` commands (and the scenario
    /// steps that use them). Off by default: on a shared network anyone
    /// who reaches a client port could cut the node off.
    #[serde(default)]
    pub allow_faults: bool,
    /// A file of bearer tokens for the HTTP API, one per line, relative to
    /// the configuration file. Required for the API when the cluster has a
    /// secret: every request then carries `Authorization: Bearer TOKEN`.
    #[serde(default)]
    pub api_token_file: Option<PathBuf>,
    /// Serve the HTTP API on an address other than loopback although the
    /// cluster has no secret (and so no tokens): anyone who reaches the
    /// port can take and release locks. Off by default.
    #[serde(default)]
    pub api_open: bool,
    /// The CA certificates (PEM) that every node's and client's
    /// certificate must come from. With `tls_cert` and `tls_key`, every
    /// port speaks TLS: peers authenticate each other by certificate (each
    /// names its node id), clients check the node's, and the HTTP API is
    /// served as HTTPS. The secret's handshake is then not made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_ca: Option<PathBuf>,
    /// Each node's certificate chain (PEM); `{id}` in the path stands for
    /// the node's id. It must name `node-ID.coterie`, and the hosts clients
    /// dial it at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_cert: Option<PathBuf>,
    /// Each node's private key (PEM); `{id}` as in `tls_cert`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_key: Option<PathBuf>,
    /// With TLS, clients (the client port's and the HTTP API's) must show
    /// a certificate from `tls_ca` too. Off by default: any client that
    /// reaches the port may then take locks, over an encrypted link.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub client_cert_auth: bool,
    /// The certificate commands (`coterie lock`, `status`, ...) show a node
    /// that asks for one; `COTERIE_TLS_CERT` overrides it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_client_cert: Option<PathBuf>,
    /// Its private key; `COTERIE_TLS_KEY` overrides it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_client_key: Option<PathBuf>,
}

/// A node's TLS files, with its id put in for `{id}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// The CA certificates to trust.
    pub ca: PathBuf,
    /// The node's certificate chain.
    pub cert: PathBuf,
    /// The node's private key.
    pub key: PathBuf,
}

impl SecuritySection {
    /// Whether the cluster speaks TLS.
    pub fn tls(&self) -> bool {
        self.tls_ca.is_some()
    }

    /// Node `id`'s TLS files, if the cluster speaks TLS.
    pub fn tls_files(&self, id: u32) -> Option<TlsFiles> {
        let of = |p: &Option<PathBuf>| -> Option<PathBuf> {
            let text = p.as_ref()?.to_string_lossy().replace("{id}", &id.to_string());
            Some(PathBuf::from(text))
        };
        Some(TlsFiles { ca: of(&self.tls_ca)?, cert: of(&self.tls_cert)?, key: of(&self.tls_key)? })
    }

    /// The keys that must be set together, or none of them: why not, if
    /// they are not.
    fn check_tls(&self) -> Result<(), String> {
        let node = [self.tls_ca.is_some(), self.tls_cert.is_some(), self.tls_key.is_some()];
        if node.contains(&true) && node.contains(&false) {
            return Err("[security] tls_ca, tls_cert and tls_key go together: set all three, \
                        or none"
                .into());
        }
        if self.client_cert_auth && !self.tls() {
            return Err("[security] client_cert_auth asks for TLS: set tls_ca, tls_cert and \
                        tls_key too"
                .into());
        }
        if self.tls_client_cert.is_some() != self.tls_client_key.is_some() {
            return Err("[security] tls_client_cert and tls_client_key go together".into());
        }
        Ok(())
    }
}

/// `[limits]`: what one node takes on from its clients, so that none of
/// them (or anyone who reaches the client port) can exhaust it.
#[derive(Clone, Copy, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsSection {
    /// Client connections served at once; one more is refused with a
    /// message naming this key, and closed.
    #[serde(default = "LimitsSection::default_max_clients")]
    pub max_clients: usize,
    /// Lock requests waiting at the node at once (its own clients'; the
    /// algorithm queues one request per node); one more is refused.
    #[serde(default = "LimitsSection::default_max_pending")]
    pub max_pending: usize,
    /// Lock names the node's clients may hold or wait for at once; a
    /// request for one more is refused, naming this key. (A name nobody
    /// holds or wants any more costs nothing and does not count.) Also
    /// the lock instances the node keeps: at the limit, the one idle
    /// longest is forgotten to make room for a new lock, and only when
    /// none is idle is the request refused.
    #[serde(default = "LimitsSection::default_max_names")]
    pub max_names: usize,
    /// HTTP API sessions open at once; one more is refused (429).
    #[serde(default = "LimitsSection::default_max_sessions")]
    pub max_sessions: usize,
    /// HTTP connections served at once; one more is answered `503` with
    /// a JSON reason naming this key, and closed.
    #[serde(default = "LimitsSection::default_max_http")]
    pub max_http: usize,
    /// An HTTP connection that sends no complete request header for this
    /// long is closed: a client that connects and says nothing, one that
    /// sends its header too slowly, and a keep-alive connection idle
    /// between requests. A request being answered (a blocking acquire, a
    /// stream) is not cut short.
    #[serde(default = "LimitsSection::default_http_idle", with = "humantime_serde")]
    pub http_idle: Duration,
}

impl LimitsSection {
    fn default_max_clients() -> usize {
        1024
    }

    fn default_max_pending() -> usize {
        1024
    }

    fn default_max_names() -> usize {
        100_000
    }

    fn default_max_sessions() -> usize {
        10_000
    }

    fn default_max_http() -> usize {
        4096
    }

    fn default_http_idle() -> Duration {
        Duration::from_secs(30)
    }
}

impl Default for LimitsSection {
    fn default() -> Self {
        LimitsSection {
            max_clients: Self::default_max_clients(),
            max_pending: Self::default_max_pending(),
            max_names: Self::default_max_names(),
            max_sessions: Self::default_max_sessions(),
            max_http: Self::default_max_http(),
            http_idle: Self::default_http_idle(),
        }
    }
}

/// `[witness]`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct WitnessSection {
    /// The witness's address.
    pub addr: String,
}

/// One `[[node]]`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSection {
    /// The node's id, 1 to 65535; a higher id wins elections.
    pub id: u32,
    /// Address for agent-to-agent traffic.
    pub peer: String,
    /// Address for clients and status.
    pub client: String,
    /// Address for the HTTP/JSON API, if the node serves it.
    #[serde(default)]
    pub http: Option<String>,
}

/// A whole configuration file.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// `[cluster]`.
    pub cluster: ClusterSection,
    /// `[timing]`.
    #[serde(default)]
    pub timing: TimingSection,
    /// `[security]`.
    #[serde(default)]
    pub security: SecuritySection,
    /// `[limits]`.
    #[serde(default)]
    pub limits: LimitsSection,
    /// `[witness]`.
    pub witness: Option<WitnessSection>,
    /// Every `[[node]]`, sorted by id once loaded.
    #[serde(rename = "node")]
    pub nodes: Vec<NodeSection>,
}

impl Config {
    /// Cluster `cluster` of `nodes`, every other key at its default: what
    /// the harness, the tests and the benches start. Change any field, then
    /// write it with [`to_toml`](Config::to_toml).
    pub fn new(cluster: ClusterSection, nodes: Vec<NodeSection>) -> Config {
        Config {
            cluster,
            timing: TimingSection::default(),
            security: SecuritySection::default(),
            limits: LimitsSection::default(),
            witness: None,
            nodes,
        }
    }

    /// [`new`](Config::new) with `ports.len() / 2` nodes on 127.0.0.1 (a
    /// third of `ports.len()` with `http`): see [`on`](Config::on).
    pub fn loopback(cluster: ClusterSection, ports: &[u16], http: bool) -> Config {
        Config::on(cluster, "127.0.0.1", ports, http)
    }

    /// [`new`](Config::new) with `ports.len() / 2` nodes on `host` (a third
    /// of `ports.len()` with `http`): node `i` (from 1) listens on
    /// `ports[2(i-1)]` for peers and the next for clients (with `http`,
    /// three ports a node: peer, client, HTTP API).
    pub fn on(cluster: ClusterSection, host: &str, ports: &[u16], http: bool) -> Config {
        let per = if http { 3 } else { 2 };
        let addr = |port: u16| format!("{host}:{port}");
        let nodes = ports
            .chunks_exact(per)
            .zip(1..)
            .map(|(p, id)| NodeSection {
                id,
                peer: addr(p[0]),
                client: addr(p[1]),
                http: http.then(|| addr(p[2])),
            })
            .collect();
        Config::new(cluster, nodes)
    }

    /// The configuration as a file [`load`](Config::load) reads back the
    /// same.
    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("every configuration has a TOML form")
    }

    /// Reads and checks a file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|error| ConfigError::Read { path: path.to_path_buf(), error })?;
        let mut cfg = Config::parse_with(&text, path, |var| {
            std::env::var(var).ok().filter(|value| !value.is_empty())
        })?;
        // A relative state directory or secret file is relative to the
        // file that names it.
        if let Some(base) = path.parent() {
            let security = &mut cfg.security;
            for p in [
                &mut cfg.cluster.state_dir,
                &mut security.secret_file,
                &mut security.api_token_file,
                &mut security.tls_ca,
                &mut security.tls_cert,
                &mut security.tls_key,
                &mut security.tls_client_cert,
                &mut security.tls_client_key,
            ] {
                if let Some(dir) = p.as_mut().filter(|d| d.is_relative()) {
                    *dir = base.join(&*dir);
                }
            }
        }
        Ok(cfg)
    }

    /// The cluster's secret: from `COTERIE_SECRET_FILE` if set, else from
    /// `[security] secret_file`; `None` if neither says one.
    pub fn secret(&self) -> Result<Option<crate::auth::Secret>, ConfigError> {
        let path = match std::env::var_os("COTERIE_SECRET_FILE") {
            Some(p) if !p.is_empty() => PathBuf::from(p),
            _ => match &self.security.secret_file {
                Some(p) => p.clone(),
                None => return Ok(None),
            },
        };
        read_secret(&path).map(Some)
    }

    /// What a command shows and trusts over TLS: the CA from
    /// `COTERIE_TLS_CA` or `[security] tls_ca`, and a certificate from
    /// `COTERIE_TLS_CERT` and `COTERIE_TLS_KEY` or `tls_client_cert` and
    /// `tls_client_key`, if any; `None` if the cluster does not speak TLS.
    pub fn client_tls(&self) -> Result<Option<crate::tls::TlsClient>, ConfigError> {
        let s = &self.security;
        client_tls_from(
            s.tls_ca.as_deref(),
            s.tls_client_cert.as_deref(),
            s.tls_client_key.as_deref(),
        )
    }

    /// The HTTP API's bearer tokens, one per line of `[security]
    /// api_token_file` (blank lines and `#` comments skipped); `None`
    /// without the file.
    pub fn api_tokens(&self) -> Result<Option<Vec<Vec<u8>>>, ConfigError> {
        let Some(path) = &self.security.api_token_file else { return Ok(None) };
        let text = std::fs::read_to_string(path)
            .map_err(|error| ConfigError::Read { path: path.clone(), error })?;
        let tokens: Vec<Vec<u8>> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(|l| l.as_bytes().to_vec())
            .collect();
        if tokens.is_empty() {
            let message = "the api token file holds no token".to_string();
            return Err(ConfigError::Invalid { path: path.clone(), message });
        }
        Ok(Some(tokens))
    }

    /// Parses and checks `text`; `path` is only for messages.
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        Config::parse_with(text, path, |_| None)
    }

    /// Parses `text`, lets `env` override the `[cluster]` keys a lab
    /// varies ([`OVERRIDES`]), and checks the result.
    pub fn parse_with(
        text: &str,
        path: &Path,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let mut cfg: Config = toml::from_str(text)
            .map_err(|e| ConfigError::Parse { path: path.to_path_buf(), message: e.to_string() })?;
        let invalid = |message: String| ConfigError::Invalid { path: path.to_path_buf(), message };
        for var in OVERRIDES {
            if let Some(value) = env(var) {
                cfg.cluster
                    .set(var, &value)
                    .map_err(|e| invalid(format!("{var}={value:?}: {e}")))?;
            }
        }
        if cfg.nodes.is_empty() {
            return Err(invalid("no [[node]] entries".into()));
        }
        cfg.nodes.sort_by_key(|n| n.id);
        for pair in cfg.nodes.windows(2) {
            if pair[0].id == pair[1].id {
                return Err(invalid(format!("node id {} appears twice", pair[0].id)));
            }
        }
        if let Some(bad) = cfg.nodes.iter().find(|n| n.id == 0 || n.id > 0xffff) {
            return Err(invalid(format!("node id {} is outside 1..=65535", bad.id)));
        }
        if cfg.cluster.count == 0 {
            return Err(invalid("count must be at least 1".into()));
        }
        cfg.security.check_tls().map_err(invalid)?;
        let l = &cfg.limits;
        if [l.max_clients, l.max_pending, l.max_names, l.max_sessions, l.max_http].contains(&0) {
            return Err(invalid(
                "[limits] max_clients, max_pending, max_names, max_sessions and max_http must be \
                 at least 1"
                    .into(),
            ));
        }
        if l.http_idle.is_zero() {
            return Err(invalid("[limits] http_idle must be more than 0".into()));
        }
        let claims = cfg.cluster.mutex.claims;
        if cfg.cluster.count > 1 && !claims.counting {
            return Err(invalid(format!(
                "count = {} but {} admits one holder at a time",
                cfg.cluster.count, cfg.cluster.mutex
            )));
        }
        let options = cfg.cluster.mutex_options();
        let asked = [
            ("ra_fault_tolerant", options.fault_tolerant, MutexOption::FaultTolerant),
            ("priority", options.priority != Priority::default(), MutexOption::Priority),
            ("fence_room", options.fence_room.is_some(), MutexOption::FenceRoom),
        ];
        for (key, asked, option) in asked {
            if asked && !claims.takes(option) {
                let takers: Vec<&str> = registry::taking(option).collect();
                return Err(invalid(format!(
                    "{key} applies to {} only, not {}",
                    takers.join(" and "),
                    cfg.cluster.mutex
                )));
            }
        }
        if let Some(room) = cfg.cluster.fence_room.filter(|r| !(1..=Fence::MINOR_MAX).contains(r)) {
            return Err(invalid(format!(
                "fence_room = {room}: a term has room for 1 to {} grants",
                Fence::MINOR_MAX
            )));
        }
        let t = &cfg.timing;
        if t.heartbeat.is_zero() || t.failure_timeout <= t.heartbeat {
            return Err(invalid(format!(
                "failure_timeout ({:?}) must exceed heartbeat ({:?}), which must be above zero",
                t.failure_timeout, t.heartbeat
            )));
        }
        let lease = t.lease.unwrap_or(t.failure_timeout);
        if lease < 2 * t.heartbeat {
            return Err(invalid(format!(
                "lease ({lease:?}) must be at least twice heartbeat ({:?}): a lease is renewed \
                 by heartbeats, and one late beat must not end it",
                t.heartbeat
            )));
        }
        if !(0.0..0.5).contains(&t.max_clock_drift) {
            return Err(invalid(format!(
                "max_clock_drift = {}: a fraction of real time from 0 (perfect clocks) to below \
                 0.5",
                t.max_clock_drift
            )));
        }
        if t.watch == 0 {
            return Err(invalid(
                "watch must be at least 1: a ring where nobody watches anybody finds no hang"
                    .to_string(),
            ));
        }
        Ok(cfg)
    }

    /// The `[[node]]` entry of `id`.
    pub fn node(&self, id: u32) -> Option<&NodeSection> {
        self.nodes.iter().find(|n| n.id == id)
    }

    /// Heartbeat and failure-detection periods, and who watches whom.
    pub fn timing(&self) -> Timing {
        let detector = match self.timing.detector {
            DetectorChoice::Auto => Detector::auto(self.nodes.len()),
            DetectorChoice::All => Detector::All,
            DetectorChoice::Ring => Detector::Ring { watch: self.timing.watch },
        };
        Timing {
            heartbeat: self.timing.heartbeat,
            failure_timeout: self.timing.failure_timeout,
            detector,
            lease: LeaseTiming {
                partitions: self.cluster.partitions,
                lease: self.timing.lease.unwrap_or(self.timing.failure_timeout),
                max_clock_drift_ppm: (self.timing.max_clock_drift * 1e6).round() as u32,
            },
        }
    }

    /// What node `id`'s algorithms are built from.
    pub fn algo_config(&self, id: u32, incarnation: u64, wall_origin: Duration) -> AlgoConfig {
        AlgoConfig {
            id: NodeId(id),
            name: coterie_core::Name::default(),
            members: self.nodes.iter().map(|n| NodeId(n.id)).collect(),
            capacity: self.cluster.count,
            timing: self.timing(),
            incarnation,
            wall_origin,
            mutex_options: self.cluster.mutex_options(),
            restored: None,
            forgetting: (!self.cluster.forget_after.is_zero()).then_some(
                coterie_core::Forgetting {
                    after: self.cluster.forget_after,
                    remnants: self.limits.max_names,
                    // The default lock, which is never forgotten, besides.
                    locks: self.limits.max_names.saturating_add(1),
                },
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_built_configuration_reads_back_the_same() {
        let mutex = registry::mutex("ricart-agrawala").unwrap();
        let election = registry::election("ring").unwrap();
        let mut cfg = Config::loopback(
            ClusterSection::new("built", mutex, election),
            &[1, 2, 3, 4, 5, 6],
            true,
        );
        cfg.cluster.lock_delay = Duration::from_millis(1500);
        cfg.cluster.priority = Priority::FewestEntries;
        cfg.timing.detector = DetectorChoice::Ring;
        cfg.limits.max_http = 7;
        cfg.security.allow_faults = true;
        cfg.witness = Some(WitnessSection { addr: "127.0.0.1:9".into() });
        let text = cfg.to_toml();
        let back =
            Config::parse(&text, Path::new("built.toml")).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(back.to_toml(), text);
        assert_eq!(back.nodes.len(), 2);
        assert_eq!(back.nodes[1].http.as_deref(), Some("127.0.0.1:6"));
        assert_eq!(back.cluster.lock_delay, Duration::from_millis(1500));
        assert_eq!(back.cluster.priority, Priority::FewestEntries);
        assert_eq!(back.limits.max_http, 7);
    }

    const GOOD: &str = r#"
        [cluster]
        name = "t"
        mutex = "centralized"
        election = "bully"
        [timing]
        heartbeat = "20ms"
        failure_timeout = "100ms"
        [[node]]
        id = 2
        peer = "127.0.0.1:1"
        client = "127.0.0.1:2"
        [[node]]
        id = 1
        peer = "127.0.0.1:3"
        client = "127.0.0.1:4"
    "#;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, Path::new("test.toml"))
    }

    #[test]
    fn good_file_loads_with_nodes_sorted() {
        let cfg = parse(GOOD).unwrap();
        assert_eq!(cfg.nodes[0].id, 1);
        assert_eq!(cfg.timing().failure_timeout, Duration::from_millis(100));
        assert_eq!(cfg.algo_config(1, 0, Duration::ZERO).members, vec![NodeId(1), NodeId(2)]);
    }

    #[test]
    fn the_detector_is_chosen_by_size_unless_named() {
        assert_eq!(parse(GOOD).unwrap().timing().detector, Detector::All);
        let ring = GOOD.replace(
            "failure_timeout = \"100ms\"",
            "failure_timeout = \"100ms\"\ndetector = \"ring\"\nwatch = 3",
        );
        assert_eq!(parse(&ring).unwrap().timing().detector, Detector::Ring { watch: 3 });
        assert_eq!(Detector::auto(16), Detector::All);
        assert_eq!(Detector::auto(17), Detector::Ring { watch: 2 });
        let bad = ring.replace("watch = 3", "watch = 0");
        assert!(parse(&bad).unwrap_err().to_string().contains("watch must be at least 1"));
        let bad = ring.replace("\"ring\"", "\"gossip\"");
        let err = parse(&bad).unwrap_err().to_string();
        assert!(err.contains("gossip") && err.contains("ring"), "{err}");
    }

    #[test]
    fn ricart_agrawala_options_are_read() {
        let text = GOOD.replace("mutex = \"centralized\"", "mutex = \"raymond-k\"\ncount = 2");
        assert_eq!(parse(&text).unwrap().cluster.mutex_options(), MutexOptions::default());
        let text = text.replace(
            "count = 2",
            "count = 2\nra_fault_tolerant = true\npriority = \"least-recent\"",
        );
        let cfg = parse(&text).unwrap();
        let options = cfg.algo_config(1, 0, Duration::ZERO).mutex_options;
        assert!(options.fault_tolerant);
        assert_eq!(options.priority, Priority::LeastRecent);
    }

    #[test]
    fn the_environment_overrides_the_cluster_keys_a_lab_varies() {
        let env = |var: &str| match var {
            "COTERIE_MUTEX" => Some("maekawa".to_string()),
            "COTERIE_LOCK_DELAY" => Some("2s".to_string()),
            _ => None,
        };
        let cfg = Config::parse_with(GOOD, Path::new("t.toml"), env).unwrap();
        assert_eq!(cfg.cluster.mutex.name, "maekawa");
        assert_eq!(cfg.cluster.election.name, "bully", "not overridden: the file's");
        assert_eq!(cfg.cluster.lock_delay, Duration::from_secs(2));
        // An override is checked like the file.
        let bad = |var: &str| (var == "COTERIE_ELECTION").then(|| "nope".to_string());
        let err = Config::parse_with(GOOD, Path::new("t.toml"), bad).unwrap_err().to_string();
        assert!(err.contains("nope"), "{err}");
        let bad = |var: &str| (var == "COTERIE_COUNT").then(|| "many".to_string());
        let err = Config::parse_with(GOOD, Path::new("t.toml"), bad).unwrap_err().to_string();
        assert!(err.contains("COTERIE_COUNT=\"many\""), "{err}");
    }

    #[test]
    fn errors_say_what_is_wrong() {
        let cases = [
            (GOOD.replace("centralized", "paxos"), "unknown mutex algorithm \"paxos\""),
            (GOOD.replace("id = 2", "id = 1"), "node id 1 appears twice"),
            (GOOD.replace("\"100ms\"", "\"10ms\""), "must exceed heartbeat"),
            (GOOD.replace("\"20ms\"", "\"soon\""), "expected a duration"),
            (GOOD.replace("name = \"t\"", "name = \"t\"\nnmae = 1"), "unknown field"),
            (GOOD.replace("[cluster]", "[cluster"), "test.toml"),
            (
                GOOD.replace("mutex = \"centralized\"", "mutex = \"ricart-agrawala\"\ncount = 2"),
                "admits one holder",
            ),
            (
                GOOD.replace(
                    "election = \"bully\"",
                    "election = \"bully\"\npriority = \"fastest\"",
                ),
                "unknown priority \"fastest\" (known: timestamp, fewest-entries, least-recent)",
            ),
            (
                GOOD.replace("election = \"bully\"", "election = \"bully\"\nra_fault_tolerant = 1"),
                "ra_fault_tolerant",
            ),
            (
                GOOD.replace(
                    "election = \"bully\"",
                    "election = \"bully\"\nra_fault_tolerant = true",
                ),
                "ra_fault_tolerant applies to ricart-agrawala and raymond-k only, not centralized",
            ),
            (
                GOOD.replace(
                    "election = \"bully\"",
                    "election = \"bully\"\npriority = \"least-recent\"",
                ),
                "priority applies to ricart-agrawala and raymond-k only, not centralized",
            ),
            (
                GOOD.replace("election = \"bully\"", "election = \"bully\"\nfence_room = 0"),
                "fence_room = 0: a term has room for 1 to 16777215 grants",
            ),
            (
                GOOD.replace("mutex = \"centralized\"", "mutex = \"maekawa\"")
                    .replace("election = \"bully\"", "election = \"bully\"\nfence_room = 3"),
                "fence_room applies to centralized and centralized-lending and token-ring only, \
                 not maekawa",
            ),
        ];
        for (text, expected) in cases {
            let err = parse(&text).unwrap_err().to_string();
            assert!(err.contains(expected), "{err:?} should mention {expected:?}");
        }
    }
}
