//! The one place an algorithm is added: a line in [`MUTEXES`] or
//! [`ELECTIONS`]. Everything else (the engine, the simulator's conformance
//! suite, the CLI's `--mutex`/`--election` choices) reads these tables.
//!
//! A choice of algorithm is parsed once, where it is made (a flag, a
//! configuration file: [`mutex`] and [`election`], or `&'static MutexInfo`
//! deserialized or parsed with `FromStr`), into its entry; from there on it
//! is that entry, never a name looked up again. An entry prints, compares
//! and serializes as its name.
//!
//! The tables hold type-erased constructors: the engine drives a
//! [`DynMutex`] and a [`DynElection`] (see [`crate::erased`]) whose
//! messages are already encoded, so one engine serves every combination
//! without generics.

use crate::algorithm::AlgoConfig;
use crate::election::{bully::Bully, ring::Ring};
use crate::erased::{erase_election, erase_mutex};
pub use crate::erased::{Actions, DynAlgorithm, DynElection, DynMutex, Encoded};
use crate::mutex::bakery::Bakery;
use crate::mutex::lodha_kshemkalyani::LodhaKshemkalyani;
use crate::mutex::{
    centralized::Centralized,
    centralized_lending::CentralizedLending,
    lamport::Lamport,
    maekawa::{self, Maekawa},
    raymond_k::RaymondK,
    ricart_agrawala::RicartAgrawala,
    roucairol_carvalho::RoucairolCarvalho,
    token_ring::TokenRing,
    tree_quorum::{self, TreeQuorum},
};
use crate::types::Mode;

/// A variant of a mutual-exclusion algorithm that [`MutexOptions`]
/// selects.
///
/// [`MutexOptions`]: crate::MutexOptions
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MutexOption {
    /// [`MutexOptions::fault_tolerant`](crate::MutexOptions::fault_tolerant).
    FaultTolerant,
    /// [`MutexOptions::priority`](crate::MutexOptions::priority).
    Priority,
    /// [`MutexOptions::fence_room`](crate::MutexOptions::fence_room): the
    /// algorithm counts grants within an era and renews the era when the
    /// count is spent.
    FenceRoom,
}

/// What a mutual-exclusion algorithm promises beyond mutual exclusion
/// with rising fences (which all promise while nothing is suspected
/// wrongly). The simulator's conformance suite and `coterie check` read
/// these, and hold each algorithm to each: a new algorithm needs its file
/// and its line in [`MUTEXES`], nothing more.
#[derive(Clone, Copy, Debug)]
pub struct Claims {
    /// `count`/capacity > 1 is honoured: up to k holders at once, counted
    /// by client session, not by node: a node may hold several of a lock's
    /// permits at once (one per session), asking for each on its own and
    /// releasing each by its fence. Without it a lock has one holder, and
    /// a node asks once for all its clients, which take turns.
    pub counting: bool,
    /// Reads share a lock of one permit: the algorithm has a reader form
    /// ([`MutexAlgorithm::handle_request_in`](crate::MutexAlgorithm::handle_request_in)),
    /// and grants any number of readers at once, or one writer, with no
    /// reader let in ahead of a writer that asked before it — save under
    /// the algorithms whose entries keep no request order
    /// (`roucairol-carvalho`, `maekawa`, `tree-quorum`: a writer there is
    /// not starved, but a later reader may enter first). Without it a read
    /// is taken as a write.
    pub readers: bool,
    /// Entries follow request-timestamp order (no grant while an older
    /// request waits) while nothing fails.
    pub fair: bool,
    /// Safe (and live once healed) when a live peer is suspected: under a
    /// partition, a pause or a delay spike longer than the failure
    /// timeout. Permission comes from intersecting quorums, never from a
    /// timeout. Algorithms without it may grant on both sides of a
    /// partition, and the suite checks that they do (so the partition is
    /// known to be real).
    pub safe_under_partitions: bool,
    /// The variants it honours.
    pub options: &'static [MutexOption],
}

