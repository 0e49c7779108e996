//! What clients say to a node's client port, and what anyone says to the
//! witness. Both travel in the same frames as peer traffic.

use coterie_core::{Mode, Status};
use serde::{Deserialize, Serialize};

/// A client's request to its node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClientRequest {
    /// Ask for one or more locks and wait for them all.
    Acquire(Acquire),
    /// Leave every lock the session holds.
    Release,
    /// The node's status.
    Status,
    /// Inject a fault into the node's agent, or clear them (`coterie
    /// fault`). Answered with the faults now in force.
    Fault(FaultCommand),
    /// Stream what happens at the node from now on (`coterie watch`): the
    /// connection then carries only [`ClientResponse::Event`]s, until the
    /// client closes it or the node stops.
    Watch,
    /// A keepalive, answered with [`ClientResponse::Pong`]. A session that
    /// waits for the lock or holds it must send one within every failure
    /// timeout (it is a lease), and so must one that has pinged, until its
    /// next other request: if it falls silent, the node takes it for lost
    /// (its client hung or was cut off), withdraws its request or releases
    /// what it held, as when it disconnects. While a session waits, Ping
    /// is the only request it may send.
    Ping,
    /// [`Watch`](Self::Watch), with every message the node sends and
    /// delivers too ([`NodeEvent::Sent`], [`NodeEvent::Delivered`]), for
    /// diagrams of the run. The node does this work only while someone
    /// asks for it.
    WatchMessages {
        /// Heartbeats too.
        heartbeats: bool,
    },
    /// Every live lock whose name starts with `prefix`, cluster wide: who
    /// holds it, who waits. Answered with [`ClientResponse::Locks`].
    Locks {
        /// The names' common start (empty: every lock).
        prefix: String,
    },
    /// The leader of election `name`, cluster wide: the holder of the
    /// lock `name` that gave a value. Answered with
    /// [`ClientResponse::Leader`].
    Leader {
        /// The election.
        name: String,
    },
    /// Stream every change of election `name`'s leader, starting with the
    /// leader now: the connection then carries [`ClientResponse::Leader`]s,
    /// and a [`ClientResponse::Pong`] for each [`Ping`](Self::Ping) the
    /// client sends to tell a hung node from a quiet election, until the
    /// client closes it (or sends anything else) or the node stops.
    Observe {
        /// The election.
        name: String,
    },
    /// Ask every holder of lock `name`, cluster wide, to let go (`coterie
    /// revoke`): each is sent a [`ClientResponse::RevokeAsked`] (an HTTP
    /// holder, a `revoke` event on its session's stream) and decides for
    /// itself; nothing is taken from it. Answered with
    /// [`ClientResponse::Revoked`], or an error if nobody holds the lock.
    Revoke {
        /// The lock.
        name: String,
        /// Why, as the holders are told.
        reason: Option<String>,
    },
}

/// A request for locks ([`ClientRequest::Acquire`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Acquire {
    /// The locks, by name (empty: the `default` lock). Several are taken
    /// all or none, one after the other in name order (bytewise), so that
    /// two clients asking for overlapping sets cannot deadlock.
    pub names: Vec<String>,
    /// Ask for one of this many permits of each (a counting semaphore);
    /// 0 for the cluster's `count`.
    pub permits: u32,
    /// Give up after this many milliseconds (`None`: wait for ever).
    pub timeout_ms: Option<u64>,
    /// Answer `Busy` instead of `TimedOut` when giving up.
    pub try_lock: bool,
    /// What the holder says it holds the locks for: a campaign's value,
    /// which makes the holder its election's leader (see
    /// [`ClientRequest::Leader`]).
    pub value: Option<String>,
    /// What the client calls itself in listings (`pid@host`); empty for
    /// the session's number.
    pub client: String,
    /// Whether it reads (sharing the locks with other readers) or writes
    /// (alone). Reads need locks of one permit.
    pub mode: Mode,
}

impl Acquire {
    /// The default lock, one permit as the cluster counts them, waiting
    /// for ever.
    pub fn default_lock() -> Acquire {
        Acquire {
            names: Vec::new(),
            permits: 0,
            timeout_ms: None,
            try_lock: false,
            value: None,
            client: String::new(),
            mode: Mode::Write,
        }
    }
}

