//! Certificates a lab can make in one command (`coterie init --tls`), with
//! rcgen: a CA, a certificate and key per node, and one for clients, all
//! ECDSA P-256, written beside the configuration.
//!
//! A node's certificate names `node-ID.coterie` (the identity its peers
//! check) and every host the configuration gives it (what its clients
//! check), and serves both ends of a connection (server and client
//! authentication). The client's names `client.coterie`. The CA's key is
//! written too, `ca.key`, to make more later; no node needs it.

use crate::config::Config;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use std::path::Path;
use std::time::{Duration, SystemTime};

/// How long what `init --tls` makes stays valid.
pub const VALID_FOR: Duration = Duration::from_secs(365 * 24 * 3600);

/// The files, relative to the configuration, and the `[security]` keys
/// that name them.
pub const CA: &str = "ca.pem";
/// The CA's private key.
pub const CA_KEY: &str = "ca.key";
/// Each node's certificate, `{id}` its id.
pub const NODE_CERT: &str = "node{id}.pem";
/// Each node's key.
pub const NODE_KEY: &str = "node{id}.key";
/// The clients' certificate.
pub const CLIENT_CERT: &str = "client.pem";
/// The clients' key.
pub const CLIENT_KEY: &str = "client.key";

/// Why certificates could not be made.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    /// rcgen refused the parameters.
    #[error("making a certificate: {0}")]
    Make(#[from] rcgen::Error),
    /// A file could not be written.
    #[error("writing {}: {source}", path.display())]
    Write {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

type Result<T> = std::result::Result<T, PkiError>;

/// Writes a CA, a certificate per node of `config` and one for clients
/// into `dir`, valid from now for `valid` (an hour back, for clocks a
/// little behind); points `config`'s `[security]` at them (by name,
/// relative to `dir`: put the configuration there).
pub fn make(config: &mut Config, dir: &Path, valid: Duration) -> Result<()> {
    let now = SystemTime::now();
    make_between(config, dir, now - Duration::from_secs(3600), now + valid)
}

/// As [`make`], valid from `not_before` until `not_after` (in the past,
/// for a test of expired certificates).
pub fn make_between(
    config: &mut Config,
    dir: &Path,
    not_before: SystemTime,
    not_after: SystemTime,
) -> Result<()> {
    let (not_before, not_after) = (not_before.into(), not_after.into());
    let window = |params: &mut CertificateParams| {
        params.not_before = not_before;
        params.not_after = not_after;
    };
    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::default();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name.push(DnType::CommonName, format!("coterie CA ({})", config.cluster.name));
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    window(&mut ca);
    let ca_cert = ca.self_signed(&ca_key)?;
    write(dir, CA, &ca_cert.pem(), false)?;
    write(dir, CA_KEY, &ca_key.serialize_pem(), true)?;

    let leaf = |names: Vec<String>, common: String| -> Result<(String, String)> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(names)?;
        params.distinguished_name.push(DnType::CommonName, common);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages =
            vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        params.use_authority_key_identifier_extension = true;
        window(&mut params);
        let cert = params.signed_by(&key, &ca_cert, &ca_key)?;
        Ok((cert.pem(), key.serialize_pem()))
    };
    for node in &config.nodes {
        let mut names = vec![crate::tls::node_name(node.id)];
        for addr in [Some(&node.peer), Some(&node.client), node.http.as_ref()].into_iter().flatten()
        {
            let host = host_of(addr);
            if is_loopback(&host) {
                names.extend(["localhost".to_string(), "127.0.0.1".to_string()]);
            }
            names.push(host);
        }
        names.sort();
        names.dedup();
        let (cert, key) = leaf(names, format!("coterie node {}", node.id))?;
        let id = node.id.to_string();
        write(dir, &NODE_CERT.replace("{id}", &id), &cert, false)?;
        write(dir, &NODE_KEY.replace("{id}", &id), &key, true)?;
    }
    let (cert, key) = leaf(vec!["client.coterie".into()], "coterie client".into())?;
    write(dir, CLIENT_CERT, &cert, false)?;
    write(dir, CLIENT_KEY, &key, true)?;

    let security = &mut config.security;
    security.tls_ca = Some(CA.into());
    security.tls_cert = Some(NODE_CERT.into());
    security.tls_key = Some(NODE_KEY.into());
    security.tls_client_cert = Some(CLIENT_CERT.into());
    security.tls_client_key = Some(CLIENT_KEY.into());
    Ok(())
}

/// The host of `HOST:PORT`, brackets off an IPv6 address.
fn host_of(addr: &str) -> String {
    let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
    host.trim_start_matches('[').trim_end_matches(']').to_string()
}

fn is_loopback(host: &str) -> bool {
    host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Writes `text` to `dir/name`; a key readable by its owner only.
fn write(dir: &Path, name: &str, text: &str, secret: bool) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join(name);
    let mode = if secret { 0o600 } else { 0o644 };
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&path)
        .and_then(|mut file| file.write_all(text.as_bytes()));
    written.map_err(|source| PkiError::Write { path, source })
}
