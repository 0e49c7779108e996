//! The wire format, in one place: bincode-encoded serde types in frames of a
//! 4-byte big-endian length followed by the body, never longer than
//! [`MAX_FRAME`].
//!
//! Two nodes share one connection, both ways; the node with the lower id
//! dials it. It opens with a [`Hello`] that names the cluster, the sender
//! and its incarnation, the protocol version and both algorithms; the
//! acceptor answers [`PeerFrame::Welcome`] (its own incarnation, and how
//! much of the dialler's session it has delivered) or [`PeerFrame::Refused`]
//! with the reason. Engine messages then travel as [`PeerFrame::Message`]
//! in both directions, numbered and acknowledged by the
//! [`session`](crate::session) layer. A node that comes up asks each node
//! below it to dial it with a Hello marked [`Hello::dial_back`], and
//! nothing more is said on that connection.

use crate::membership::{Lease, ViewMsg};
use crate::name::Name;
use crate::types::{Epoch, NodeId};
use serde::{de::DeserializeOwned, Deserialize, Serialize};

/// Bumped whenever a frame's encoding changes.
pub const PROTOCOL_VERSION: u32 = 15;

/// The largest frame body accepted, in bytes. Every coterie message is far
/// smaller; a larger length prefix is a broken or hostile peer.
pub const MAX_FRAME: usize = 1 << 20;

/// The length prefix's size.
pub const HEADER_LEN: usize = 4;

/// Why bytes could not be turned into a frame or a message.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The length prefix announces more than [`MAX_FRAME`] bytes.
    #[error("frame of {0} bytes exceeds the {MAX_FRAME}-byte limit")]
    Oversized(usize),
    /// The body is not a valid encoding of the expected type.
    #[error("malformed frame: {0}")]
    Malformed(String),
}

fn config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<MAX_FRAME>()
}

/// Encodes a value. Only the project's own types are encoded, and all of
/// them are plain data, so encoding cannot fail.
pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    bincode::serde::encode_to_vec(value, config()).expect("coterie's types always encode")
}

/// Decodes a value that must take up all of `bytes`.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, WireError> {
    let (value, used) = bincode::serde::decode_from_slice(bytes, config())
        .map_err(|e| WireError::Malformed(e.to_string()))?;
    whole(bytes, value, used)
}

/// The most bytes a record read back from stable storage may take: far
/// above a frame's limit, since a node's record grows with the locks it
/// remembers (a million locks' records take tens of megabytes).
pub const MAX_STORED: usize = u32::MAX as usize;

/// Decodes a value read back from stable storage, which must take up all
/// of `bytes`: as [`decode`], with a limit that grows with `bytes` (the
/// smallest of 64 KiB, 256 KiB, ... [`MAX_STORED`] that is at least 16
/// times their length). A length that a damaged record claims can then
/// allocate at most 64 times what was read, never gigabytes from a few
/// bytes.
pub fn decode_stored<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, WireError> {
    fn with<T: DeserializeOwned, const LIMIT: usize>(bytes: &[u8]) -> Result<T, WireError> {
        let config = bincode::config::standard().with_limit::<LIMIT>();
        let (value, used) = bincode::serde::decode_from_slice(bytes, config)
            .map_err(|e| WireError::Malformed(e.to_string()))?;
        whole(bytes, value, used)
    }
    let wanted = bytes.len().saturating_mul(16);
    macro_rules! ladder {
        ($($bits:literal)*) => {
            $(if wanted <= 1usize << $bits {
                return with::<T, { 1usize << $bits }>(bytes);
            })*
        };
    }
    ladder!(16 18 20 22 24 26 28 30);
    with::<T, MAX_STORED>(bytes)
}

fn whole<T>(bytes: &[u8], value: T, used: usize) -> Result<T, WireError> {
    if used != bytes.len() {
        return Err(WireError::Malformed(format!("{} trailing bytes", bytes.len() - used)));
    }
    Ok(value)
}

