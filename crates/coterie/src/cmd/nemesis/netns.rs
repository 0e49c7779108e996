//! Real partitions: each node in a network namespace of its own, linked to
//! a bridge by a veth pair, and cut off from chosen peers by nftables
//! rules inside its namespace.
//!
//! ```text
//!   root namespace: the driver, its witness, the clients
//!        │ veth  10.A.B.254
//!   ┌────┴──────────── coterie-PID-hub: bridge br0 ───────────────┐
//!   │ veth            │ veth            │ veth                     │
//! coterie-PID-n1    coterie-PID-n2    coterie-PID-n3  …  (10.A.B.i)
//! ```
//!
//! A cut between nodes `a` and `b` is two rules in each of their
//! namespaces (drop what comes from, and what goes to, the other's
//! address): the packets vanish on the wire, as in a real partition, and
//! TCP finds out only by its own timers. The root namespace's link is
//! never cut, so the clients and the driver still reach every node: the
//! partition is between the nodes.
//!
//! Everything is named after this process's id and the run's number. Dropping the [`Network`]
//! deletes its namespaces (and with them the bridge and every veth); a
//! driver killed before it could do so leaves namespaces named after a
//! dead process, which the next run deletes before it starts
//! ([`Network::sweep`]).

use anyhow::{bail, Context, Result};
use std::process::Command;

/// The namespaces, bridge and links of one run.
pub struct Network {
    prefix: String,
    run: u32,
    nodes: u32,
    subnet: (u8, u8),
}

/// Runs `ip` (or another tool) with `args`; an error with its stderr if it
/// fails.
fn run(tool: &str, args: &[&str]) -> Result<()> {
    let out = Command::new(tool).args(args).output().with_context(|| format!("running {tool}"))?;
    if !out.status.success() {
        bail!("{tool} {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

impl Network {
    /// Whether this machine lets us make namespaces, veth pairs and
    /// nftables rules: root, with `ip` and `nft` on the path.
    pub fn possible() -> bool {
        // SAFETY: geteuid has no preconditions and cannot fail.
        let root = unsafe { libc::geteuid() } == 0;
        let has =
            |tool: &str| Command::new(tool).arg("-V").output().is_ok_and(|o| o.status.success());
        root && has("ip") && has("nft")
    }

    /// Deletes the namespaces that runs whose process is gone left behind.
    pub fn sweep() {
        let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else { return };
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let name = line.split_whitespace().next().unwrap_or_default();
            let Some(rest) = name.strip_prefix("coterie-") else { continue };
            let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
                continue;
            };
            if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                let _ = run("ip", &["netns", "del", name]);
            }
        }
    }

    /// Makes the hub, one namespace per node and the links, for this
    /// process's `run`-th run (each run's names and subnet are its own: a
    /// namespace deleted by the run before may linger a moment in the
    /// kernel).
    pub fn create(nodes: u32, run: u32) -> Result<Network> {
        Network::sweep();
        let pid = std::process::id();
        let net = Network {
            prefix: format!("coterie-{pid}-{run}"),
            run,
            nodes,
            subnet: (100 + ((pid >> 8) % 100) as u8, (pid.wrapping_add(run) % 256) as u8),
        };
        if let Err(e) = net.build() {
            drop(net);
            return Err(e.context("setting up the nodes' network namespaces"));
        }
        Ok(net)
    }

    fn build(&self) -> Result<()> {
        let hub = self.hub();
        run("ip", &["netns", "add", &hub])?;
        run("ip", &["-n", &hub, "link", "add", "br0", "type", "bridge"])?;
        run("ip", &["-n", &hub, "link", "set", "br0", "up"])?;
        // The root namespace's link: the driver and the clients.
        let root = self.root_link();
        run("ip", &["link", "add", &root, "type", "veth", "peer", "name", "up0", "netns", &hub])?;
        run("ip", &["-n", &hub, "link", "set", "up0", "master", "br0", "up"])?;
        run("ip", &["addr", "add", &format!("{}/24", self.address(254)), "dev", &root])?;
        run("ip", &["link", "set", &root, "up"])?;
        for id in 1..=self.nodes {
            let ns = self.namespace(id);
            run("ip", &["netns", "add", &ns])?;
            let port = format!("n{id}");
            run(
                "ip",
                &[
                    "-n", &hub, "link", "add", &port, "type", "veth", "peer", "name", "eth0",
                    "netns", &ns,
                ],
            )?;
            run("ip", &["-n", &hub, "link", "set", &port, "master", "br0", "up"])?;
            run(
                "ip",
                &["-n", &ns, "addr", "add", &format!("{}/24", self.address(id)), "dev", "eth0"],
            )?;
            run("ip", &["-n", &ns, "link", "set", "eth0", "up"])?;
            run("ip", &["-n", &ns, "link", "set", "lo", "up"])?;
        }
        Ok(())
    }

    /// The root namespace's end of its link to the hub: `ct`, the pid in
    /// hex, `x`, the run: within the 15 bytes a link's name may have.
    fn root_link(&self) -> String {
        format!("ct{:x}x{}r", std::process::id(), self.run)
    }

    fn hub(&self) -> String {
        format!("{}-hub", self.prefix)
    }

    /// Node `id`'s namespace.
    pub fn namespace(&self, id: u32) -> String {
        format!("{}-n{id}", self.prefix)
    }

    /// The address of host `i` (a node's id; 254 is the root namespace).
    pub fn address(&self, i: u32) -> String {
        format!("10.{}.{}.{i}", self.subnet.0, self.subnet.1)
    }

    /// What node `id`'s process is started under: `ip netns exec NS`.
    pub fn wrap(&self, id: u32) -> Vec<String> {
        vec!["ip".into(), "netns".into(), "exec".into(), self.namespace(id)]
    }

    /// Cuts node `id` off from `peers` (both ways), inside its namespace.
    pub fn cut(&self, id: u32, peers: &[u32]) -> Result<()> {
        let ns = self.namespace(id);
        let ips: Vec<String> = peers.iter().map(|&p| self.address(p)).collect();
        let set = ips.join(", ");
        let rules = format!(
            "table inet coterie {{\n  chain in {{ type filter hook input priority 0; ip saddr {{ {set} }} drop; }}\n  chain out {{ type filter hook output priority 0; ip daddr {{ {set} }} drop; }}\n}}\n"
        );
        let file = std::env::temp_dir().join(format!("{ns}.nft"));
        std::fs::write(&file, rules)?;
        let applied = run("ip", &["netns", "exec", &ns, "nft", "-f", &file.display().to_string()]);
        let _ = std::fs::remove_file(&file);
        applied
    }

    /// Lifts every cut of node `id`.
    pub fn heal(&self, id: u32) {
        let _ = run(
            "ip",
            &["netns", "exec", &self.namespace(id), "nft", "delete", "table", "inet", "coterie"],
        );
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        for id in 1..=self.nodes {
            let _ = run("ip", &["netns", "del", &self.namespace(id)]);
        }
        // The hub's bridge and veths go with it, and the root end of the
        // root link with its peer.
        let _ = run("ip", &["netns", "del", &self.hub()]);
    }
}