/// A live lock, cluster wide, as `coterie locks --json` prints it and
/// the dashboard lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockInfo {
    /// The lock's name.
    pub name: String,
    /// How many may hold it at once.
    pub permits: u32,
    /// Who holds it.
    pub holders: Vec<HolderInfo>,
    /// Who waits, in the order they will be served as far as the
    /// algorithm knows it ([`LockInfo::order`]).
    pub waiters: Vec<WaiterInfo>,
    /// How the waiters are ordered.
    pub order: WaitOrder,
}

impl LockInfo {
    /// Whether `other` shows this lock with the same holders and waiters,
    /// the times they have held and waited aside: whether a watcher has
    /// news.
    pub fn same_as(&self, other: &LockInfo) -> bool {
        fn holders(l: &LockInfo) -> Vec<(u32, Option<&str>, u64, Option<&str>)> {
            let h = l.holders.iter();
            h.map(|h| (h.node, h.client.as_deref(), h.fence, h.value.as_deref())).collect()
        }
        fn waiters(l: &LockInfo) -> Vec<(u32, &str)> {
            l.waiters.iter().map(|w| (w.node, w.client.as_str())).collect()
        }
        (&self.name, self.permits, self.order) == (&other.name, other.permits, other.order)
            && holders(self) == holders(other)
            && waiters(self) == waiters(other)
    }
}

/// The order [`LockInfo::waiters`] are listed in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WaitOrder {
    /// `"timestamp"`: the algorithm serves requests in timestamp order,
    /// and they are listed so.
    Timestamp,
    /// `"waited"`: the algorithm knows no global order (a coordinator's
    /// queue, a ring, quorums): longest waiting first, each node's own
    /// clients in the order it will serve them.
    Waited,
}

/// One holder of a lock.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HolderInfo {
    /// The node whose client holds it.
    pub node: u32,
    /// The client (`pid@host`, or the session's number), or `null` when
    /// the node holds it for a client it lost (the lock delay).
    pub client: Option<String>,
    /// The grant's fence.
    pub fence: u64,
    /// How long it has held, in milliseconds.
    pub held_ms: u64,
    /// The value it gave (a campaign's).
    pub value: Option<String>,
    /// Whether someone asked it to let go (`coterie revoke`), and why:
    /// the reason given, empty if none was.
    pub revoke: Option<String>,
    /// Whether it reads or writes.
    pub mode: Mode,
}

/// One waiter for a lock.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaiterInfo {
    /// The node whose client waits.
    pub node: u32,
    /// The client.
    pub client: String,
    /// How long it has waited, in milliseconds.
    pub waited_ms: u64,
    /// Whether it would read or write.
    pub mode: Mode,
}

/// An election's leader, as `coterie leader --json` and `coterie elect
/// --observe --json` print it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaderReport {
    /// The election.
    pub name: String,
    /// Its leader, if it has one.
    pub leader: Option<Leader>,
}

/// The leader of an election.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Leader {
    /// The node whose client leads.
    pub node: u32,
    /// The value it campaigned with.
    pub value: String,
    /// Its grant's fence: a new leader's is higher.
    pub fence: u64,
}

/// The clock [`WatchEvent`]s are stamped with: microseconds since the Unix
/// epoch.
pub fn unix_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// Something that happened at a node, as a watcher sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchEvent {
    /// The node it happened at.
    pub node: u32,
    /// When, in microseconds since the Unix epoch by the node's clock
    /// (nodes on one host share it, so their events interleave truly).
    pub unix_us: u64,
    /// What.
    pub event: NodeEvent,
}

fn yes() -> bool {
    true
}