impl Claims {
    /// The claims of a classic algorithm: one holder, no promise of order,
    /// safety resting on the failure detector, no variants.
    pub const BASIC: Claims = Claims {
        counting: false,
        readers: false,
        fair: false,
        safe_under_partitions: false,
        options: &[],
    };

    /// Whether it honours `option`.
    pub fn takes(&self, option: MutexOption) -> bool {
        self.options.contains(&option)
    }
}

/// A registered mutual-exclusion algorithm.
pub struct MutexInfo {
    /// The name used in configuration and on the command line.
    pub name: &'static str,
    /// One line for `--help` and the README.
    pub summary: &'static str,
    /// What it promises.
    pub claims: Claims,
    /// Messages one entry in `mode` costs at light load (one request at a
    /// time, no failures) in a cluster of `n`, when the requester is
    /// (`true`) or is not the coordinator: the inclusive range theory
    /// allows. A read costs what a write does but where the algorithm's
    /// reader form asks fewer nodes (`maekawa`'s grid rows).
    pub light_load: fn(n: u64, requester_is_coordinator: bool, mode: Mode) -> (u64, u64),
    /// Messages per entry, averaged over a run, when every node always
    /// wants the critical section (no failures, capacity 1): the inclusive
    /// range theory allows in a cluster of `n`.
    pub heavy_load: fn(n: u64) -> (f64, f64),
    /// Messages per entry, averaged over a run, when every node asks at
    /// the same instant, once (a burst; no failures, capacity 1): the
    /// inclusive range theory allows in a cluster of `n`.
    pub burst_load: fn(n: u64) -> (f64, f64),
    /// Message kinds every burst on five nodes or more shows: the
    /// machinery contention sets going (Maekawa's FAILED, INQUIRE and
    /// YIELD; Lodha-Kshemkalyani's FLUSH).
    pub burst_kinds: &'static [&'static str],
    /// Builds an instance.
    pub build: fn(&AlgoConfig) -> Box<dyn DynMutex>,
}

/// A registered election algorithm.
pub struct ElectionInfo {
    /// The name used in configuration and on the command line.
    pub name: &'static str,
    /// One line for `--help` and the README.
    pub summary: &'static str,
    /// Builds an instance.
    pub build: fn(&AlgoConfig) -> Box<dyn DynElection>,
}

