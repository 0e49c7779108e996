//! Well-formed inputs for every target, to start a fuzzer from (an empty
//! corpus makes a coverage-guided fuzzer rediscover the frame format
//! first) and for the tests to mutate.

use crate::stream;
use coterie_core::wire::{self, Envelope, Hello, PeerFrame, PROTOCOL_VERSION};
use coterie_core::{registry, AlgoConfig, Delta, Engine, Mode, NodeId, Output, Restored};
use coterie_node::auth::{AuthFrame, Role};
use coterie_node::protocol::{
    Acquire, ClientRequest, ClientResponse, FaultCommand, FaultState, Way, WitnessRequest,
};
use std::collections::VecDeque;
use std::time::Duration;

/// For `peer`: what node 1 hears in a short run of three nodes, for every
/// mutex and election algorithm.
pub fn peer() -> Vec<Vec<u8>> {
    let mut seeds = Vec::new();
    for m in 0..registry::MUTEXES.len() {
        for e in 0..registry::ELECTIONS.len() {
            let shape = 1; // three nodes
            let run = Conversation::run(m, e, 3);
            let mut input = vec![m as u8, e as u8, shape];
            input.extend(run.heard_by_one(m, e));
            seeds.push(input);
        }
    }
    seeds
}

/// For `handshake`: both ends' frames, as an honest peer or client sends
/// them (with proofs that cannot match: the nonces are fresh).
pub fn handshake() -> Vec<Vec<u8>> {
    let hello = |cluster: &str, role, id| AuthFrame::Hello {
        cluster: cluster.into(),
        role,
        id,
        nonce: [7; 32],
    };
    let proof = AuthFrame::Proof { proof: [9; 32] };
    let challenge =
        AuthFrame::Challenge { cluster: "fuzz".into(), id: 1, nonce: [3; 32], proof: [4; 32] };
    let with = |mode: u8, frames: &[AuthFrame]| {
        let mut input = vec![mode];
        input.extend(stream(frames));
        input
    };
    vec![
        with(0, &[hello("fuzz", Role::Peer, 2), proof.clone()]),
        with(0, &[hello("", Role::Client, 0), proof.clone()]),
        with(0, &[hello("other", Role::Node, 2), AuthFrame::Refused("no".into())]),
        with(1, std::slice::from_ref(&challenge)),
        with(1, &[AuthFrame::Refused("wrong secret".into())]),
        with(1, &[proof, challenge]),
    ]
}

/// For `client`: every request a client makes, and the answers it reads.
pub fn client() -> Vec<Vec<u8>> {
    let requests = [
        ClientRequest::Acquire(Acquire { timeout_ms: Some(1000), ..Acquire::default_lock() }),
        ClientRequest::Acquire(Acquire {
            names: vec!["jobs/nightly".into(), "printer-2".into()],
            permits: 2,
            try_lock: true,
            value: Some("n1:8080".into()),
            client: "17@host".into(),
            timeout_ms: None,
            mode: Mode::Read,
        }),
        ClientRequest::Acquire(Acquire {
            names: vec!["".into(), "a\tb".into()],
            ..Acquire::default_lock()
        }),
        ClientRequest::Locks { prefix: "jobs/".into() },
        ClientRequest::Leader { name: "scheduler".into() },
        ClientRequest::Observe { name: "scheduler".into() },
        ClientRequest::Release,
        ClientRequest::Status,
        ClientRequest::Ping,
        ClientRequest::Fault(FaultCommand::Partition { peers: vec![2, 3], way: Way::Both }),
        ClientRequest::Fault(FaultCommand::Partition { peers: vec![2], way: Way::Inbound }),
        ClientRequest::Fault(FaultCommand::Delay { peers: vec![], ms: 100 }),
        ClientRequest::Fault(FaultCommand::Drop { peers: vec![4], percent: 50 }),
        ClientRequest::Fault(FaultCommand::Reset { peers: vec![] }),
        ClientRequest::Fault(FaultCommand::Heal),
        ClientRequest::Watch,
    ];
    let responses = [
        ClientResponse::Pong { heartbeat_ms: 50, failure_timeout_ms: 250 },
        ClientResponse::Granted { fences: vec![("default".into(), 1 << 40)], node: 3 },
        ClientResponse::TimedOut,
        ClientResponse::Busy,
        ClientResponse::Released,
        ClientResponse::NotHolding,
        ClientResponse::Faults(FaultState::default()),
        ClientResponse::Error("this node requires authentication".into()),
    ];
    let mut a = vec![0];
    a.extend(stream(&requests));
    let mut b = vec![1];
    b.extend(stream(&responses));
    vec![a, b]
}

/// For `witness`: two holders in turn, a stale fence, a report.
pub fn witness() -> Vec<Vec<u8>> {
    let requests = [
        WitnessRequest::Enter { name: "default".into(), fence: 5, node: 1 },
        WitnessRequest::Leave { name: "default".into(), fence: 5 },
        WitnessRequest::Enter { name: "default".into(), fence: 4, node: 2 },
        WitnessRequest::Enter { name: "jobs/a".into(), fence: 9, node: 2 },
        WitnessRequest::Report,
        WitnessRequest::Read { name: "default".into(), fenced: true, fence: Some(9) },
        WitnessRequest::Write { name: "default".into(), fenced: true, fence: Some(4), value: 1 },
        WitnessRequest::Write { name: "default".into(), fenced: false, fence: None, value: 1 },
        WitnessRequest::Leave { name: "jobs/a".into(), fence: 9 },
    ];
    let mut input = vec![0];
    input.extend(stream(&requests));
    vec![input]
}