/// Encodes `value` as a whole frame, length prefix included, appending it
/// to `buf`.
pub fn write_frame<T: Serialize>(value: &T, buf: &mut Vec<u8>) {
    let start = buf.len();
    buf.extend_from_slice(&[0; HEADER_LEN]);
    bincode::serde::encode_into_std_write(value, buf, config())
        .expect("coterie's types always encode");
    let len = (buf.len() - start - HEADER_LEN) as u32;
    buf[start..start + HEADER_LEN].copy_from_slice(&len.to_be_bytes());
}

/// Encodes a [`PeerFrame::Message`] as a whole frame, appending it to
/// `buf`, without copying `body` into a frame value first (the session
/// keeps bodies, and a connection writes each one or more times).
pub fn write_message(seq: u64, ack: u64, body: &[u8], buf: &mut Vec<u8>) {
    /// [`PeerFrame`]'s encoding, borrowed: the same variants in the same
    /// order, so the same bytes (a slice encodes as a `Vec` does).
    #[derive(Serialize)]
    #[allow(dead_code)] // only `Message` is built; the others hold the indices
    enum Borrowed<'a> {
        Hello,
        Welcome,
        Refused,
        Message { seq: u64, ack: u64, body: &'a [u8] },
    }
    write_frame(&Borrowed::Message { seq, ack, body }, buf);
}

/// Reads a length prefix, refusing one over [`MAX_FRAME`].
pub fn frame_len(header: [u8; HEADER_LEN]) -> Result<usize, WireError> {
    let len = u32::from_be_bytes(header) as usize;
    if len > MAX_FRAME {
        Err(WireError::Oversized(len))
    } else {
        Ok(len)
    }
}

/// The first frame on a peer connection.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// The cluster's name; nodes of different clusters never talk.
    pub cluster: String,
    /// The dialling node.
    pub node: NodeId,
    /// [`PROTOCOL_VERSION`] of the dialler.
    pub protocol: u32,
    /// The mutual-exclusion algorithm the dialler runs.
    pub mutex: String,
    /// The election algorithm the dialler runs.
    pub election: String,
    /// Its failure detector ([`Detector`](crate::algorithm::Detector),
    /// as displayed): nodes that watch each other differently would wait
    /// for probes and announcements that never come.
    pub detector: String,
    /// The dialler's incarnation (boot id): its session with the acceptor
    /// is bound to it.
    pub boot: u64,
    /// The acceptor's incarnation the dialler's session is bound to, if it
    /// is bound yet. The dialler writes its frames right behind the Hello;
    /// an acceptor that is another incarnation answers and closes, so no
    /// frame meant for a previous process reaches the new one.
    pub expects: Option<u64>,
    /// How much of the acceptor's session (that incarnation's) the dialler
    /// has delivered: the acceptor writes the rest after its Welcome.
    pub delivered: u64,
    /// The sender, above the acceptor, is up and asks the acceptor to dial
    /// it now (the pair's connection is the lower node's to make). Nothing
    /// follows on this connection.
    pub dial_back: bool,
    /// Who decides that a peer is down
    /// ([`Partitions`](crate::membership::Partitions), as named): a node
    /// that trusts its detector would act where the other waits for a
    /// view.
    pub partitions: String,
}

impl Hello {
    /// Checks a dialler's hello against this node's own (`self`) and the
    /// cluster's members. The error says what differs.
    pub fn check(&self, theirs: &Hello, members: &[NodeId]) -> Result<(), String> {
        if theirs.protocol != self.protocol {
            return Err(format!(
                "protocol version {} (this node speaks {})",
                theirs.protocol, self.protocol
            ));
        }
        if theirs.cluster != self.cluster {
            return Err(format!(
                "cluster {:?} (this node is in {:?})",
                theirs.cluster, self.cluster
            ));
        }
        if theirs.node == self.node || !members.contains(&theirs.node) {
            return Err(format!("node id {} is not a peer of {}", theirs.node.0, self.node.0));
        }
        if theirs.mutex != self.mutex || theirs.election != self.election {
            return Err(format!(
                "algorithms {}/{} (this node runs {}/{})",
                theirs.mutex, theirs.election, self.mutex, self.election
            ));
        }
        if theirs.partitions != self.partitions {
            return Err(format!(
                "partitions = {:?} (this node runs {:?})",
                theirs.partitions, self.partitions
            ));
        }
        if theirs.detector != self.detector {
            return Err(format!(
                "failure detector {} (this node runs {}; [timing] detector and watch)",
                theirs.detector, self.detector
            ));
        }
        Ok(())
    }
}