/// The kinds of [`WatchEvent`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum NodeEvent {
    /// The first event of every stream: where the node stands as the watch
    /// begins.
    Snapshot {
        /// The coordinator it follows.
        coordinator: Option<u32>,
        /// That coordinator's epoch.
        epoch: u64,
        /// The ids it believes up, itself included.
        alive: Vec<u32>,
        /// Whether it has joined the cluster.
        joined: bool,
        /// The view it installed (`partitions = "majority"`; none before
        /// its first, and never in detector mode).
        #[serde(default)]
        view: Option<coterie_core::ViewStatus>,
        /// Whether it holds a lease from a majority (always in detector
        /// mode): without one it grants nothing.
        #[serde(default = "yes")]
        quorum: bool,
    },
    /// The node installed a view (`partitions = "majority"`): from now on
    /// these are the members it counts up.
    View(coterie_core::ViewStatus),
    /// The node won (`true`) or lost (`false`) the lease of a majority:
    /// without it, it grants nothing and its holders lose their locks.
    Quorum {
        /// Whether it holds one now.
        held: bool,
    },
    /// The node joined the cluster with these nodes up (itself included).
    Joined {
        /// Ids up.
        alive: Vec<u32>,
    },
    /// The failure detector hears from `peer` again (or for the first time).
    PeerUp {
        /// The peer.
        peer: u32,
    },
    /// The failure detector suspects `peer`.
    PeerDown {
        /// The peer.
        peer: u32,
    },
    /// The node follows a new coordinator.
    Coordinator {
        /// Who.
        leader: u32,
        /// Its epoch.
        epoch: u64,
    },
    /// A client session of this node was granted a lock.
    Granted {
        /// The lock.
        name: String,
        /// The grant's fence.
        fence: u64,
        /// The client session.
        session: u64,
    },
    /// The holding session let go of a lock (released, or its client
    /// vanished).
    Released {
        /// The lock.
        name: String,
        /// The client session.
        session: u64,
    },
    /// Someone injected or cleared faults; these are now in force.
    Fault(FaultState),
    /// The node sent `to` the message numbered `seq` in their session
    /// (only on a [`ClientRequest::WatchMessages`] stream).
    Sent {
        /// The receiver.
        to: u32,
        /// Its number in the sender's session with the receiver: the
        /// receiver's [`NodeEvent::Delivered`] names the same number.
        seq: u64,
        /// Its kind (`request`, `heartbeat`).
        kind: String,
        /// What it says, in full.
        text: String,
    },
    /// The node's algorithms took in the message `from` numbered `seq` in
    /// their session (only on a [`ClientRequest::WatchMessages`] stream).
    Delivered {
        /// The sender.
        from: u32,
        /// Its number in the sender's session.
        seq: u64,
    },
    /// The watcher fell this many events behind and they were skipped.
    Missed {
        /// How many.
        events: u64,
    },
}

/// A fault the agent injects into its own traffic, for experiments.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum FaultCommand {
    /// Drop every message to and from these peers (all peers if empty),
    /// or only one way: a network partition as this node sees it.
    Partition {
        /// Peer ids.
        peers: Vec<u32>,
        /// Which way the link is cut.
        way: Way,
    },
    /// Hold every message to these peers (all if empty) this long first.
    Delay {
        /// Peer ids.
        peers: Vec<u32>,
        /// The added delay in milliseconds (0 removes it).
        ms: u64,
    },
    /// Drop this share of the messages to these peers (all if empty).
    Drop {
        /// Peer ids.
        peers: Vec<u32>,
        /// Percent of messages dropped, 0 to 100.
        percent: u8,
    },
    /// Stop handling messages, timers and clients (but this command) until
    /// resumed, as if the process were stopped.
    Pause,
    /// Undo a pause.
    Resume,
    /// Close the connection with each of these peers (all if empty); it
    /// is redialled as after any break, and the sessions send again what
    /// was in flight. Nothing is paused and no fault stays in force.
    Reset {
        /// Peer ids.
        peers: Vec<u32>,
    },
    /// Clear every fault.
    Heal,
    /// Change nothing; report the faults in force.
    Show,
}

pub use coterie_core::Way;

/// The faults in force at a node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultState {
    /// Peers cut off, both ways.
    pub partitioned: Vec<u32>,
    /// Peers the node hears nothing from, while they still hear it.
    pub deaf_to: Vec<u32>,
    /// Peers that hear nothing from the node, while it still hears them.
    pub mute_to: Vec<u32>,
    /// Added delay per peer, in milliseconds.
    pub delay_ms: Vec<(u32, u64)>,
    /// Share of messages dropped per peer, in percent.
    pub drop_percent: Vec<(u32, u8)>,
    /// Whether the node is paused.
    pub paused: bool,
}