/// Every mutual-exclusion algorithm.
pub const MUTEXES: &[MutexInfo] = &[
    MutexInfo {
        name: "centralized",
        summary: "coordinator with a FIFO queue, readers sharing; count > 1 makes it a counting semaphore",
        claims: Claims {
            counting: true,
            readers: true,
            options: &[MutexOption::FenceRoom],
            ..Claims::BASIC
        },
        light_load: |_, local, _| if local { (0, 0) } else { (3, 3) },
        // The coordinator's own entries are free; everyone enters as often.
        heavy_load: |n| (3.0 * (n - 1) as f64 / n as f64, 3.0),
        // Everyone but the coordinator: REQUEST, GRANT, RELEASE.
        burst_load: |n| (3.0 * (n - 1) as f64 / n as f64, 3.0 * (n - 1) as f64 / n as f64),
        burst_kinds: &["request", "grant", "release"],
        build: |cfg| erase_mutex(Centralized::new(cfg)),
    },
    MutexInfo {
        name: "centralized-lending",
        summary: "centralized, and the coordinator lends the lock to a node that asks again: its re-entries cost no message",
        claims: Claims {
            counting: true,
            readers: true,
            options: &[MutexOption::FenceRoom],
            ..Claims::BASIC
        },
        // Nothing on a loan; centralized's 3 otherwise, and 2 more (RECALL
        // and the loan's RELEASE) when the lock must first come back.
        light_load: |_, local, _| if local { (0, 2) } else { (0, 5) },
        heavy_load: |n| (3.0 * (n - 1) as f64 / n as f64, 3.0),
        burst_load: |n| (3.0 * (n - 1) as f64 / n as f64, 3.0 * (n - 1) as f64 / n as f64),
        burst_kinds: &["request", "grant", "release"],
        build: |cfg| erase_mutex(CentralizedLending::lending(cfg)),
    },
    MutexInfo {
        name: "bakery",
        summary: "Lamport's bakery: take a ticket above every number read; the smallest enters",
        claims: Claims { fair: true, ..Claims::BASIC },
        // A doorway READ and VALUE, then a check READ and VALUE, per peer;
        // a check VALUE is held until the reader may pass, never polled.
        light_load: |n, _, _| (4 * (n - 1), 4 * (n - 1)),
        heavy_load: |n| (4.0 * (n - 1) as f64, 4.0 * (n - 1) as f64),
        burst_load: |n| (4.0 * (n - 1) as f64, 4.0 * (n - 1) as f64),
        burst_kinds: &[],
        build: |cfg| erase_mutex(Bakery::new(cfg)),
    },
    MutexInfo {
        name: "lamport",
        summary: "a request queue replicated on every node: REQUEST, REPLY, RELEASE; readers wait only for writers",
        claims: Claims { readers: true, fair: true, ..Claims::BASIC },
        light_load: |n, _, _| (3 * (n - 1), 3 * (n - 1)),
        heavy_load: |n| (3.0 * (n - 1) as f64, 3.0 * (n - 1) as f64),
        burst_load: |n| (3.0 * (n - 1) as f64, 3.0 * (n - 1) as f64),
        burst_kinds: &["request", "reply", "release"],
        build: |cfg| erase_mutex(Lamport::new(cfg)),
    },
    MutexInfo {
        name: "ricart-agrawala",
        summary: "timestamped requests to everyone, replies deferred by the earlier requester; readers answer readers",
        claims: Claims {
            readers: true,
            fair: true,
            options: &[MutexOption::FaultTolerant, MutexOption::Priority],
            ..Claims::BASIC
        },
        light_load: |n, _, _| (2 * (n - 1), 2 * (n - 1)),
        heavy_load: |n| (2.0 * (n - 1) as f64, 2.0 * (n - 1) as f64),
        burst_load: |n| (2.0 * (n - 1) as f64, 2.0 * (n - 1) as f64),
        burst_kinds: &["request", "reply"],
        build: |cfg| erase_mutex(RicartAgrawala::new(cfg)),
    },
    MutexInfo {
        name: "roucairol-carvalho",
        summary: "Ricart-Agrawala keeping the replies it was given: re-entries with no other request cost no message; readers share them",
        claims: Claims { readers: true, ..Claims::BASIC },
        // Nothing when every permission is still here; a REQUEST and a
        // REPLY for each one given away since. A renewal of the
        // reservation (every RESERVE ticks) adds at most that.
        light_load: |n, _, _| (0, 2 * (n - 1)),
        heavy_load: |n| (0.0, 2.0 * (n - 1) as f64),
        burst_load: |n| (0.0, 2.0 * (n - 1) as f64),
        burst_kinds: &["request", "reply"],
        build: |cfg| erase_mutex(RoucairolCarvalho::new(cfg)),
    },
    MutexInfo {
        name: "raymond-k",
        summary: "Ricart-Agrawala for k holders: enter once the requests in the way number at most k-1; a reader counts only writers",
        claims: Claims {
            counting: true,
            readers: true,
            fair: true,
            options: &[MutexOption::FaultTolerant, MutexOption::Priority],
            ..Claims::BASIC
        },
        light_load: |n, _, _| (2 * (n - 1), 2 * (n - 1)),
        heavy_load: |n| (2.0 * (n - 1) as f64, 2.0 * (n - 1) as f64),
        burst_load: |n| (2.0 * (n - 1) as f64, 2.0 * (n - 1) as f64),
        burst_kinds: &["request", "reply"],
        build: |cfg| erase_mutex(RaymondK::new(cfg)),
    },
    MutexInfo {
        name: "lodha-kshemkalyani",
        summary: "local request queues: concurrent requests answer each other, FLUSH hands over",
        claims: Claims { fair: true, ..Claims::BASIC },
        light_load: |n, _, _| (2 * (n - 1), 2 * (n - 1)),
        // Every entry sends a REQUEST to each peer; REPLYs and at most one
        // FLUSH add up to N-1 more, fewer the more requests are concurrent.
        heavy_load: |n| ((n - 1) as f64, 2.0 * (n - 1) as f64),
        // All N requests concurrent: N-1 REQUESTs, which answer each
        // other, and a FLUSH from each holder but the burst's last: N at
        // most (Kshemkalyani & Singhal, ch. 9), against 2(N-1).
        burst_load: |n| ((n - 1) as f64, n as f64),
        burst_kinds: &["request", "flush"],
        build: |cfg| erase_mutex(LodhaKshemkalyani::new(cfg)),
    },
    MutexInfo {
        name: "token-ring",
        summary:
            "one token round the ring of live nodes; parks after an idle lap, stays with a parker that enters again, regenerated when lost",
        // WANT to the parker, the token straight back, then an idle lap;
        // nothing when the parker itself enters again.
        claims: Claims { options: &[MutexOption::FenceRoom], ..Claims::BASIC },
        light_load: |n, _, _| (0, n + 2),
        heavy_load: |_| (1.0, 2.0),
        // A WANT from each waiter, the token's lap through them, and an
        // idle lap before it parks again: under 3 per entry.
        burst_load: |_| (1.0, 3.0),
        burst_kinds: &[],
        build: |cfg| erase_mutex(TokenRing::new(cfg)),
    },
    MutexInfo {
        name: "maekawa",
        summary: "permission from a request set of about sqrt(N) (projective plane or grid), with FAILED/INQUIRE/YIELD; readers share arbiters and read with a grid row",
        claims: Claims { readers: true, safe_under_partitions: true, ..Claims::BASIC },
        light_load: |n, _, mode| maekawa::light_load(n, mode),
        heavy_load: maekawa::heavy_load,
        burst_load: maekawa::heavy_load,
        burst_kinds: &["failed", "inquire", "yield"],
        build: |cfg| erase_mutex(Maekawa::new(cfg)),
    },
    MutexInfo {
        name: "tree-quorum",
        summary: "Agarwal-El Abbadi: permission from a root-to-leaf path, failed nodes replaced by both subtrees; readers share arbiters",
        claims: Claims { readers: true, safe_under_partitions: true, ..Claims::BASIC },
        light_load: |n, _, _| tree_quorum::light_load(n),
        heavy_load: tree_quorum::heavy_load,
        burst_load: tree_quorum::heavy_load,
        burst_kinds: &["failed"],
        build: |cfg| erase_mutex(TreeQuorum::new(cfg)),
    },
];

