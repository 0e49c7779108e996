//! A node's certificates, when the cluster speaks TLS: the rustls
//! configurations its ports accept with and its dials connect with, built
//! from the files `[security]` names, and built again when those files
//! change (a certificate renewed, a CA rotated), with no restart.
//!
//! - The peer port asks every dialler for a certificate from the CA; the
//!   Hello that follows must come from the node the certificate names
//!   ([`names_node`]), checked in [`transport`](crate::transport).
//! - The client and HTTP ports ask for one when `client_cert_auth` is set.
//! - A dial to a peer checks that its certificate names that peer's id
//!   (`node-ID.coterie`), whatever address it is reached at, and shows
//!   this node's own.
//!
//! The files are looked at every [`RELOAD_EVERY`]; a set that no longer
//! loads (a key that does not match its certificate, a file half written)
//! is logged and the configurations built last stay in use.
//!
//! **Expiry.** The earliest `notAfter` of the node's chain and its CA is
//! exported (`coterie_tls_cert_expiry_timestamp_seconds`, for an alert on
//! `... - time() < 14 * 86400`), and the node warns in its log once a day
//! from [`WARN_AHEAD`] before it, and at start and each reload; past it,
//! each line is an error: the node's peers and clients refuse it.

use crate::config::TlsFiles;
use crate::tls::{self, TlsClient, TlsError};
use coterie_core::NodeId;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::server::{ParsedCertificate, WebPkiClientVerifier};
use rustls::ServerConfig;
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};
use tracing::{error, info, warn};

/// How often the files are looked at for a change.
pub(crate) const RELOAD_EVERY: Duration = Duration::from_secs(2);

/// How long before a certificate's expiry the node starts to warn.
pub(crate) const WARN_AHEAD: Duration = Duration::from_secs(30 * 24 * 3600);

/// How often the warning is repeated.
const WARN_EVERY: Duration = Duration::from_secs(24 * 3600);

/// When a certificate (DER) stops being valid.
fn not_after(cert: &CertificateDer<'_>) -> Option<SystemTime> {
    use x509_cert::der::Decode;
    let cert = x509_cert::Certificate::from_der(cert).ok()?;
    Some(std::time::UNIX_EPOCH + cert.tbs_certificate.validity.not_after.to_unix_duration())
}

/// Whether `cert` names node `id` (`node-ID.coterie`). The chain has been
/// verified by the handshake.
pub(crate) fn names_node(cert: &CertificateDer<'_>, id: NodeId) -> bool {
    let Ok(name) = ServerName::try_from(tls::node_name(id.0)) else { return false };
    ParsedCertificate::try_from(cert)
        .is_ok_and(|parsed| rustls::client::verify_server_name(&parsed, &name).is_ok())
}

/// What the files make.
struct Built {
    /// The peer port's: every dialler shows a certificate.
    peer: Arc<ServerConfig>,
    /// The client and HTTP ports': a certificate if `client_cert_auth`.
    client: Arc<ServerConfig>,
    /// Dials to peers: this node's certificate shown, theirs checked.
    dial: TlsClient,
    /// The earliest expiry of the chain and the CA, and the file it is in.
    expiry: Option<(SystemTime, std::path::PathBuf)>,
}

/// A node's TLS configurations; see the module documentation.
pub(crate) struct Certs {
    files: TlsFiles,
    node: NodeId,
    client_cert_auth: bool,
    built: RwLock<Arc<Built>>,
    /// When each file was last changed, as last built.
    stamps: std::sync::Mutex<[Option<SystemTime>; 3]>,
}

impl Certs {
    /// Node `node`'s configurations from `files`; an error if they do not
    /// load, or if the certificate does not name the node.
    pub(crate) fn load(
        files: TlsFiles,
        node: NodeId,
        client_cert_auth: bool,
    ) -> Result<Certs, TlsError> {
        let built = build(&files, node, client_cert_auth)?;
        let stamps = stamps(&files);
        Ok(Certs {
            files,
            node,
            client_cert_auth,
            built: RwLock::new(Arc::new(built)),
            stamps: std::sync::Mutex::new(stamps),
        })
    }

