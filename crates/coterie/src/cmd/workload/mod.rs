//! `coterie workload`: drive clients against a cluster and measure.
//! Which locks each request takes is [`keys`]'s to choose.

use super::common::{self, NodeAddr, Target};
use super::status;
use anyhow::{bail, Result};
use coterie_client::{HttpClient, HttpError, Wait};
use coterie_node::{Entry, LockRequest, Outcome, WitnessClient};
use hdrhistogram::Histogram;
use keys::Picker;
pub use keys::{Choice, ChoiceArgs, Skew};
use serde::Serialize;
use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod keys;

/// Drive clients against every node and report throughput, latency,
/// messages per entry and what the witness saw.
///
/// Each client connects to its node's client port and loops: acquire, enter
/// the witness with each fence (if the configuration names one), hold,
/// leave, release, think. A client whose node goes away keeps trying to
/// reconnect until the run ends: give --duration when a node may stay down.
///
/// With --names K the requests spread over K locks (`r0` .. `rK-1`), drawn
/// uniformly or, with --skew zipf:S, the first ones far more often (hot
/// keys); with --per-request M each request takes M of them at once, all
/// or none, in name order. --ring gives each client its own M neighbours
/// on a ring of the K names: `--names 5 --per-request 2 --ring` with five
/// clients is the dining philosophers. The witness checks each name apart
/// (overlaps and stale fences per name).
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    target: Target,
    #[command(flatten)]
    choice: ChoiceArgs,
    /// Clients per node.
    #[arg(long, default_value_t = 1, conflicts_with = "total_clients")]
    clients: usize,
    /// This many clients in all, dealt to the nodes in turn (instead of
    /// --clients per node).
    #[arg(long, value_name = "N")]
    total_clients: Option<usize>,
    /// Entries each client makes.
    #[arg(long, default_value_t = 100)]
    requests: u64,
    /// Stop after this long even with requests left (a client whose node is
    /// down keeps retrying until then).
    #[arg(long, value_parser = common::parse_duration)]
    duration: Option<Duration>,
    /// Time inside the critical section.
    #[arg(long, default_value = "0ms", value_parser = common::parse_duration)]
    hold: Duration,
    /// Time between a release and the next request.
    #[arg(long, default_value = "0ms", value_parser = common::parse_duration)]
    think: Duration,
    /// Check entries at this witness (default: the configuration's).
    #[arg(long, value_name = "ADDR")]
    witness: Option<String>,
    /// Do not check entries at any witness (measures the lock alone).
    #[arg(long, conflicts_with = "witness")]
    no_witness: bool,
    /// A request not granted within this long is counted as unanswered,
    /// given up and made again.
    #[arg(long, default_value = "10s", value_parser = common::parse_duration)]
    answer_within: Duration,
    /// The clients speak the HTTP/JSON API (each node's `http` address in
    /// the configuration) instead of the binary protocol: a session each,
    /// then acquire and release over one keep-alive connection. The token,
    /// when the nodes ask for one: COTERIE_TOKEN, else the first in
    /// `[security] api_token_file`.
    #[arg(long)]
    http: bool,
    /// Release with a request of its own, answered before the next
    /// acquire, as an HTTP client must: by default a client that does not
    /// think sends its release with its next request, one round trip an
    /// entry instead of two.
    #[arg(long)]
    no_chain: bool,
    /// Print a JSON report.
    #[arg(long)]
    json: bool,
}

/// What a run of clients should do.
#[derive(Clone, Debug)]
pub struct Spec {
    pub nodes: Vec<NodeAddr>,
    pub clients: usize,
    /// Which locks the requests take.
    pub choice: Choice,
    pub requests: u64,
    pub hold: Duration,
    pub think: Duration,
    pub witness: Option<String>,
    /// Clients stop at this moment even with requests left.
    pub deadline: Option<Instant>,
    /// Print progress on stderr once a second.
    pub progress: bool,
    /// A request not granted within this long counts as unanswered (and
    /// the client gives it up and asks again).
    pub answer_within: Duration,
    /// Where to report what the witness refused or caught, as it happens.
    pub events: Option<tokio::sync::mpsc::UnboundedSender<Seen>>,
    /// Speak the HTTP API at these addresses instead of the binary protocol.
    pub http: Option<Arc<HttpTarget>>,
    /// Never send a release with the next request: two round trips an
    /// entry, as over HTTP.
    pub no_chain: bool,
}