impl std::fmt::Display for FaultState {
    /// One line: `paused; cut off from n1, n2; +50 ms to n3`, or `no fault`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        if self.paused {
            parts.push("paused".to_string());
        }
        let names =
            |ids: &[u32]| ids.iter().map(|p| format!("n{p}")).collect::<Vec<_>>().join(", ");
        if !self.partitioned.is_empty() {
            parts.push(format!("cut off from {}", names(&self.partitioned)));
        }
        if !self.deaf_to.is_empty() {
            parts.push(format!("hears nothing from {}", names(&self.deaf_to)));
        }
        if !self.mute_to.is_empty() {
            parts.push(format!("unheard by {}", names(&self.mute_to)));
        }
        for (p, ms) in &self.delay_ms {
            parts.push(format!("+{ms} ms to n{p}"));
        }
        for (p, pct) in &self.drop_percent {
            parts.push(format!("drops {pct}% to n{p}"));
        }
        if parts.is_empty() {
            f.write_str("no fault")
        } else {
            f.write_str(&parts.join("; "))
        }
    }
}

/// A node's answer to a client.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClientResponse {
    /// The locks are yours.
    Granted {
        /// Each lock's name and its grant's fencing token, in name order.
        fences: Vec<(String, u64)>,
        /// The node that granted them (the client's node).
        node: u32,
    },
    /// Not granted within the timeout.
    TimedOut,
    /// A try that did not succeed in time.
    Busy,
    /// Left.
    Released,
    /// A release from a client that does not hold.
    NotHolding,
    /// The node's status.
    Status(Box<Status>),
    /// The faults in force, after a [`ClientRequest::Fault`].
    Faults(FaultState),
    /// One event of a [`ClientRequest::Watch`] stream.
    Event(WatchEvent),
    /// The request could not be served.
    Error(String),
    /// The live locks ([`ClientRequest::Locks`]), with the nodes that did
    /// not answer (their part is missing).
    Locks {
        /// The locks, by name.
        locks: Vec<LockInfo>,
        /// The nodes that did not answer in time.
        unreachable: Vec<u32>,
    },
    /// An election's leader ([`ClientRequest::Leader`], and each change
    /// on a [`ClientRequest::Observe`] stream).
    Leader(LeaderReport),
    /// The answer to a [`ClientRequest::Ping`], with the node's timing: a
    /// client pings once per `heartbeat_ms` and takes the session for lost
    /// when a ping goes unanswered for `failure_timeout_ms`.
    Pong {
        /// How often to ping.
        heartbeat_ms: u64,
        /// How long a ping may go unanswered.
        failure_timeout_ms: u64,
    },
    /// The answer to a [`ClientRequest::Revoke`].
    Revoked(Revoked),
    /// Sent unasked to a session holding lock `name` when someone asks
    /// its holders to let go ([`ClientRequest::Revoke`]), between any two
    /// answers. Revocation is cooperative: the session decides whether
    /// and when to release.
    RevokeAsked(RevokeAsked),
}

/// Who was asked to let go of a lock ([`ClientRequest::Revoke`]), as
/// `coterie revoke --json` and `POST /v1/locks/{name}/revoke` print it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Revoked {
    /// The lock.
    pub name: String,
    /// The holders asked.
    pub holders: u32,
    /// The nodes that did not answer in time: a holder there was not
    /// asked.
    pub unreachable: Vec<u32>,
}

/// A request to let go of a lock, as its holder hears it
/// ([`ClientResponse::RevokeAsked`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RevokeAsked {
    /// The lock.
    pub name: String,
    /// The fence of the holder's grant.
    pub fence: u64,
    /// Why, as whoever asked said.
    pub reason: Option<String>,
}

/// A request to the witness.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum WitnessRequest {
    /// I hold lock `name` with this fence and am using its resource.
    Enter {
        /// The lock.
        name: String,
        /// The holder's fence.
        fence: u64,
        /// The node it was granted by.
        node: u32,
    },
    /// I am done with lock `name`'s resource.
    Leave {
        /// The lock.
        name: String,
        /// The fence I entered with.
        fence: u64,
    },
    /// The witness's counters.
    Report,
    /// Read the register `name`: its plain copy, or its fenced copy with
    /// `fence` (refused if below the fence of the copy's last write, and
    /// raising the bar for writes to it; without a fence, a look that
    /// checks and raises nothing).
    Read {
        /// The register's name (the lock's).
        name: String,
        /// The fenced copy rather than the plain one.
        fenced: bool,
        /// The holder's fence.
        fence: Option<u64>,
    },
    /// Write `value` to the register `name`: its plain copy, or its fenced
    /// copy with `fence` (refused if below the highest fence seen there).
    Write {
        /// The register's name (the lock's).
        name: String,
        /// The fenced copy rather than the plain one.
        fenced: bool,
        /// The holder's fence (required by the fenced copy).
        fence: Option<u64>,
        /// The new value.
        value: i64,
    },
    /// I held lock `name` with this fence and have just learned that my
    /// session is lost (my node died or gave me up): I stop using the
    /// resource now. Leaves, as [`Leave`](Self::Leave) does; an overlap a
    /// newer holder made with this one meanwhile was a lease overlap, not
    /// a violation.
    Lost {
        /// The lock.
        name: String,
        /// The fence I entered with.
        fence: u64,
    },
}