/// What heartbeats carry besides the proof of life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Heartbeat {
    /// The epoch of the coordinator the sender follows.
    pub epoch: Epoch,
    /// The coordinator the sender follows.
    pub coordinator: Option<NodeId>,
    /// The sender's mutex watermark (its Lamport clock, usually).
    pub watermark: u64,
    /// The sender's boot id: a new value means it restarted.
    pub incarnation: u64,
    /// The receiver's boot id as the sender knows it, if the sender counts
    /// the receiver as up: a joining node waits for its own to come back
    /// from every live peer, so that none of them leaves it out of a
    /// request.
    pub you: Option<u64>,
    /// The sender asks for a heartbeat back at once: it watches the
    /// receiver ([`Detector::Ring`](crate::algorithm::Detector::Ring)), or
    /// it is about to hand a grant on under a lock delay and must hear from
    /// every peer first ([`Engine::probe_peers`](crate::Engine::probe_peers)).
    pub probe: bool,
    /// The sender had suspected the receiver (a timeout, not a restart)
    /// and counts it up again: it forgot what the receiver had asked of
    /// it, and the receiver's algorithms introduce themselves to it again
    /// as to a newcomer. Set only on the heartbeat sent at once on
    /// re-admission.
    pub readmitted: bool,
    /// The membership layer's view and lease: what the sender installed,
    /// its time, and the echo of the receiver's.
    pub lease: Lease,
}

/// One message between two nodes' engines.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Envelope {
    /// Proof of life, with the sender's view of the cluster.
    Heartbeat(Heartbeat),
    /// An election-layer message, encoded by its algorithm.
    Election(Vec<u8>),
    /// A mutex-layer message for lock `name`, encoded by its algorithm.
    Mutex {
        /// The lock whose instance it is for.
        name: Name,
        /// How many may hold the lock at once, as the sender's instance
        /// has it: a node that meets the lock first through this message
        /// makes its instance so, and one whose instance says otherwise
        /// refuses the message.
        permits: u32,
        /// The message.
        bytes: Vec<u8>,
    },
    /// A message between the two nodes' application tasks (who holds and
    /// who waits, leaders by name), carried in order with the rest but
    /// opaque to the engine: it only proves the sender alive.
    Application(Vec<u8>),
    /// The sender, which watched this peer, suspects it
    /// ([`Detector::Ring`](crate::algorithm::Detector::Ring)): the
    /// receiver checks it for itself.
    Suspect(NodeId),
    /// A membership-layer message: views proposed, accepted, installed.
    Membership(ViewMsg),
}