/// The HTTP API of the nodes a workload drives.
#[derive(Debug)]
pub struct HttpTarget {
    /// Each node's `http` address, by id.
    pub addrs: std::collections::BTreeMap<u32, String>,
    /// The bearer token, when the nodes ask for one.
    pub token: Option<String>,
    /// TLS (HTTPS), when the cluster speaks it.
    pub tls: Option<coterie_node::tls::TlsClient>,
}

impl HttpTarget {
    /// A keep-alive connection to the API at `addr`.
    async fn connect(&self, addr: &str) -> Result<HttpClient, HttpError> {
        HttpClient::connect_with(addr, self.token.as_deref(), self.tls.as_ref()).await
    }

    /// The API of every node of `cfg`, with the token from COTERIE_TOKEN
    /// or the configuration's token file.
    pub fn of(cfg: &coterie_node::Config) -> Result<HttpTarget> {
        let addrs: std::collections::BTreeMap<u32, String> =
            cfg.nodes.iter().filter_map(|n| Some((n.id, n.http.clone()?))).collect();
        if addrs.is_empty() {
            bail!("--http: no node of the configuration serves the API ([[node]] http)");
        }
        let token = match std::env::var("COTERIE_TOKEN") {
            Ok(token) if !token.is_empty() => Some(token),
            _ => cfg
                .api_tokens()?
                .and_then(|t| t.into_iter().next())
                .map(|t| String::from_utf8_lossy(&t).into_owned()),
        };
        Ok(HttpTarget { addrs, token, tls: cfg.client_tls()? })
    }
}

/// Something a client saw that a live timeline should show.
#[derive(Clone, Debug)]
pub enum Seen {
    /// The witness refused a grant of `node` as stale.
    Stale { node: u32, fence: u64, last: u64 },
    /// The witness let a holder of `node` in over the capacity.
    Overlap { node: u32, fence: u64, holders: u32 },
    /// A holder of `node` with `fence`, lost with its session, explained
    /// `overlaps` overlaps: lease overlaps, not violations.
    LeaseOverlap { node: u32, fence: u64, overlaps: u32 },
    /// A holder of `node` refused with `fence` as stale, then lost with
    /// its session: a late entry, not a stale grant.
    LateEntry { node: u32, fence: u64 },
    /// A request to `node` was not granted within the limit.
    Unanswered { node: u32 },
}

/// Latency percentiles in milliseconds.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Latency {
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

/// What a run measured.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Report {
    pub entries: u64,
    pub errors: u64,
    pub seconds: f64,
    pub throughput_per_s: f64,
    /// From asking to being granted.
    pub latency_ms: Latency,
    pub messages_per_entry: f64,
    /// Overlaps at the witness, less the lease overlaps.
    pub violations: u64,
    /// Overlaps with a holder whose node died while it held, which learned
    /// it a moment after the cluster did (see the witness's report).
    pub lease_overlaps: u64,
    /// Grants refused as stale at the witness, less the late entries.
    pub stale_fences: u64,
    /// Grants refused as stale whose holder's node had died: it granted
    /// and died before its holder came in, and the next holder came in
    /// first (see the witness's report).
    pub late_entries: u64,
    /// Requests not granted within the limit (`answer_within`).
    pub unanswered: u64,
}

#[derive(Default)]
struct Tally {
    entries: AtomicU64,
    errors: AtomicU64,
    stale: AtomicU64,
    unanswered: AtomicU64,
}

/// Total mutex-layer messages sent by the nodes that answer (each node
/// once, however many clients it serves).
///
/// The nodes are asked all at once: one after another, 128 nodes on two
/// busy cores took seconds, and a workload with a deadline ran out of
/// time before its first client began.
async fn mutex_messages(nodes: &[NodeAddr]) -> u64 {
    let mut seen = std::collections::BTreeSet::new();
    let asks = nodes.iter().filter(|n| seen.insert(n.addr.clone())).map(status::fetch);
    let views = futures_util::future::join_all(asks).await;
    views.into_iter().filter_map(Result::ok).map(|s| s.mutex_messages_sent).sum()
}

