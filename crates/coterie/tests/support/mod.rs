//! What the binary's end-to-end tests share: running `coterie`, a
//! cluster of real node processes started with `coterie up`, and `coterie
//! lock` commands run in the background.
//!
//! With `COTERIE_TEST_TLS=1` every cluster [`Up`] starts speaks TLS on
//! every port (clients are not asked for certificates, so the API's
//! tokens stay as the tests set them), `coterie` commands find the CA in
//! the cluster file, and [`curl`] trusts it: `scripts/test.sh` runs the
//! CLI and HTTP suites so a second time. One set of certificates serves
//! every cluster of the process: they are all on loopback, and a node's
//! certificate names only its id and the loopback host. The tests that
//! speak the plain wire by hand, or test the secret itself, skip
//! themselves then ([`plain_only`]).
#![allow(dead_code)] // each test file uses its own part

use coterie_node::config::{ClusterSection, Config};
use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_coterie");

/// Every mutual-exclusion algorithm, by its configuration name.
pub fn mutexes() -> impl Iterator<Item = &'static str> {
    coterie_core::registry::MUTEXES.iter().map(|m| m.name)
}

/// Whether the clusters speak TLS (`COTERIE_TEST_TLS`).
pub fn tls_on() -> bool {
    std::env::var_os("COTERIE_TEST_TLS").is_some_and(|v| !v.is_empty() && v != "0")
}

/// Whether test `name`, which speaks the plain wire by hand or tests the
/// secret, is to be skipped: it is under TLS, and says so.
pub fn plain_only(name: &str) -> bool {
    let skip = tls_on();
    if skip {
        println!("{name}: plain TCP or the secret only: skipped under COTERIE_TEST_TLS");
    }
    skip
}