/// The witness's answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum WitnessResponse {
    /// Entered.
    Accepted {
        /// Holders now, this one included.
        holders: u32,
        /// Whether that is more than the capacity: a safety violation.
        violation: bool,
    },
    /// Refused: the fence is not newer than one already accepted.
    Stale {
        /// The newest fence accepted so far.
        last: u64,
    },
    /// Left.
    Left,
    /// The counters.
    Report(WitnessReport),
    /// The register's value.
    Value(i64),
    /// The write was taken.
    Written,
    /// The fenced copy refused a fence below `highest`, the highest it has
    /// seen.
    Fenced {
        /// The highest fence the copy has seen.
        highest: u64,
    },
    /// The request cannot be served (a bad name, too many registers).
    Refused(String),
    /// Left after a loss; `explained` overlaps with newer holders were
    /// lease overlaps, and are no longer counted as violations.
    LeftLost {
        /// Violations this loss turned into lease overlaps.
        explained: u32,
        /// The entry had been refused as stale: a late entry of a holder
        /// whose node died, now counted as that and not as a stale fence.
        late: bool,
    },
}

/// What the witness has seen.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WitnessReport {
    /// Holders allowed at once, per lock.
    pub capacity: u32,
    /// Entries accepted, over every lock.
    pub entries: u64,
    /// Entries that made a lock's holders exceed the capacity, less the
    /// lease overlaps among them.
    pub violations: u64,
    /// Entries refused for a fence stale for their lock.
    pub stale_fences: u64,
    /// The most holders of one lock seen at once.
    pub max_holders: u32,
    /// Holders now, over every lock.
    pub holders: u32,
    /// The newest fence accepted, over every lock.
    pub last_fence: u64,
    /// Entries over the capacity that a loss explained: every holder they
    /// overlapped beyond the capacity had a lower fence and later said its
    /// session was lost (its node died while it held). The lock moved on,
    /// as it must once the holder's node is gone; the holder learned it a
    /// moment later. A fence-checking resource refuses the old holder; a
    /// lock delay keeps the new one out (`[cluster] lock_delay`).
    pub lease_overlaps: u64,
    /// Entries refused as stale whose holder then said its session was
    /// lost: its node granted the lock and died before the holder came
    /// in, and the next holder came in first. The same race as a lease
    /// overlap, with the order of entries the other way round; not
    /// counted in `stale_fences`.
    pub late_entries: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bytes the blocking C client of the benchmarks
    /// (`scripts/bench/coterie-lock.c`) writes by hand: when a request
    /// gains a field, this fails, and the C client must follow.
    #[test]
    fn the_c_clients_frames_are_the_protocols() {
        let acquire = ClientRequest::Acquire(Acquire {
            names: vec!["default".into()],
            client: "coterie-lock".into(),
            ..Acquire::default_lock()
        });
        let mut c = vec![0, 1, 7];
        c.extend_from_slice(b"default");
        c.extend_from_slice(&[0, 0, 0, 0, 12]);
        c.extend_from_slice(b"coterie-lock");
        c.push(1);
        assert_eq!(coterie_core::wire::encode(&acquire), c);
        assert_eq!(coterie_core::wire::encode(&ClientRequest::Release), vec![1]);
        let granted = ClientResponse::Granted { fences: vec![], node: 1 };
        assert_eq!(coterie_core::wire::encode(&granted)[0], 0, "Granted is variant 0");
        let released = coterie_core::wire::encode(&ClientResponse::Released);
        assert_eq!(released, vec![3], "Released is variant 3");
    }
}
