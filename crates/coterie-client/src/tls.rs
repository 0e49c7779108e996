//! TLS on coterie's ports, with rustls (the ring provider): the PEM files
//! a cluster's configuration names, the names certificates are checked
//! for, and the client's side of a connection.
//!
//! Two kinds of name are checked:
//! - **A node's identity** on the peer port: its certificate names
//!   `node-ID.coterie` (a DNS subject alternative name), which is what a
//!   dialling node asks for and what an accepting node checks the Hello
//!   against. The name does not depend on where the node runs, so it
//!   survives a move to another address.
//! - **A node's address** on the client and HTTP ports: a client checks
//!   that the certificate names the host it dialled (an IP address or a
//!   DNS name), as any TLS client (curl, a browser, Python's `ssl`) does.
//!   `coterie init --tls` puts every host the configuration uses in each
//!   node's certificate.
//!
//! With TLS, the challenge–response of [`auth`](crate::auth) is not run:
//! TLS authenticates the node, and the client too when the node asks for
//! a certificate (`client_cert_auth`).

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::net::TcpStream;

/// The DNS name a node's certificate carries for its id.
pub fn node_name(id: u32) -> String {
    format!("node-{id}.coterie")
}

/// What went wrong reading a certificate, a key or a CA, or building a TLS
/// configuration from them.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file holds no PEM block of the kind wanted, or a broken one.
    #[error("{}: {what}", path.display())]
    Pem {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        what: String,
    },
    /// rustls refused the certificates or key (a key that does not match
    /// its certificate, say).
    #[error("{0}")]
    Rustls(#[from] rustls::Error),
    /// No certificate-verifier could be built from the CA.
    #[error("the CA: {0}")]
    Verifier(String),
}

/// The crypto provider every configuration is built with.
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn pem_error(path: &Path, e: rustls::pki_types::pem::Error) -> TlsError {
    match e {
        rustls::pki_types::pem::Error::Io(source) => {
            TlsError::Read { path: path.to_path_buf(), source }
        }
        other => TlsError::Pem { path: path.to_path_buf(), what: other.to_string() },
    }
}

/// The certificates of a PEM file, in order (a certificate, then the CAs
/// between it and the root, if any).
pub fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| pem_error(path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_error(path, e))?;
    if certs.is_empty() {
        return Err(TlsError::Pem {
            path: path.to_path_buf(),
            what: "no certificate in it".into(),
        });
    }
    Ok(certs)
}

/// The private key of a PEM file (PKCS #8, PKCS #1 or SEC1).
pub fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => {
            TlsError::Pem { path: path.to_path_buf(), what: "no private key in it".into() }
        }
        e => pem_error(path, e),
    })
}

/// The CA certificates of a PEM file, as roots to trust.
pub fn read_roots(path: &Path) -> Result<Arc<RootCertStore>, TlsError> {
    roots(path, read_certs(path)?)
}

/// `certs`, read from `path`, as roots to trust.
pub fn roots(
    path: &Path,
    certs: Vec<CertificateDer<'static>>,
) -> Result<Arc<RootCertStore>, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in certs {
        roots.add(cert).map_err(|e| TlsError::Pem {
            path: path.to_path_buf(),
            what: format!("not a CA certificate: {e}"),
        })?;
    }
    Ok(Arc::new(roots))
}

/// A client's TLS settings: the CA it trusts, and the certificate it
/// shows when the node asks for one.
#[derive(Clone)]
pub struct TlsClient {
    config: Arc<ClientConfig>,
}

impl std::fmt::Debug for TlsClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TlsClient(..)")
    }
}

impl TlsClient {
    /// Trusts the CAs of the PEM file `ca`, and shows the certificate
    /// and key of `identity`, if given.
    pub fn from_files(ca: &Path, identity: Option<(&Path, &Path)>) -> Result<TlsClient, TlsError> {
        let identity = match identity {
            Some((cert, key)) => Some((read_certs(cert)?, read_key(key)?)),
            None => None,
        };
        TlsClient::new(read_roots(ca)?, identity)
    }

