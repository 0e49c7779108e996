//! `coterie certs`: a CA and certificates for the nodes of a configuration
//! that exists already (a compose file's, a hand-written one), as `init
//! --tls` makes them for the file it writes.

use anyhow::{bail, Context, Result};
use coterie_node::config::Config;
use coterie_node::pki;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Make a CA and a certificate per node of a configuration, and one for
/// clients: `coterie certs --config cluster.toml --dir tls`.
///
/// Each node's certificate names `node-ID.coterie` and the hosts its
/// addresses in the file use. The files are `ca.pem` (and its key
/// `ca.key`), `nodeN.pem`/`nodeN.key` and `client.pem`/`client.key`; point
/// `[security]` at them (the lines to add are printed) and the nodes take
/// them up, running ones within seconds.
#[derive(clap::Args)]
pub struct Args {
    /// The configuration whose nodes to certify.
    #[arg(long, short = 'c', value_name = "FILE", env = "COTERIE_CONFIG")]
    config: PathBuf,
    /// Where to write the files (default: beside the configuration).
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// How long the certificates are valid, in days.
    #[arg(long, default_value_t = 365, value_parser = clap::value_parser!(u32).range(1..=36500))]
    days: u32,
    /// Overwrite a CA already there (every certificate it signed stops
    /// being trusted).
    #[arg(long, short = 'f')]
    force: bool,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let mut config = Config::load(&args.config)?;
    let beside = args.config.parent().filter(|d| !d.as_os_str().is_empty());
    let dir = args.dir.clone().unwrap_or_else(|| beside.unwrap_or(".".as_ref()).to_path_buf());
    if dir.join(pki::CA).exists() && !args.force {
        bail!(
            "{} exists: certs keeps a CA (--force makes a new one, and every certificate the old \
             one signed stops being trusted)",
            dir.join(pki::CA).display()
        );
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let valid = Duration::from_secs(u64::from(args.days) * 24 * 3600);
    pki::make(&mut config, &dir, valid)?;
    let shown = |name: &str| {
        let path = dir.join(name);
        let path = match beside {
            Some(base) => path.strip_prefix(base).map(|p| p.to_path_buf()).unwrap_or(path),
            None => path,
        };
        path.display().to_string()
    };
    eprintln!(
        "coterie certs: wrote a CA and certificates for {} nodes and clients in {}",
        config.nodes.len(),
        dir.display()
    );
    println!("[security]");
    for (key, file) in [
        ("tls_ca", pki::CA),
        ("tls_cert", pki::NODE_CERT),
        ("tls_key", pki::NODE_KEY),
        ("tls_client_cert", pki::CLIENT_CERT),
        ("tls_client_key", pki::CLIENT_KEY),
    ] {
        println!("{key} = {:?}", shown(file));
    }
    Ok(ExitCode::SUCCESS)
}