/// Runs the clients and gathers the report.
pub async fn drive(spec: Spec) -> Result<Report> {
    let before = mutex_messages(&spec.nodes).await;
    let witness_before = match &spec.witness {
        Some(addr) => Some(WitnessClient::connect(addr).await?.report().await?),
        None => None,
    };
    let tally = Arc::new(Tally::default());
    // Microseconds, from 1 µs to an hour; `saturating_record` clamps to the
    // bounds (an unbounded `new` would clamp everything to its initial 2).
    let histogram = Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3).expect("valid bounds");
    let histogram = Arc::new(Mutex::new(histogram));
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    let mut number = 0;
    for node in &spec.nodes {
        for _ in 0..spec.clients {
            let (node, spec, tally, histogram) =
                (node.clone(), spec.clone(), tally.clone(), histogram.clone());
            let clients = (spec.nodes.len() * spec.clients) as u64;
            let picker = spec.choice.picker(number, clients);
            number += 1;
            let run = Run { node, spec, picker, done: 0, tally, histogram };
            tasks.spawn(client_loop(run));
        }
    }
    let total = spec.requests.saturating_mul((spec.nodes.len() * spec.clients) as u64);
    let mut ticker = tokio::time::interval(Duration::from_secs(1));
    ticker.tick().await;
    loop {
        tokio::select! {
            next = tasks.join_next() => if next.is_none() { break },
            _ = ticker.tick(), if spec.progress => {
                eprint!("\r  {} / {} entries, {:.0}/s ", tally.entries.load(Ordering::Relaxed), total,
                    tally.entries.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64());
                let _ = std::io::stderr().flush();
            }
        }
    }
    if spec.progress {
        eprintln!();
    }
    let seconds = started.elapsed().as_secs_f64();
    let after = mutex_messages(&spec.nodes).await;
    let entries = tally.entries.load(Ordering::Relaxed);
    let (violations, lease_overlaps, stale_fences, late_entries) =
        match (&spec.witness, witness_before) {
            (Some(addr), Some(before)) => {
                let now = WitnessClient::connect(addr).await?.report().await?;
                (
                    now.violations.saturating_sub(before.violations),
                    now.lease_overlaps.saturating_sub(before.lease_overlaps),
                    now.stale_fences.saturating_sub(before.stale_fences),
                    now.late_entries.saturating_sub(before.late_entries),
                )
            }
            _ => (0, 0, tally.stale.load(Ordering::Relaxed), 0),
        };
    let h = histogram.lock().expect("histogram lock");
    let ms = |us: u64| us as f64 / 1000.0;
    Ok(Report {
        entries,
        errors: tally.errors.load(Ordering::Relaxed),
        seconds,
        throughput_per_s: entries as f64 / seconds.max(1e-9),
        latency_ms: Latency {
            p50: ms(h.value_at_quantile(0.5)),
            p99: ms(h.value_at_quantile(0.99)),
            max: ms(h.max()),
        },
        messages_per_entry: if entries > 0 {
            after.saturating_sub(before) as f64 / entries as f64
        } else {
            0.0
        },
        violations,
        lease_overlaps,
        stale_fences,
        late_entries,
        unanswered: tally.unanswered.load(Ordering::Relaxed),
    })
}

/// One client's part of a run, carried from session to session.
struct Run {
    node: NodeAddr,
    spec: Spec,
    picker: Picker,
    /// Entries made so far.
    done: u64,
    tally: Arc<Tally>,
    histogram: Arc<Mutex<Histogram<u64>>>,
}

impl Run {
    /// Whether the client has entries left to make, and time to make them.
    fn more(&self) -> bool {
        self.done < self.spec.requests && self.spec.deadline.is_none_or(|d| Instant::now() < d)
    }

    /// The node's id, as the witness knows it.
    fn id(&self) -> u32 {
        self.node.id.unwrap_or_default()
    }

    /// A grant came, `asked` ago.
    fn granted(&self, asked: Instant) {
        let waited = asked.elapsed().as_micros() as u64;
        self.histogram.lock().expect("histogram lock").saturating_record(waited.max(1));
    }

    /// A request was not granted within the limit.
    fn unanswered(&self) -> anyhow::Error {
        self.tally.unanswered.fetch_add(1, Ordering::Relaxed);
        self.tell(Seen::Unanswered { node: self.id() });
        anyhow::anyhow!("not granted within {:?}", self.spec.answer_within)
    }

    /// An entry was made and left.
    fn entered(&mut self) {
        self.done += 1;
        self.tally.entries.fetch_add(1, Ordering::Relaxed);
    }

    fn tell(&self, seen: Seen) {
        if let Some(events) = &self.spec.events {
            let _ = events.send(seen);
        }
    }

    /// The witness, if the run checks entries at one.
    async fn witness(&self) -> Result<Option<WitnessClient>> {
        Ok(match &self.spec.witness {
            Some(addr) => Some(WitnessClient::connect(addr).await?),
            None => None,
        })
    }