/// A frame on a peer connection.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PeerFrame {
    /// The dialler introduces itself.
    Hello(Hello),
    /// The acceptor agrees to talk.
    Welcome {
        /// The acceptor's incarnation.
        boot: u64,
        /// The highest number of the dialler's session the acceptor has
        /// delivered: the dialler sends again what follows.
        delivered: u64,
    },
    /// The acceptor refuses, saying why, and closes.
    Refused(String),
    /// An engine message, numbered by the sender's session.
    Message {
        /// Its number in the sender's session.
        seq: u64,
        /// The highest number of the receiver's session the sender has
        /// delivered (a cumulative acknowledgement).
        ack: u64,
        /// The [`Envelope`], encoded.
        body: Vec<u8>,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_length_beyond_what_was_read_is_refused_before_it_is_allocated() {
        // The fuzzer's `state_file` find: a record of eight bytes whose
        // map entry claims a name of about 4 GB.
        let bytes = [0x00, 0x30, 0x01, 0xfc, 0xca, 0xfc, 0x00, 0xf7];
        let err = decode_stored::<crate::Restored>(&bytes).unwrap_err();
        assert!(err.to_string().contains("Limit"), "{err}");
        // Records of a few megabytes, as a node with many locks keeps,
        // still read back whole.
        let big: Vec<Vec<u8>> = (0..40_000).map(|i| vec![i as u8; 100]).collect();
        let encoded = encode(&big);
        assert!(encoded.len() > 4_000_000);
        assert_eq!(decode_stored::<Vec<Vec<u8>>>(&encoded).unwrap(), big);
    }

    fn hello() -> Hello {
        Hello {
            cluster: "local".into(),
            node: NodeId(1),
            protocol: PROTOCOL_VERSION,
            mutex: "centralized".into(),
            election: "bully".into(),
            detector: "all".into(),
            boot: 7,
            expects: None,
            delivered: 0,
            dial_back: false,
            partitions: "majority".into(),
        }
    }

    #[test]
    fn frame_round_trips() {
        let body =
            encode(&Envelope::Mutex { name: Name::default(), permits: 1, bytes: vec![1, 2, 3] });
        let frame = PeerFrame::Message { seq: 9, ack: 4, body };
        let mut buf = Vec::new();
        write_frame(&frame, &mut buf);
        let len = frame_len(buf[..4].try_into().unwrap()).unwrap();
        assert_eq!(len, buf.len() - 4);
        assert_eq!(decode::<PeerFrame>(&buf[4..]).unwrap(), frame);
    }

    #[test]
    fn a_borrowed_message_encodes_as_the_frame_does() {
        let body = encode(&Envelope::Election(vec![4, 5]));
        let mut borrowed = Vec::new();
        write_message(300, 7, &body, &mut borrowed);
        let mut owned = Vec::new();
        write_frame(&PeerFrame::Message { seq: 300, ack: 7, body }, &mut owned);
        assert_eq!(borrowed, owned);
    }

    #[test]
    fn oversized_length_prefix_is_refused() {
        let err = frame_len((MAX_FRAME as u32 + 1).to_be_bytes()).unwrap_err();
        assert!(matches!(err, WireError::Oversized(_)));
    }

    #[test]
    fn random_bytes_do_not_decode_and_do_not_panic() {
        let mut x: u32 = 12345;
        for len in 0..200 {
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    x as u8
                })
                .collect();
            let _ = decode::<PeerFrame>(&bytes);
        }
        assert!(decode::<PeerFrame>(&[0xff, 0xff, 0xff, 0xff, 0xff]).is_err());
    }

    #[test]
    fn trailing_bytes_are_malformed() {
        let mut bytes = encode(&PeerFrame::Welcome { boot: 1, delivered: 0 });
        bytes.push(0);
        assert!(decode::<PeerFrame>(&bytes).is_err());
    }

    #[test]
    fn hello_check_names_what_differs() {
        let me = hello();
        let members = [NodeId(1), NodeId(2)];
        let ok = Hello { node: NodeId(2), ..hello() };
        assert!(me.check(&ok, &members).is_ok());
        let other = Hello { cluster: "prod".into(), ..ok.clone() };
        assert!(me.check(&other, &members).unwrap_err().contains("cluster \"prod\""));
        let stranger = Hello { node: NodeId(9), ..ok.clone() };
        assert!(me.check(&stranger, &members).unwrap_err().contains("node id 9"));
        let algo = Hello { mutex: "ricart-agrawala".into(), ..ok.clone() };
        assert!(me.check(&algo, &members).unwrap_err().contains("algorithms"));
        let partitions = Hello { partitions: "detector".into(), ..ok.clone() };
        assert!(me.check(&partitions, &members).unwrap_err().contains("partitions = \"detector\""));
        let watching = Hello { detector: "ring, watch 2".into(), ..ok.clone() };
        assert!(me.check(&watching, &members).unwrap_err().contains("failure detector ring"));
        let version = Hello { protocol: 99, ..ok };
        assert!(me.check(&version, &members).unwrap_err().contains("protocol"));
    }
}