/// The directory of the process's certificates under TLS, made on first
/// use: a CA and a certificate for each node id up to 16 on 127.0.0.1,
/// and one for clients.
pub fn certificates() -> &'static Path {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        // Those of test processes that have ended go first.
        for entry in std::fs::read_dir(std::env::temp_dir()).into_iter().flatten().flatten() {
            let name = entry.file_name();
            let Some(pid) = name.to_str().and_then(|n| n.strip_prefix("coterie-cli-tls-")) else {
                continue;
            };
            if !Path::new("/proc").join(pid).exists() {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
        let dir = std::env::temp_dir().join(format!("coterie-cli-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut cfg = test_config(16);
        coterie_node::pki::make(&mut cfg, &dir, Duration::from_secs(24 * 3600)).unwrap();
        dir
    })
}

/// `cfg` with TLS on every port, from [`certificates`].
pub fn with_tls(cfg: &mut Config) {
    let dir = certificates();
    let s = &mut cfg.security;
    s.tls_ca = Some(dir.join("ca.pem"));
    s.tls_cert = Some(dir.join("node{id}.pem"));
    s.tls_key = Some(dir.join("node{id}.key"));
    s.tls_client_cert = Some(dir.join("client.pem"));
    s.tls_client_key = Some(dir.join("client.key"));
}

/// What curl needs to trust the clusters' nodes, under TLS.
pub fn curl_tls() -> Vec<String> {
    if !tls_on() {
        return Vec::new();
    }
    vec!["--cacert".into(), certificates().join("ca.pem").display().to_string()]
}

pub fn coterie(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("run coterie")
}

/// `coterie lock` through `node`, to its end: `args` (flags and names),
/// then `--` and the command.
pub fn lock_now(up: &Up, node: u32, args: &[&str], cmd: &[&str]) -> std::process::Output {
    let node = node.to_string();
    let mut all = vec!["lock", "--config", up.config(), "--node", &node];
    all.extend_from_slice(args);
    all.push("--");
    all.extend_from_slice(cmd);
    coterie(&all)
}

/// `n` ports free on loopback now.
pub fn free_ports(n: usize) -> Vec<u16> {
    coterie_node::config::free_ports("127.0.0.1", n).expect("free ports on loopback")
}

/// A cluster of `n` node processes started with `coterie up`.
pub struct Up {
    child: Child,
    /// `up`'s standard input, for its control commands.
    control: Option<std::process::ChildStdin>,
    config: PathBuf,
    /// Each node's HTTP API address, node 1 first.
    http: Vec<String>,
    _dir: TempDir,
}

pub struct TempDir(pub PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The configuration every test cluster starts from: `n` nodes on free
/// loopback ports (each with the HTTP API), centralized under bully,
/// heartbeats every 50 ms, a failure timeout of 250 ms, faults allowed.
pub fn test_config(n: u32) -> Config {
    let mutex = coterie_core::registry::mutex("centralized").unwrap();
    let election = coterie_core::registry::election("bully").unwrap();
    let mut cfg = Config::loopback(
        ClusterSection::new("cli", mutex, election),
        &free_ports(3 * n as usize),
        true,
    );
    cfg.timing.heartbeat = Duration::from_millis(50);
    cfg.timing.failure_timeout = Duration::from_millis(250);
    cfg.security.allow_faults = true;
    cfg
}

impl Up {
    /// Starts a cluster of [`test_config`]. Ports are found by binding and
    /// releasing them, so a test running alongside may take one first;
    /// then a node cannot start, the cluster never settles, and it is
    /// started again on fresh ports.
    pub fn start(n: u32, name: &str) -> Up {
        Up::start_with(n, name, |_| {})
    }

    /// Starts a cluster of [`test_config`] as `configure` changes it.
    pub fn start_with(n: u32, name: &str, configure: impl Fn(&mut Config)) -> Up {
        Up::start_in(n, name, configure, &[])
    }

    /// Starts a cluster as [`start_with`](Up::start_with) does, with `env`
    /// set for `coterie up` and its nodes.
    pub fn start_in(
        n: u32,
        name: &str,
        configure: impl Fn(&mut Config),
        env: &[(&str, &str)],
    ) -> Up {
        for attempt in 0..3 {
            let up = Up::launch(n, &format!("{name}-{attempt}"), &configure, env);
            if let Some(up) = up.settled(n) {
                return up;
            }
        }
        panic!("a {n}-node cluster never settled in three attempts");
    }

    /// Starts a cluster of `n` nodes from the file `coterie init` writes
    /// with `init` (flags: `--tls`, `--set ...`), on free ports, with the
    /// timing of [`test_config`] and faults allowed; three attempts, as
    /// [`start_in`](Up::start_in) makes.
    pub fn init(n: u32, name: &str, init: &[&str]) -> Up {
        for attempt in 0..3 {
            let dir = scratch(&format!("init-{name}-{attempt}"));
            let config = dir.0.join("cluster.toml");
            let nodes = n.to_string();
            let mut args = vec!["init", "--nodes", &nodes, "--free-ports", "--allow-faults"];
            args.extend(["--heartbeat", "50ms", "--failure-timeout", "250ms", "--name", name]);
            args.extend(["--out", config.to_str().unwrap()]);
            args.extend_from_slice(init);
            let out = coterie(&args);
            assert!(out.status.success(), "init: {}", String::from_utf8_lossy(&out.stderr));
            let cfg = Config::load(&config).unwrap();
            let http = cfg.nodes.iter().filter_map(|node| node.http.clone()).collect();
            if let Some(up) = Up::run(config, http, dir, &[]).settled(n) {
                return up;
            }
        }
        panic!("a {n}-node cluster from coterie init never settled in three attempts");
    }

    /// The cluster, once its `n` nodes agree on the highest as coordinator
    /// within 10 s; else `None`, and it is stopped.
    fn settled(self, n: u32) -> Option<Up> {
        let settled = self.try_wait_for(Duration::from_secs(10), |rows| {
            agreed(rows).is_some_and(|(c, n_up)| c == n && n_up == n as usize)
        });
        settled.map(|_| self)
    }

    /// The directory the cluster's files are in.
    pub fn dir(&self) -> &Path {
        &self._dir.0
    }

    /// What `coterie up` and its nodes logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self._dir.0.join("up.log")).unwrap_or_default()
    }

    /// Node `id`'s HTTP API address, `HOST:PORT`.
    pub fn http_addr(&self, id: u32) -> &str {
        &self.http[id as usize - 1]
    }

    pub fn launch(n: u32, name: &str, configure: impl Fn(&mut Config), env: &[(&str, &str)]) -> Up {
        let dir = std::env::temp_dir().join(format!("coterie-cli-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut cfg = test_config(n);
        configure(&mut cfg);
        if tls_on() {
            with_tls(&mut cfg);
        }
        // The HTTP API too, unless a secret without tokens forbids it.
        let http: Vec<String> = cfg.nodes.iter().filter_map(|node| node.http.clone()).collect();
        if cfg.security.secret_file.is_some() && cfg.security.api_token_file.is_none() {
            cfg.nodes.iter_mut().for_each(|node| node.http = None);
        }
        let config = dir.join("cluster.toml");
        std::fs::write(&config, cfg.to_toml()).unwrap();
        Up::run(config, http, TempDir(dir), env)
    }

    /// `coterie up` on the file `config` in `dir` (its log `up.log`
    /// there), with `env` set; `http`: the nodes' API addresses.
    fn run(config: PathBuf, http: Vec<String>, dir: TempDir, env: &[(&str, &str)]) -> Up {
        let log = std::fs::File::create(dir.0.join("up.log")).unwrap();
        let mut child = Command::new(BIN)
            .args(["up", "--config"])
            .arg(&config)
            .envs(env.iter().copied())
            .stderr(log)
            .stdout(Stdio::null())
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        let control = child.stdin.take();
        Up { child, control, config, http, _dir: dir }
    }

    /// What a client library shows the cluster's nodes: TLS from the
    /// configuration, if it speaks TLS (the tests that use the secret
    /// pass their own).
    pub fn credentials(&self) -> Option<coterie_node::Credentials> {
        let tls = self.configuration().client_tls().unwrap()?;
        Some(coterie_node::Credentials { tls: Some(tls), ..Default::default() })
    }

    /// The configuration the cluster runs, as written.
    pub fn configuration(&self) -> Config {
        Config::load(&self.config).unwrap()
    }

    /// Types a control command into `up`.
    pub fn control(&mut self, line: &str) {
        let stdin = self.control.as_mut().expect("up's stdin");
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }

    /// Node `id`'s HTTP API, as `http://HOST:PORT` (`https://` under
    /// TLS).
    pub fn http(&self, id: u32) -> String {
        let scheme = if tls_on() { "https" } else { "http" };
        format!("{scheme}://{}", self.http[id as usize - 1])
    }

    pub fn config(&self) -> &str {
        self.config.to_str().unwrap()
    }

    pub fn status(&self) -> Vec<Value> {
        let out = coterie(&["status", "--config", self.config(), "--json"]);
        serde_json::from_slice(&out.stdout).unwrap_or_default()
    }

    pub fn wait_for(&self, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        self.try_wait_for(Duration::from_secs(30), done)
            .unwrap_or_else(|| panic!("cluster never settled: {:#?}", self.status()))
    }

    pub fn try_wait_for(
        &self,
        limit: Duration,
        done: impl Fn(&[Value]) -> bool,
    ) -> Option<Vec<Value>> {
        let start = Instant::now();
        loop {
            let rows = self.status();
            if done(&rows) {
                return Some(rows);
            }
            if start.elapsed() > limit {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The pid of node `id`'s process, a child of `coterie up`.
    pub fn node_pid(&self, id: u32) -> u32 {
        let needle = format!("--id\0{id}\0");
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline);
            if cmdline.contains(self.config()) && cmdline.contains(&needle) {
                return pid;
            }
        }
        panic!("no process for node {id}");
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        self.control = None; // EOF on up's stdin
        unsafe_kill(self.child.id(), 15);
        let _ = self.child.wait();
    }
}

pub fn unsafe_kill(pid: u32, signal: i32) {
    let _ = Command::new("kill").arg(format!("-{signal}")).arg(pid.to_string()).status();
}

/// The coordinator every reachable node agrees on, and how many agree.
pub fn agreed(rows: &[Value]) -> Option<(u32, usize)> {
    let reachable: Vec<&Value> = rows.iter().filter(|r| r["reachable"] == true).collect();
    let first = reachable.first()?["coordinator"].as_u64()?;
    let all = reachable
        .iter()
        .all(|r| r["coordinator"].as_u64() == Some(first) && r["epoch"] == reachable[0]["epoch"]);
    all.then_some((first as u32, reachable.len()))
}

/// `coterie lock --config CONFIG --node NODE [flags] -- sh -c SCRIPT`,
/// started; `SCRIPT` runs with `$D` set to `dir`, and `coterie lock`'s
/// standard error goes to `dir/lock.err` (a file: the command, which
/// inherits it, may outlive `coterie lock`).
pub fn lock_running(config: &str, node: u32, flags: &[&str], script: &str, dir: &Path) -> Child {
    use std::os::unix::process::CommandExt;
    Command::new(BIN)
        // A group of its own: a test that stops it (SIGSTOP) must not leave
        // a stopped member in the test runner's group (see up::spawn_node).
        .process_group(0)
        .args(["lock", "--config", config, "--node", &node.to_string()])
        .args(flags)
        .args(["--", "sh", "-c", script])
        .env("D", dir)
        .stderr(std::fs::File::create(dir.join("lock.err")).unwrap())
        .spawn()
        .unwrap()
}

/// Waits for `child`, started by [`lock_running`] in `dir`, to exit, up to
/// a generous deadline; its status and standard error.
pub fn finished(mut child: Child, dir: &Path) -> (Option<i32>, String) {
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!("coterie lock did not exit");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    (status.code(), std::fs::read_to_string(dir.join("lock.err")).unwrap_or_default())
}

/// Waits for `path` to appear (a command's marker file).
pub fn appears(path: &Path) {
    let start = Instant::now();
    while !path.exists() {
        assert!(start.elapsed() < Duration::from_secs(30), "{} never appeared", path.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether process `pid` is gone (or a zombie nobody reaped yet).
pub fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat.split(") ").nth(1).is_some_and(|rest| rest.starts_with('Z')),
    }
}

/// A scratch directory named for the test.
pub fn scratch(name: &str) -> TempDir {
    let dir = std::env::temp_dir().join(format!("coterie-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    TempDir(dir)
}

/// What makes a cluster's configuration secured: a secret, and bearer
/// tokens for its HTTP API (`tokens`: the token file's text), their files
/// written in `dir`.
pub fn api_security(dir: &Path, tokens: &str) -> impl Fn(&mut Config) {
    let (secret, file) = (dir.join("secret"), dir.join("tokens"));
    std::fs::write(&secret, "a shared secret for the tests\n").unwrap();
    std::fs::write(&file, tokens).unwrap();
    move |cfg: &mut Config| {
        cfg.security.secret_file = Some(secret.clone());
        cfg.security.api_token_file = Some(file.clone());
    }
}

/// `curl -sS ARGS`: what it printed.
pub fn curl(args: &[&str]) -> String {
    let out =
        Command::new("curl").arg("-sS").args(curl_tls()).args(args).output().expect("run curl");
    String::from_utf8_lossy(&out.stdout).into_owned()
}