    /// Enters the witness with `fences`, counting and telling what it
    /// refuses or catches.
    async fn enter(&self, witness: &mut WitnessClient, fences: &[(String, u64)]) -> Result<()> {
        let id = self.id();
        for (name, fence) in fences {
            match witness.enter(name, *fence, id).await? {
                Entry::Stale { last } => {
                    self.tally.stale.fetch_add(1, Ordering::Relaxed);
                    self.tell(Seen::Stale { node: id, fence: *fence, last });
                }
                Entry::Accepted { holders, violation: true } => {
                    self.tell(Seen::Overlap { node: id, fence: *fence, holders })
                }
                Entry::Accepted { .. } => {}
            }
        }
        Ok(())
    }

    /// Leaves the witness with `fences`, the session that held them lost,
    /// telling of the overlaps that turns into lease overlaps and of the
    /// refusals it turns into late entries.
    async fn lost(&self, witness: &mut WitnessClient, fences: &[(String, u64)]) -> Result<()> {
        let node = self.id();
        for (name, fence) in fences {
            let verdict = witness.lost(name, *fence).await?;
            let (fence, overlaps) = (*fence, verdict.lease_overlaps);
            if overlaps > 0 {
                self.tell(Seen::LeaseOverlap { node, fence, overlaps });
            }
            if verdict.late_entry {
                self.tell(Seen::LateEntry { node, fence });
            }
        }
        Ok(())
    }

    /// Leaves the witness with `fences`.
    async fn leave(witness: &mut WitnessClient, fences: &[(String, u64)]) -> Result<()> {
        for (name, fence) in fences {
            witness.leave(name, *fence).await?;
        }
        Ok(())
    }
}