    /// Trusts `roots`, and shows `identity` (a chain and its key) if
    /// given.
    pub fn new(
        roots: Arc<RootCertStore>,
        identity: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
    ) -> Result<TlsClient, TlsError> {
        let builder = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots);
        let config = match identity {
            Some((chain, key)) => builder.with_client_auth_cert(chain, key)?,
            None => builder.with_no_client_auth(),
        };
        Ok(TlsClient { config: Arc::new(config) })
    }

    /// TLS over `stream`, checking that the server's certificate names
    /// `name`.
    pub async fn connect(
        &self,
        name: ServerName<'static>,
        stream: TcpStream,
    ) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
        tokio_rustls::TlsConnector::from(self.config.clone()).connect(name, stream).await
    }
}

/// The name a client checks a node's certificate for when it dials
/// `addr` (`HOST:PORT`): the host, an IP address or a DNS name.
pub fn server_name(addr: &str) -> Result<ServerName<'static>, String> {
    let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_string()).map_err(|e| format!("{host}: not a host name: {e}"))
}

/// The TLS error an I/O error carries, if it is one: what tokio-rustls
/// returns for a handshake that failed, or an alert read later (under
/// TLS 1.3 a refused client certificate is told after the handshake).
pub fn tls_error(e: &std::io::Error) -> Option<&rustls::Error> {
    e.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>())
}

/// What a TLS handshake's failure means, in a line for whoever dialled:
/// rustls's error with what to do about the common ones, and a close in
/// the middle of the handshake read as a port that does not speak TLS.
pub fn explain(e: &std::io::Error) -> String {
    if tls_error(e).is_none() && e.kind() == std::io::ErrorKind::UnexpectedEof {
        return format!(
            "{e}: the node closed the connection during the TLS handshake (does the port \
             speak TLS? is the node configured with [security] tls_cert?)"
        );
    }
    describe(e)
}

/// An I/O error in a line: a TLS one (an alert the node sent, a
/// certificate refused) with what to do about it, any other as it is.
pub fn describe(e: &std::io::Error) -> String {
    let Some(tls) = tls_error(e) else { return e.to_string() };
    use rustls::{AlertDescription as Alert, CertificateError as Cert, Error};
    match tls {
        Error::InvalidCertificate(Cert::UnknownIssuer | Cert::BadSignature) => {
            format!("{tls}: the node's certificate is not from the CA this client trusts")
        }
        Error::InvalidCertificate(Cert::Expired | Cert::ExpiredContext { .. }) => {
            format!("{tls}: the node's certificate has expired")
        }
        Error::InvalidCertificate(Cert::NotValidForName | Cert::NotValidForNameContext { .. }) => {
            format!("{tls}: the node's certificate does not name the address dialled")
        }
        Error::InvalidMessage(_) | Error::InappropriateMessage { .. } => format!(
            "{tls}: the port does not speak TLS (is the node configured without [security] \
             tls_cert?)"
        ),
        // A CA of the same name but another key fails the signature
        // check, which TLS reports as a decrypt error.
        Error::AlertReceived(Alert::UnknownCA | Alert::BadCertificate | Alert::DecryptError) => {
            format!("{tls}: the node does not trust this client's certificate (another CA's?)")
        }
        Error::AlertReceived(Alert::CertificateRequired) => format!(
            "{tls}: the node asks for a client certificate ([security] tls_client_cert, or \
             COTERIE_TLS_CERT and COTERIE_TLS_KEY)"
        ),
        Error::AlertReceived(Alert::CertificateExpired) => {
            format!("{tls}: the node finds this client's certificate expired")
        }
        _ => tls.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_checks_the_host_it_dialled() {
        assert_eq!(
            server_name("127.0.0.1:7101").unwrap(),
            ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into())
        );
        assert_eq!(server_name("[::1]:7101").unwrap(), ServerName::try_from("::1").unwrap());
        assert_eq!(server_name("n1:7101").unwrap(), ServerName::try_from("n1").unwrap());
    }
}