/// Every election algorithm.
pub const ELECTIONS: &[ElectionInfo] = &[
    ElectionInfo {
        name: "bully",
        summary: "ELECTION / OK / COORDINATOR: the highest live id wins",
        build: |cfg| erase_election(Bully::new(cfg)),
    },
    ElectionInfo {
        name: "ring",
        summary: "ELECTION collects the live ids round the ring; COORDINATOR announces the highest",
        build: |cfg| erase_election(Ring::new(cfg)),
    },
    ElectionInfo {
        name: "garcia-molina",
        summary: "poll the higher nodes, HALT the lower, COORDINATOR, NEW_STATE; the coordinator checks everyone",
        build: |cfg| erase_election(crate::election::garcia_molina::GarciaMolina::new(cfg)),
    },
];

/// A name that is in neither table.
#[derive(Debug, thiserror::Error)]
#[error("unknown {kind} algorithm {name:?} (known: {known})")]
pub struct UnknownAlgorithm {
    /// `"mutex"` or `"election"`.
    pub kind: &'static str,
    /// The name asked for.
    pub name: String,
    /// The names on offer, comma-separated.
    pub known: String,
}

/// Looks up a mutual-exclusion algorithm by name.
pub fn mutex(name: &str) -> Result<&'static MutexInfo, UnknownAlgorithm> {
    MUTEXES.iter().find(|m| m.name == name).ok_or_else(|| UnknownAlgorithm {
        kind: "mutex",
        name: name.to_string(),
        known: MUTEXES.iter().map(|m| m.name).collect::<Vec<_>>().join(", "),
    })
}

