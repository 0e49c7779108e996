//! A docker compose project someone else started (`run --compose`): steps
//! on processes become `docker compose kill/start/pause/unpause`.

use crate::cmd::common::NodeAddr;
use anyhow::{bail, Context, Result};
use std::path::Path;

/// The compose project, and its nodes' client addresses.
pub struct Compose {
    /// `docker compose -p PROJECT -f FILE` or, where only the old tool
    /// is, `docker-compose -p PROJECT -f FILE`.
    command: Vec<String>,
    nodes: Vec<NodeAddr>,
    /// The witness's address on the compose network.
    witness: String,
}

impl Compose {
    /// The project `project` of compose file `file`, whose containers run
    /// the cluster configuration `config` (as seen from here: its secret
    /// and ports); finds each container's address.
    pub fn attach(project: &str, file: &Path, config: &Path) -> Result<Compose> {
        let cfg = coterie_node::Config::load(config).with_context(|| {
            format!("--compose reads the containers' cluster from {}", config.display())
        })?;
        let mut compose =
            Compose { command: prefix(project, file), nodes: vec![], witness: "".into() };
        let credentials = crate::cmd::common::credentials(&cfg)?;
        for n in &cfg.nodes {
            let port = n.client.rsplit(':').next().unwrap_or("7200");
            let ip = compose.ip(&format!("node{}", n.id))?;
            let addr = format!("{ip}:{port}");
            compose.nodes.push(NodeAddr { id: Some(n.id), addr, credentials: credentials.clone() });
        }
        let witness = cfg.witness.as_ref().map(|w| w.addr.clone()).context("no [witness]")?;
        let port = witness.rsplit(':').next().unwrap_or("7300");
        compose.witness = format!("{}:{port}", compose.ip("witness")?);
        Ok(compose)
    }

    /// The nodes' client addresses, in id order.
    pub fn nodes(&self) -> &[NodeAddr] {
        &self.nodes
    }

    /// The witness's address.
    pub fn witness(&self) -> &str {
        &self.witness
    }

    fn run(&self, args: &[&str]) -> std::io::Result<std::process::Output> {
        std::process::Command::new(&self.command[0]).args(&self.command[1..]).args(args).output()
    }

    /// `docker compose VERB nodeID`.
    pub fn node_command(&self, verb: &str, id: u32) -> Result<()> {
        let service = format!("node{id}");
        let status = self.run(&[verb, &service]).context("cannot run docker compose")?.status;
        if !status.success() {
            bail!("docker compose {verb} {service} failed ({status})");
        }
        Ok(())
    }

    /// The IP of `service`'s container on the compose network.
    fn ip(&self, service: &str) -> Result<String> {
        let out = self.run(&["ps", "-q", service]).context("cannot run docker compose")?;
        let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if id.is_empty() {
            bail!("no container for {service} in `{}`", self.command.join(" "));
        }
        let out = std::process::Command::new("docker")
            .args(["inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}"])
            .arg(&id)
            .output()
            .context("cannot run docker")?;
        let ips = String::from_utf8_lossy(&out.stdout).to_string();
        ips.split_whitespace()
            .next()
            .map(str::to_string)
            .with_context(|| format!("{service} has no IP address"))
    }
}

/// `docker compose -p PROJECT -f FILE`, or the same with the old
/// `docker-compose`.
fn prefix(project: &str, file: &Path) -> Vec<String> {
    let v2 = std::process::Command::new("docker")
        .args(["compose", "version"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let mut command: Vec<String> =
        if v2 { vec!["docker".into(), "compose".into()] } else { vec!["docker-compose".into()] };
    command.extend(["-p".into(), project.into(), "-f".into(), file.display().to_string()]);
    command
}