async fn client_loop(mut run: Run) {
    while run.more() {
        let session = match run.spec.http.clone() {
            Some(api) => http_session(&api, &mut run).await,
            None => one_session(&mut run).await,
        };
        if session.is_err() {
            // The node or the witness went away: count it, wait, retry.
            run.tally.errors.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

async fn one_session(run: &mut Run) -> Result<()> {
    let mut client = run.node.connect().await?;
    let mut witness = run.witness().await?;
    let mut next = run.picker.next();
    // Whether the session still holds the previous entry's locks: a client
    // that does not think releases them and asks again in one write.
    let mut held = false;
    while run.more() {
        let asked = Instant::now();
        let req = LockRequest::new(next.clone())
            .permits(run.spec.choice.permits)
            .timeout(Some(run.spec.answer_within));
        let chained = std::mem::take(&mut held);
        let ask = async {
            if chained {
                client.release_and_request(&req).await
            } else {
                client.request(&req).await
            }
        };
        // A wait the run's end overtakes is given up with the connection
        // (the node withdraws the request of a client that vanished): on a
        // long queue it could outlast the run by the whole answer timeout.
        let outcome = tokio::select! {
            outcome = ask => outcome?,
            () = run_end(run.spec.deadline) => return Ok(()),
        };
        let fences = match outcome {
            Outcome::Granted(grant) => grant.fences,
            Outcome::TimedOut | Outcome::Busy => return Err(run.unanswered()),
        };
        run.granted(asked);
        if let Some(w) = witness.as_mut() {
            run.enter(w, &fences).await?;
        }
        if !run.spec.hold.is_zero() {
            // A careful holder stops using the resource the moment its
            // session ends: its node died, and the lock is no longer its.
            // Loss first: when the hold's end and the loss are both there
            // at one wake-up (a busy machine ran this task late), the
            // session ended during the hold, and the holder was lost.
            tokio::select! {
                biased;
                loss = client.lost() => {
                    if let Some(w) = witness.as_mut() {
                        run.lost(w, &fences).await?;
                    }
                    bail!("lost the lock while holding it: {loss}");
                }
                _ = tokio::time::sleep(run.spec.hold) => {}
            }
        }
        if let Some(w) = witness.as_mut() {
            Run::leave(w, &fences).await?;
        }
        run.entered();
        next = run.picker.next();
        if run.spec.think.is_zero() && !run.spec.no_chain && run.more() {
            held = true;
            continue;
        }
        client.release().await?;
        if !run.spec.think.is_zero() {
            tokio::time::sleep(run.spec.think).await;
        }
    }
    if held {
        client.release().await?;
    }
    Ok(())
}

/// Resolves when the run's `deadline` passes; never without one.
async fn run_end(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// [`one_session`] over the HTTP API: an API session with a TTL, then
/// acquire (waiting up to `answer_within`), witness, hold, release — two
/// requests an entry on one keep-alive connection.
async fn http_session(api: &HttpTarget, run: &mut Run) -> Result<()> {
    let id = run.id();
    let Some(addr) = api.addrs.get(&id) else { bail!("node {id} does not serve the HTTP API") };
    let mut client = api.connect(addr).await?;
    // Long enough to outlast any one entry (a wait, a hold, a think); a
    // longer run keeps the session alive between entries, as a client of
    // etcd's or Consul's sessions does, at a third of its TTL.
    let spec = &run.spec;
    let ttl = spec.answer_within + spec.hold + spec.think + Duration::from_secs(30);
    let wait = Wait::Block(Some(spec.answer_within));
    let deadline = spec.deadline;
    let session = client.create_session(ttl).await?;
    let mut renewed = Instant::now();
    let mut witness = run.witness().await?;
    while run.more() {
        if renewed.elapsed() >= ttl / 3 {
            client.keepalive(&session).await?;
            renewed = Instant::now();
        }
        let [name] = &run.picker.next()[..] else { bail!("--http takes one name a request") };
        let asked = Instant::now();
        let acquired = tokio::select! {
            acquired = client.acquire(name, &session, wait) => acquired,
            () = run_end(deadline) => {
                // Given up as an API client gives up a wait: closing its
                // session withdraws the request (and releases the lock if
                // it was granted meanwhile), on a fresh connection, the
                // old one being mid-request.
                let mut fresh = api.connect(addr).await?;
                fresh.close_session(&session).await?;
                return Ok(());
            }
        };
        let grant = match acquired {
            Ok(grant) => grant,
            Err(HttpError::Api { status: 408, .. }) => return Err(run.unanswered()),
            Err(e) => return Err(e.into()),
        };
        run.granted(asked);
        let fences = [(grant.name.clone(), grant.fence)];
        if let Some(w) = witness.as_mut() {
            run.enter(w, &fences).await?;
        }
        if !run.spec.hold.is_zero() {
            tokio::time::sleep(run.spec.hold).await;
        }
        if let Some(w) = witness.as_mut() {
            Run::leave(w, &fences).await?;
        }
        client.release(name, &session, grant.fence).await?;
        run.entered();
        if !run.spec.think.is_zero() {
            tokio::time::sleep(run.spec.think).await;
        }
    }
    client.close_session(&session).await?;
    Ok(())
}

pub fn print(report: &Report) {
    println!(
        "{} entries in {:.2}s: {:.0} entries/s; latency p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        report.entries,
        report.seconds,
        report.throughput_per_s,
        report.latency_ms.p50,
        report.latency_ms.p99,
        report.latency_ms.max
    );
    println!(
        "messages per entry {:.2}; witness: {} violations, {} stale fences; {} failed client attempts ({} unanswered)",
        report.messages_per_entry, report.violations, report.stale_fences, report.errors, report.unanswered
    );
    if report.lease_overlaps > 0 {
        println!(
            "lease overlaps: {} (a holder's node died while it held; the lock moved on before the holder heard, and the newer fence is higher)",
            report.lease_overlaps
        );
    }
    if report.late_entries > 0 {
        println!(
            "late entries: {} (a holder's node granted and died before the holder came in, and the next holder, with a higher fence, came in first)",
            report.late_entries
        );
    }
}

pub fn run(args: Args) -> Result<ExitCode> {
    let cfg = args.target.load_config()?;
    let configured = cfg.as_ref().and_then(|c| c.witness.as_ref()).map(|w| w.addr.clone());
    let witness = if args.no_witness { None } else { args.witness.clone().or(configured) };
    let nodes = args.target.nodes()?;
    let (nodes, clients) = match args.total_clients {
        // One client per entry, the nodes dealt in turn.
        Some(total) => (nodes.iter().cycle().take(total).cloned().collect(), 1),
        None => (nodes, args.clients),
    };
    let http = match (args.http, &cfg) {
        (false, _) => None,
        (true, Some(cfg)) => Some(Arc::new(HttpTarget::of(cfg)?)),
        (true, None) => bail!("--http needs the configuration (--config), for the nodes' APIs"),
    };
    if http.is_some() && args.choice.per_request > 1 {
        bail!("--http takes one name a request (the API's acquire is per name)");
    }
    let spec = Spec {
        http,
        no_chain: args.no_chain,
        nodes,
        clients,
        choice: args.choice.choice()?,
        requests: args.requests,
        hold: args.hold,
        think: args.think,
        witness,
        deadline: args.duration.map(|d| Instant::now() + d),
        progress: !args.json,
        answer_within: args.answer_within,
        events: None,
    };
    let report = common::small_runtime()?.block_on(drive(spec))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print(&report);
    }
    Ok(if report.violations == 0 && report.stale_fences == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
