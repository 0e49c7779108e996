//! Authenticated connections: a mutual challenge–response with a shared
//! secret, before anything else on a peer or client connection.
//!
//! The dialler opens with [`AuthFrame::Hello`] (its cluster, role, id and
//! a fresh nonce); the acceptor answers [`AuthFrame::Challenge`] with its
//! own nonce and its proof; the dialler checks that proof and sends its
//! own ([`AuthFrame::Proof`]); the acceptor checks it. A proof is
//! HMAC-SHA256, keyed with the secret, over a label, the cluster's name,
//! the prover's role and id, and both nonces with the prover's first. So
//! the secret never travels; each side shows it knows it for this
//! connection only (a recorded handshake replayed later meets a fresh
//! nonce); and neither side's proof can be reflected as the other's (the
//! roles differ). Comparison is constant-time (`Mac::verify_slice`).
//!
//! What it does not do: encrypt or sign what follows. Against an attacker
//! who can rewrite traffic on the path, run the cluster on a private
//! network or through a tunnel; this keeps out whoever merely reaches a
//! port, which is what the open protocol let in.

use crate::codec::{read_frame, write_frame, FrameError};
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};

/// The length of a nonce and of a proof.
const LEN: usize = 32;

/// How long a handshake may take.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// The cluster's shared secret.
#[derive(Clone)]
pub struct Secret(Vec<u8>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl Secret {
    /// A secret from the bytes of a secret file, trailing whitespace (a
    /// final newline) left out. `None` if nothing is left.
    pub fn from_file_bytes(bytes: &[u8]) -> Option<Secret> {
        let end = bytes.iter().rposition(|b| !b.is_ascii_whitespace())? + 1;
        Some(Secret(bytes[..end].to_vec()))
    }

    /// A fresh random secret, as hex, for a secret file.
    pub fn generate_hex() -> std::io::Result<String> {
        let mut bytes = [0u8; LEN];
        getrandom::fill(&mut bytes).map_err(std::io::Error::other)?;
        Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
    }

    fn mac(&self, claim: &Claim) -> Hmac<Sha256> {
        let mut mac =
            Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes keys of any length");
        mac.update(b"coterie auth v1\0");
        mac.update(&(claim.cluster.len() as u64).to_be_bytes());
        mac.update(claim.cluster.as_bytes());
        mac.update(&[claim.role as u8]);
        mac.update(&claim.id.to_be_bytes());
        mac.update(claim.provers);
        mac.update(claim.others);
        mac
    }

    /// The proof of `claim`.
    fn prove(&self, claim: &Claim) -> [u8; LEN] {
        self.mac(claim).finalize().into_bytes().into()
    }

    /// Whether `proof` proves `claim`, in constant time.
    fn verify(&self, claim: &Claim, proof: &[u8; LEN]) -> bool {
        self.mac(claim).verify_slice(proof).is_ok()
    }
}

/// What a proof is about: who proves it (in which cluster, as what) and
/// for which connection (the prover's nonce, then the other side's).
struct Claim<'a> {
    cluster: &'a str,
    role: Role,
    id: u32,
    provers: &'a [u8; LEN],
    others: &'a [u8; LEN],
}

/// Who proves what.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[repr(u8)]
pub enum Role {
    /// A node answering a connection.
    Node = 1,
    /// A node dialling a peer.
    Peer = 2,
    /// A client (`coterie lock`, `status`, a library user).
    Client = 3,
}

/// The frames of the handshake.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AuthFrame {
    /// Dialler: who it is, and its nonce.
    Hello {
        /// The cluster it belongs to; a client may leave it empty to take
        /// whichever cluster the node belongs to.
        cluster: String,
        /// Peer or client.
        role: Role,
        /// Its node id (0 for a client).
        id: u32,
        /// Fresh for this connection.
        nonce: [u8; LEN],
    },
    /// Acceptor: its nonce, and its proof.
    Challenge {
        /// The acceptor's cluster.
        cluster: String,
        /// The acceptor's node id.
        id: u32,
        /// Fresh for this connection.
        nonce: [u8; LEN],
        /// HMAC over (node, its id, its nonce, the dialler's nonce).
        proof: [u8; LEN],
    },
    /// Dialler: its proof.
    Proof {
        /// HMAC over (its role, its id, its nonce, the acceptor's nonce).
        proof: [u8; LEN],
    },
    /// Either side: no, and why.
    Refused(String),
}