/// The names of the algorithms that honour `option`.
pub fn taking(option: MutexOption) -> impl Iterator<Item = &'static str> {
    MUTEXES.iter().filter(move |m| m.claims.takes(option)).map(|m| m.name)
}

/// Looks up an election algorithm by name.
pub fn election(name: &str) -> Result<&'static ElectionInfo, UnknownAlgorithm> {
    ELECTIONS.iter().find(|e| e.name == name).ok_or_else(|| UnknownAlgorithm {
        kind: "election",
        name: name.to_string(),
        known: ELECTIONS.iter().map(|e| e.name).collect::<Vec<_>>().join(", "),
    })
}

/// What makes a table's entry stand for its algorithm's name: it prints,
/// compares, serializes and parses as the name.
macro_rules! by_name {
    ($info:ty, $lookup:ident) => {
        impl std::fmt::Display for $info {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.pad(self.name)
            }
        }

        impl std::fmt::Debug for $info {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.pad(self.name)
            }
        }

        impl PartialEq for $info {
            fn eq(&self, other: &Self) -> bool {
                self.name == other.name
            }
        }

        impl Eq for $info {}

        impl std::str::FromStr for &'static $info {
            type Err = UnknownAlgorithm;
            fn from_str(name: &str) -> Result<Self, UnknownAlgorithm> {
                $lookup(name)
            }
        }

        impl serde::Serialize for $info {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.name)
            }
        }

        impl<'de> serde::Deserialize<'de> for &'static $info {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let name: String = serde::Deserialize::deserialize(d)?;
                $lookup(&name).map_err(serde::de::Error::custom)
            }
        }
    };
}

by_name!(MutexInfo, mutex);
by_name!(ElectionInfo, election);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outbox::Time;
    use crate::types::NodeId;

    #[test]
    fn names_are_unique_and_found() {
        for (i, m) in MUTEXES.iter().enumerate() {
            assert!(MUTEXES[i + 1..].iter().all(|o| o.name != m.name));
            assert_eq!(mutex(m.name).unwrap().name, m.name);
        }
        for e in ELECTIONS {
            assert_eq!(election(e.name).unwrap().name, e.name);
        }
    }

    #[test]
    fn an_entry_parses_prints_and_serializes_as_its_name() {
        let m: &'static MutexInfo = "maekawa".parse().unwrap();
        assert_eq!(m.to_string(), "maekawa");
        assert_eq!(m, mutex("maekawa").unwrap());
        let e: &'static ElectionInfo = "ring".parse().unwrap();
        assert_eq!(format!("{e:?}"), "ring");
        assert!("paxos".parse::<&'static ElectionInfo>().is_err());
    }

    #[test]
    fn unknown_name_lists_the_known_ones() {
        let err = mutex("paxos").err().unwrap().to_string();
        assert!(err.contains("paxos") && err.contains("centralized"), "{err}");
    }

    #[test]
    fn garbage_bytes_are_an_error_not_a_panic() {
        let cfg = AlgoConfig::for_test(1, 3);
        for info in MUTEXES {
            let mut m = (info.build)(&cfg);
            let mut out = Actions::new();
            assert!(m.handle_message(Time::ZERO, NodeId(2), &[0xff; 7], &mut out).is_err());
        }
        for info in ELECTIONS {
            let mut e = (info.build)(&cfg);
            let mut out = Actions::new();
            assert!(e.handle_message(Time::ZERO, NodeId(2), &[0xff; 7], &mut out).is_err());
        }
    }
}