    fn built(&self) -> Arc<Built> {
        self.built.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// What the peer port accepts with.
    pub(crate) fn peer_acceptor(&self) -> tokio_rustls::TlsAcceptor {
        self.built().peer.clone().into()
    }

    /// What the client and HTTP ports accept with.
    pub(crate) fn client_acceptor(&self) -> tokio_rustls::TlsAcceptor {
        self.built().client.clone().into()
    }

    /// What dials to peers connect with.
    pub(crate) fn dialler(&self) -> TlsClient {
        self.built().dial.clone()
    }

    /// Whether clients must show a certificate.
    pub(crate) fn client_cert_auth(&self) -> bool {
        self.client_cert_auth
    }

    /// The earliest expiry of the node's certificates and its CA.
    pub(crate) fn expiry(&self) -> Option<SystemTime> {
        self.built().expiry.as_ref().map(|(at, _)| *at)
    }

    /// Builds the configurations again if a file changed since they were
    /// built; says so in the log, and keeps the old ones if the new files
    /// do not load. Whether it built them again.
    pub(crate) fn reload_if_changed(&self) -> bool {
        let now = stamps(&self.files);
        let mut seen = self.stamps.lock().unwrap_or_else(|e| e.into_inner());
        if *seen == now {
            return false;
        }
        *seen = now;
        match build(&self.files, self.node, self.client_cert_auth) {
            Ok(built) => {
                *self.built.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(built);
                info!(cert = %self.files.cert.display(), "TLS files changed: new connections use them");
                true
            }
            Err(e) => {
                warn!("TLS files changed but do not load ({e}): connections keep using the ones before");
                false
            }
        }
    }

    /// Warns of the coming (or past) expiry of a certificate, if it is
    /// within [`WARN_AHEAD`] of `now`.
    fn warn_of_expiry(&self, now: SystemTime) {
        let Some((at, file)) = self.built().expiry.clone() else { return };
        let file = file.display();
        match at.duration_since(now) {
            Err(_) => error!(%file, "a TLS certificate has expired: peers and clients refuse this \
                node; renew it (coterie init --tls makes new ones) and the node takes it up"),
            Ok(left) if left <= WARN_AHEAD => {
                let left = humantime::format_duration(Duration::from_secs(left.as_secs()));
                warn!(%file, "a TLS certificate expires in {left}: renew it before then (the node \
                    takes up new files without a restart)");
            }
            Ok(_) => {}
        }
    }

    /// Looks at the files every [`RELOAD_EVERY`] until `shutdown`, and
    /// keeps `metrics`' expiry up to date; warns of an expiry at start,
    /// at each reload and once a day.
    pub(crate) async fn watch(
        self: Arc<Self>,
        metrics: crate::metrics::Metrics,
        mut shutdown: crate::shutdown::Shutdown,
    ) {
        let mut warned = tokio::time::Instant::now();
        metrics.tls_expiry(self.expiry());
        self.warn_of_expiry(SystemTime::now());
        loop {
            tokio::select! {
                _ = tokio::time::sleep(RELOAD_EVERY) => {}
                _ = shutdown.recv() => return,
            }
            if self.reload_if_changed() || warned.elapsed() >= WARN_EVERY {
                metrics.tls_expiry(self.expiry());
                self.warn_of_expiry(SystemTime::now());
                warned = tokio::time::Instant::now();
            }
        }
    }
}

/// When each of `files` last changed (`None`: unreadable now).
fn stamps(files: &TlsFiles) -> [Option<SystemTime>; 3] {
    let changed = |p: &std::path::Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    [changed(&files.ca), changed(&files.cert), changed(&files.key)]
}

fn build(files: &TlsFiles, node: NodeId, client_cert_auth: bool) -> Result<Built, TlsError> {
    let ca = tls::read_certs(&files.ca)?;
    let roots = tls::roots(&files.ca, ca.clone())?;
    let chain = tls::read_certs(&files.cert)?;
    let key = tls::read_key(&files.key)?;
    if !names_node(&chain[0], node) {
        return Err(TlsError::Pem {
            path: files.cert.clone(),
            what: format!(
                "the certificate does not name this node ({}): make one for it (coterie init \
                 --tls does)",
                tls::node_name(node.0)
            ),
        });
    }
    let verifier = |optional: bool| {
        let builder = WebPkiClientVerifier::builder_with_provider(roots.clone(), tls::provider());
        let builder = if optional { builder.allow_unauthenticated() } else { builder };
        builder.build().map_err(|e| TlsError::Verifier(e.to_string()))
    };
    let server = |verifier| -> Result<Arc<ServerConfig>, TlsError> {
        let config = ServerConfig::builder_with_provider(tls::provider())
            .with_safe_default_protocol_versions()?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain.clone(), key.clone_key())?;
        Ok(Arc::new(config))
    };
    let expiry = chain
        .iter()
        .map(|c| (c, &files.cert))
        .chain(ca.iter().map(|c| (c, &files.ca)))
        .filter_map(|(cert, file)| Some((not_after(cert)?, file.clone())))
        .min_by_key(|(at, _)| *at);
    Ok(Built {
        peer: server(verifier(false)?)?,
        client: server(verifier(!client_cert_auth)?)?,
        dial: TlsClient::new(roots.clone(), Some((chain.clone(), key.clone_key())))?,
        expiry,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ClusterSection, Config};

    /// Certificates for a 2-node cluster in a directory of their own.
    fn made(name: &str) -> (std::path::PathBuf, TlsFiles) {
        let dir = std::env::temp_dir().join(format!("coterie-certs-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mutex = coterie_core::registry::mutex("centralized").unwrap();
        let election = coterie_core::registry::election("bully").unwrap();
        let mut cfg =
            Config::loopback(ClusterSection::new("t", mutex, election), &[1, 2, 3, 4], false);
        crate::pki::make(&mut cfg, &dir, Duration::from_secs(3600)).unwrap();
        let files = TlsFiles {
            ca: dir.join("ca.pem"),
            cert: dir.join("node1.pem"),
            key: dir.join("node1.key"),
        };
        (dir, files)
    }

    #[test]
    fn changed_files_are_taken_up_and_broken_ones_leave_the_last_good_set() {
        let (dir, files) = made("reload");
        let certs = Certs::load(files.clone(), NodeId(1), false).unwrap();
        let first = certs.built();
        certs.reload_if_changed();
        assert!(Arc::ptr_eq(&first, &certs.built()), "built again with nothing changed");

        // A new CA and certificates, written over the old ones.
        let (other, _) = made("reload-new");
        for file in ["ca.pem", "node1.pem", "node1.key"] {
            std::fs::copy(other.join(file), dir.join(file)).unwrap();
        }
        certs.reload_if_changed();
        let second = certs.built();
        assert!(!Arc::ptr_eq(&first, &second), "the new files were not taken up");

        // A key that does not match the certificate: the set before stays.
        std::fs::copy(other.join("node2.key"), dir.join("node1.key")).unwrap();
        certs.reload_if_changed();
        assert!(Arc::ptr_eq(&second, &certs.built()), "a broken set replaced a good one");
        let _ = (std::fs::remove_dir_all(dir), std::fs::remove_dir_all(other));
    }

    #[test]
    fn the_expiry_is_the_earliest_of_the_chain_and_the_ca() {
        let (dir, files) = made("expiry");
        let certs = Certs::load(files, NodeId(1), false).unwrap();
        let at = certs.expiry().expect("an expiry");
        let left = at.duration_since(SystemTime::now()).expect("in the future");
        // `made` makes them for an hour; X.509 keeps whole seconds.
        assert!(left <= Duration::from_secs(3600) && left > Duration::from_secs(3500), "{left:?}");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_certificate_naming_another_node_is_refused_at_load() {
        let (dir, files) = made("wrong-node");
        let e = Certs::load(files, NodeId(2), false).err().expect("loaded");
        assert!(e.to_string().contains("does not name this node (node-2.coterie)"), "{e}");
        let _ = std::fs::remove_dir_all(dir);
    }
}