impl AuthFrame {
    fn name(&self) -> &'static str {
        match self {
            AuthFrame::Hello { .. } => "a hello",
            AuthFrame::Challenge { .. } => "a challenge",
            AuthFrame::Proof { .. } => "a proof",
            AuthFrame::Refused(_) => "a refusal",
        }
    }
}

/// Why a handshake failed.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// The other side does not know the secret (or another cluster's).
    #[error("{0}")]
    Refused(String),
    /// The connection failed or carried something else.
    #[error("authentication handshake failed: {0}")]
    Frame(#[from] FrameError),
    /// It took too long.
    #[error("authentication handshake timed out")]
    Timeout,
    /// The connection closed during the handshake.
    #[error("the connection closed during the authentication handshake")]
    Closed,
}

fn nonce() -> Result<[u8; LEN], AuthError> {
    let mut n = [0u8; LEN];
    getrandom::fill(&mut n)
        .map_err(|e| AuthError::Frame(FrameError::Io(std::io::Error::other(e))))?;
    Ok(n)
}

async fn next<S: AsyncRead + Unpin>(stream: &mut S) -> Result<AuthFrame, AuthError> {
    let mut buf = Vec::new();
    read_frame(stream, &mut buf).await?.ok_or(AuthError::Closed)
}

/// The dialler's side: proves itself as `role` `id` of `cluster` (empty:
/// a client taking the node's) and checks that the node it reached knows
/// the secret too. Returns the node's id.
pub async fn dial<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    secret: &Secret,
    cluster: &str,
    role: Role,
    id: u32,
) -> Result<u32, AuthError> {
    let run = async {
        let mine = nonce()?;
        let hello = AuthFrame::Hello { cluster: cluster.to_string(), role, id, nonce: mine };
        write_frame(stream, &hello).await.map_err(FrameError::Io)?;
        let (theirs_cluster, node, theirs, proof) = match next(stream).await? {
            AuthFrame::Challenge { cluster, id, nonce, proof } => (cluster, id, nonce, proof),
            AuthFrame::Refused(why) => return Err(AuthError::Refused(why)),
            other => return Err(AuthError::Refused(format!("unexpected {}", other.name()))),
        };
        let cluster = if cluster.is_empty() { theirs_cluster.as_str() } else { cluster };
        let node_claim =
            Claim { cluster, role: Role::Node, id: node, provers: &theirs, others: &mine };
        if !secret.verify(&node_claim, &proof) {
            let why = "the node's proof does not match our secret: the secrets differ".to_string();
            let _ = write_frame(stream, &AuthFrame::Refused(why.clone())).await;
            return Err(AuthError::Refused(why));
        }
        let proof = secret.prove(&Claim { cluster, role, id, provers: &mine, others: &theirs });
        write_frame(stream, &AuthFrame::Proof { proof }).await.map_err(FrameError::Io)?;
        Ok(node)
    };
    tokio::time::timeout(HANDSHAKE_TIMEOUT, run).await.map_err(|_| AuthError::Timeout)?
}

/// Who the acceptor found at the other end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dialler {
    /// Peer or client.
    pub role: Role,
    /// Its node id (0 for a client).
    pub id: u32,
}