/// For `state_file`: the records quorum arbiters and elections store in a
/// short run, as bare records and changes (wrapped by the target) and as
/// whole files: a snapshot, a log, and the earlier single-file format.
pub fn state_file() -> Vec<Vec<u8>> {
    let mut records = vec![Restored::default()];
    let mut changes = Vec::new();
    let mut logs = Vec::new();
    for name in ["maekawa", "tree-quorum", "centralized"] {
        let m = registry::MUTEXES.iter().position(|i| i.name == name).expect("registered");
        let run = Conversation::run(m, 0, 3);
        let mut record = Restored::default();
        for delta in &run.records {
            record.apply(delta.clone());
        }
        records.push(record);
        changes.extend(run.records.iter().rev().take(2).map(Delta::encode));
        let numbered: Vec<(u64, Vec<u8>)> =
            run.records.iter().zip(1..).map(|(d, i)| (i, d.encode())).collect();
        logs.push(coterie_node::state::log_image(&numbered));
    }
    let mut seeds = Vec::new();
    for record in &records {
        let encoded = record.encode();
        seeds.push([&[1][..], &encoded].concat());
        seeds.push([&[0][..], &coterie_node::state::snapshot_image(record, 3)].concat());
        seeds.push([&[4][..], &coterie_node::state::legacy::image(&encoded)].concat());
        let mut length_prefixed = vec![4];
        length_prefixed.extend((encoded.len() as u32).to_le_bytes());
        length_prefixed.extend(&encoded);
        seeds.push(length_prefixed);
    }
    for change in &changes {
        seeds.push([&[3][..], change].concat());
    }
    for log in &logs {
        seeds.push([&[2][..], log].concat());
    }
    seeds
}

/// A short run of `n` engines passing messages instantly, every node
/// asking for the critical section and leaving it when granted.
struct Conversation {
    /// What node 1 heard: sender, message, milliseconds since the one
    /// before.
    heard: Vec<(NodeId, Envelope, u64)>,
    /// Every record any node asked to store.
    records: Vec<Delta>,
}

impl Conversation {
    const STEP: Duration = Duration::from_millis(10);
    const STEPS: u32 = 30;
    const MAX_HEARD: usize = 40;

    fn run(m: usize, e: usize, n: u32) -> Conversation {
        let (mutex, election) = (&registry::MUTEXES[m], &registry::ELECTIONS[e]);
        let mut engines: Vec<Engine> = (1..=n)
            .map(|i| Engine::new(AlgoConfig::for_test(i, n), mutex, election, Duration::ZERO))
            .collect();
        let mut heard = Vec::new();
        let mut records = Vec::new();
        let mut last = Duration::ZERO;
        let mut queue = VecDeque::new();
        for step in 0..Self::STEPS {
            let now = Self::STEP * step;
            for (i, engine) in engines.iter_mut().enumerate() {
                if engine.next_deadline().is_some_and(|d| d <= now) {
                    engine.handle_timeout(now);
                }
                engine.request(now, &coterie_core::Name::default(), 1).ok();
                let from = NodeId(i as u32 + 1);
                let mut granted = false;
                while let Some(output) = engine.poll_output() {
                    match output {
                        Output::Send { to, envelope, .. } => queue.push_back((from, to, envelope)),
                        Output::Persist(record) => records.push(record),
                        Output::Granted { .. } => granted = true,
                        _ => {}
                    }
                }
                if granted {
                    engine.release(now, &coterie_core::Name::default());
                }
            }
            while let Some((from, to, envelope)) = queue.pop_front() {
                if to == NodeId(1) && heard.len() < Self::MAX_HEARD {
                    let ms = (now - last).as_millis() as u64;
                    last = now;
                    heard.push((from, envelope.clone(), ms));
                }
                let engine = &mut engines[to.0 as usize - 1];
                let _ = engine.handle_message(now, from, envelope);
                while let Some(output) = engine.poll_output() {
                    match output {
                        Output::Send { to: next, envelope, .. } => {
                            queue.push_back((to, next, envelope))
                        }
                        Output::Persist(record) => records.push(record),
                        Output::Granted { .. } => {
                            engine.release(now, &coterie_core::Name::default())
                        }
                        _ => {}
                    }
                }
            }
        }
        Conversation { heard, records }
    }

    /// What node 1 heard as peer frames: a `Hello` whenever the sender
    /// changes (a connection of its own), then its numbered messages.
    fn heard_by_one(&self, m: usize, e: usize) -> Vec<u8> {
        let mut frames = Vec::new();
        let mut seqs = std::collections::BTreeMap::new();
        let mut current = None;
        for (from, envelope, ms) in &self.heard {
            if current != Some(*from) {
                current = Some(*from);
                frames.push(PeerFrame::Hello(Hello {
                    cluster: "fuzz".into(),
                    node: *from,
                    protocol: PROTOCOL_VERSION,
                    mutex: registry::MUTEXES[m].name.into(),
                    election: registry::ELECTIONS[e].name.into(),
                    detector: coterie_core::Detector::All.to_string(),
                    boot: 0,
                    expects: None,
                    delivered: 0,
                    dial_back: false,
                    partitions: "detector".into(),
                }));
            }
            let seq = seqs.entry(*from).or_insert(0u64);
            *seq += 1;
            let body = wire::encode(envelope);
            frames.push(PeerFrame::Message { seq: *seq, ack: (*ms).min(255), body });
        }
        stream(&frames)
    }
}