/// The acceptor's side, for node `id` of `cluster`: checks that the
/// dialler knows the secret and proves that this node does.
pub async fn accept<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    secret: &Secret,
    cluster: &str,
    id: u32,
) -> Result<Dialler, AuthError> {
    let run = async {
        let (dialler, theirs) = match next(stream).await? {
            AuthFrame::Hello { cluster: c, role, id, nonce } => {
                let any_cluster = c.is_empty() && role == Role::Client;
                if (c != cluster && !any_cluster) || role == Role::Node {
                    let why = format!("this node belongs to cluster {cluster:?}, not {c:?}");
                    let _ = write_frame(stream, &AuthFrame::Refused(why.clone())).await;
                    return Err(AuthError::Refused(why));
                }
                (Dialler { role, id }, nonce)
            }
            other => {
                let why = format!("expected an authentication hello, got {}", other.name());
                return Err(AuthError::Refused(why));
            }
        };
        let mine = nonce()?;
        let proof =
            secret.prove(&Claim { cluster, role: Role::Node, id, provers: &mine, others: &theirs });
        let challenge =
            AuthFrame::Challenge { cluster: cluster.to_string(), id, nonce: mine, proof };
        write_frame(stream, &challenge).await.map_err(FrameError::Io)?;
        let (role, id) = (dialler.role, dialler.id);
        let their_claim = Claim { cluster, role, id, provers: &theirs, others: &mine };
        match next(stream).await? {
            AuthFrame::Proof { proof } if secret.verify(&their_claim, &proof) => Ok(dialler),
            AuthFrame::Proof { .. } => {
                let why = "wrong secret".to_string();
                let _ = write_frame(stream, &AuthFrame::Refused(why.clone())).await;
                Err(AuthError::Refused(why))
            }
            AuthFrame::Refused(why) => Err(AuthError::Refused(why)),
            other => Err(AuthError::Refused(format!("unexpected {}", other.name()))),
        }
    };
    tokio::time::timeout(HANDSHAKE_TIMEOUT, run).await.map_err(|_| AuthError::Timeout)?
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(text: &str) -> Secret {
        Secret::from_file_bytes(text.as_bytes()).unwrap()
    }

    async fn handshake(
        dialler: Secret,
        acceptor: Secret,
        cluster: &str,
    ) -> (Result<u32, AuthError>, Result<Dialler, AuthError>) {
        let (mut a, mut b) = tokio::io::duplex(4096);
        tokio::join!(
            dial(&mut a, &dialler, cluster, Role::Peer, 2),
            accept(&mut b, &acceptor, "test", 1)
        )
    }

    #[tokio::test]
    async fn the_same_secret_passes_both_ways_and_any_other_fails_both_ways() {
        let (d, a) = handshake(secret("s3cret\n"), secret("s3cret"), "test").await;
        assert_eq!(d.unwrap(), 1);
        assert_eq!(a.unwrap(), Dialler { role: Role::Peer, id: 2 });
        let (d, a) = handshake(secret("wrong"), secret("s3cret"), "test").await;
        assert!(matches!(d, Err(AuthError::Refused(_))), "{d:?}");
        assert!(matches!(a, Err(AuthError::Refused(_))), "{a:?}");
        let (d, a) = handshake(secret("s3cret"), secret("s3cret"), "other").await;
        assert!(d.is_err() && a.is_err());
        assert!(Secret::from_file_bytes(b" \n").is_none());
    }

    #[tokio::test]
    async fn a_recorded_proof_does_not_pass_again() {
        let s = secret("s3cret");
        // Record a dialler's proof for one acceptor nonce...
        let mine = [1u8; LEN];
        let old_nonce = [2u8; LEN];
        let claim = Claim {
            cluster: "test",
            role: Role::Client,
            id: 0,
            provers: &mine,
            others: &old_nonce,
        };
        let recorded = s.prove(&claim);
        // ...and replay it against a fresh handshake.
        let (mut a, mut b) = tokio::io::duplex(4096);
        let replay = async {
            let hello =
                AuthFrame::Hello { cluster: "test".into(), role: Role::Client, id: 0, nonce: mine };
            write_frame(&mut a, &hello).await.unwrap();
            let _challenge = next(&mut a).await.unwrap();
            write_frame(&mut a, &AuthFrame::Proof { proof: recorded }).await.unwrap();
            next(&mut a).await
        };
        let (answer, accepted) = tokio::join!(replay, accept(&mut b, &s, "test", 1));
        assert!(matches!(accepted, Err(AuthError::Refused(_))));
        assert!(matches!(answer, Ok(AuthFrame::Refused(_))));
    }

    #[tokio::test]
    async fn a_client_may_take_the_node_s_cluster() {
        let (mut a, mut b) = tokio::io::duplex(4096);
        let s = secret("s3cret");
        let (d, acc) =
            tokio::join!(dial(&mut a, &s, "", Role::Client, 0), accept(&mut b, &s, "test", 4));
        assert_eq!(d.unwrap(), 4);
        assert_eq!(acc.unwrap(), Dialler { role: Role::Client, id: 0 });
    }
}
