//! The one language that steers a cluster under test: the steps of a
//! scenario file, the lines typed on `coterie up`'s standard input and the
//! dashboard's buttons all become a [`Step`].
//!
//! In a scenario (TOML) or from the dashboard (JSON) a step is a table:
//! `do = "partition"`, `node = 3` (or `"coordinator"`, `"holder"`,
//! `"waiter"`, `"previous"`), and what the action takes: `peers`, `delay`,
//! `percent`, `every` and `for`. Typed, it is a line: `kill 3`,
//! `stop coordinator`, `delay 2 100ms`, `drop 2 10%`, `partition 3
//! peers=1,2`, `heal`.

use coterie_node::protocol::{FaultCommand, Way};
use serde::Deserialize;
use std::fmt;
use std::time::Duration;

/// The node a step acts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// This node.
    Node(u32),
    /// The node every node in reach follows at that moment.
    Coordinator,
    /// A node inside the critical section at that moment.
    Holder,
    /// A node waiting for the critical section at that moment.
    Waiter,
    /// The node the step before acted on.
    Previous,
}

impl std::str::FromStr for Target {
    type Err = String;
    fn from_str(word: &str) -> Result<Target, String> {
        match word {
            "coordinator" | "leader" => Ok(Target::Coordinator),
            "holder" => Ok(Target::Holder),
            "waiter" => Ok(Target::Waiter),
            "previous" => Ok(Target::Previous),
            _ => match word.parse::<u32>() {
                Ok(0) | Err(_) => Err(format!(
                    "{word:?} is no node: a node id, coordinator, holder, waiter or previous"
                )),
                Ok(id) => Ok(Target::Node(id)),
            },
        }
    }
}

impl<'de> Deserialize<'de> for Target {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Target, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Id(u32),
            Word(String),
        }
        let word = match Raw::deserialize(d)? {
            Raw::Id(id) => id.to_string(),
            Raw::Word(w) => w,
        };
        word.parse().map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Node(id) => write!(f, "n{id}"),
            Target::Coordinator => f.write_str("the coordinator"),
            Target::Holder => f.write_str("a holder"),
            Target::Waiter => f.write_str("a waiter"),
            Target::Previous => f.write_str("the same node"),
        }
    }
}

/// A reset repeated in the background while the next steps go on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Repeat {
    pub every: Duration,
    pub lasting: Duration,
}

/// What a step does. The first four act on the node's process (so only a
/// command that owns the processes, or docker, can carry them out); the
/// rest are faults inside the node's agent, sent to its client port (see
/// `coterie fault`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// SIGKILL (docker kill): a crash; connections close, peers notice.
    Kill,
    /// Start the node again after a kill.
    Restart,
    /// SIGSTOP (docker pause): a hang only heartbeats reveal.
    Stop,
    /// SIGCONT (docker unpause).
    Resume,
    /// The agent stops reading and sending, its sockets open.
    Pause,
    /// The agent goes on.
    Unpause,
    /// The node's links to `peers` (every peer when empty) carry nothing,
    /// or nothing one `way`.
    Partition { peers: Vec<u32>, way: Way },
    /// What the node sends to `peers` waits `by` first.
    Delay { peers: Vec<u32>, by: Duration },
    /// The node loses `percent` of what it sends to `peers`.
    Drop { peers: Vec<u32>, percent: u8 },
    /// The node's connections to `peers` break now (and again, with
    /// `repeat`).
    Reset { peers: Vec<u32>, repeat: Option<Repeat> },
    /// Every fault inside the node (every node's, without one) is lifted.
    Heal,
}

impl Action {
    /// Whether it acts on the process rather than inside the agent.
    pub fn on_process(&self) -> bool {
        matches!(self, Action::Kill | Action::Restart | Action::Stop | Action::Resume)
    }

    /// Whether it takes the node out of reach: the others should elect
    /// without it if it coordinated.
    pub fn takes_away(&self) -> bool {
        matches!(self, Action::Kill | Action::Stop | Action::Pause | Action::Partition { .. })
    }

    /// Whether it is a loss after which the lock delay applies.
    pub fn loses_holder(&self) -> bool {
        matches!(self, Action::Kill | Action::Stop)
    }

    /// The fault command to send to the node's client port, for the
    /// agent's faults.
    pub fn fault_command(&self) -> Option<FaultCommand> {
        Some(match self {
            Action::Pause => FaultCommand::Pause,
            Action::Unpause => FaultCommand::Resume,
            Action::Partition { peers, way } => {
                FaultCommand::Partition { peers: peers.clone(), way: *way }
            }
            Action::Delay { peers, by } => {
                FaultCommand::Delay { peers: peers.clone(), ms: by.as_millis() as u64 }
            }
            Action::Drop { peers, percent } => {
                FaultCommand::Drop { peers: peers.clone(), percent: *percent }
            }
            Action::Reset { peers, .. } => FaultCommand::Reset { peers: peers.clone() },
            Action::Heal => FaultCommand::Heal,
            Action::Kill | Action::Restart | Action::Stop | Action::Resume => return None,
        })
    }

    /// What it does to node `id`, in words, for a timeline.
    pub fn describe(&self, id: Option<u32>) -> String {
        let n = id.map_or_else(|| "every node".to_string(), |id| format!("n{id}"));
        match self {
            Action::Kill => format!("kill {n} (SIGKILL)"),
            Action::Restart => format!("restart {n}"),
            Action::Stop => format!("stop {n} (SIGSTOP)"),
            Action::Resume => format!("resume {n} (SIGCONT)"),
            Action::Pause => format!("pause {n}'s agent"),
            Action::Unpause => format!("unpause {n}'s agent"),
            Action::Partition { peers, way: Way::Both } => {
                format!("cut {n} off from {}", peers_text(peers))
            }
            Action::Partition { peers, way: Way::Inbound } => {
                format!("{n} hears nothing from {}", peers_text(peers))
            }
            Action::Partition { peers, way: Way::Outbound } => {
                format!("{} hear nothing from {n}", peers_text(peers))
            }
            Action::Delay { peers, by } => {
                format!("{n} delays what it sends to {} by {by:?}", peers_text(peers))
            }
            Action::Drop { peers, percent } => {
                format!("{n} drops {percent}% of what it sends to {}", peers_text(peers))
            }
            Action::Reset { peers, repeat: None } => {
                format!("reset {n}'s connections to {}", peers_text(peers))
            }
            Action::Reset { peers, repeat: Some(r) } => format!(
                "reset {n}'s connections to {} every {} for {}",
                peers_text(peers),
                humantime::format_duration(r.every),
                humantime::format_duration(r.lasting)
            ),
            Action::Heal if id.is_none() => "heal every fault".to_string(),
            Action::Heal => format!("heal {n}'s faults"),
        }
    }
}

fn peers_text(peers: &[u32]) -> String {
    if peers.is_empty() {
        "every peer".into()
    } else {
        peers.iter().map(|p| format!("n{p}")).collect::<Vec<_>>().join(", ")
    }
}

/// An action and the node it is for; `node` is `None` only for a heal of
/// every node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub action: Action,
    pub node: Option<Target>,
}

/// A step as written in a scenario file (with `at`) or sent by the
/// dashboard (without).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepText {
    /// When, from the start of the workload (scenarios only).
    #[serde(default, with = "humantime_serde::option")]
    pub at: Option<Duration>,
    /// kill | restart | stop | resume | pause | unpause | partition |
    /// delay | drop | reset | heal
    #[serde(rename = "do")]
    pub action: String,
    #[serde(default)]
    pub node: Option<Target>,
    /// partition / delay / drop / reset: the peers concerned (default:
    /// all).
    #[serde(default)]
    pub peers: Vec<u32>,
    /// partition: "both" (the default), "inbound" (the node hears
    /// nothing from the peers) or "outbound" (they hear nothing from it).
    #[serde(default)]
    pub way: Option<Way>,
    /// delay: how long (default 50ms).
    #[serde(default, with = "humantime_serde::option")]
    pub delay: Option<Duration>,
    /// drop: percent of messages lost (default 10).
    #[serde(default)]
    pub percent: Option<u8>,
    /// reset: again this often (with `for`).
    #[serde(default, with = "humantime_serde::option")]
    pub every: Option<Duration>,
    /// reset: for this long (with `every`).
    #[serde(default, rename = "for", with = "humantime_serde::option")]
    pub lasting: Option<Duration>,
    /// Wait, after it, until the nodes in reach agree on a coordinator at
    /// a newer epoch, and time that (it is done anyway after a step that
    /// takes the coordinator away).
    #[serde(default)]
    pub settle: bool,
}

/// The actions, as words.
pub const ACTIONS: [&str; 11] = [
    "kill",
    "restart",
    "stop",
    "resume",
    "pause",
    "unpause",
    "partition",
    "delay",
    "drop",
    "reset",
    "heal",
];

impl StepText {
    /// The step it describes, or why it describes none.
    pub fn step(&self) -> Result<Step, String> {
        let peers = self.peers.clone();
        if self.every.is_some() != self.lasting.is_some()
            || (self.every.is_some() && self.action != "reset")
        {
            return Err("`every` and `for` go together, and only with reset".into());
        }
        if self.delay.is_some() && self.action != "delay" {
            return Err("`delay` goes only with do = \"delay\"".into());
        }
        if self.percent.is_some() && self.action != "drop" {
            return Err("`percent` goes only with do = \"drop\"".into());
        }
        if self.way.is_some() && self.action != "partition" {
            return Err("`way` goes only with do = \"partition\"".into());
        }
        let action = match self.action.as_str() {
            "kill" => Action::Kill,
            "restart" | "start" => Action::Restart,
            "stop" => Action::Stop,
            "resume" | "cont" => Action::Resume,
            "pause" => Action::Pause,
            "unpause" => Action::Unpause,
            "partition" => Action::Partition { peers, way: self.way.unwrap_or_default() },
            "delay" => Action::Delay { peers, by: self.delay.unwrap_or(Duration::from_millis(50)) },
            "drop" => match self.percent.unwrap_or(10) {
                percent @ 0..=100 => Action::Drop { peers, percent },
                p => return Err(format!("drop {p}%: a percentage is at most 100")),
            },
            "reset" => {
                let repeat = match (self.every, self.lasting) {
                    (Some(every), Some(lasting)) => Some(Repeat { every, lasting }),
                    _ => None,
                };
                Action::Reset { peers, repeat }
            }
            "heal" => Action::Heal,
            other => {
                return Err(format!("unknown action {other:?}; known: {}", ACTIONS.join(", ")))
            }
        };
        if self.node.is_none() && action != Action::Heal {
            return Err(format!("{} names no node", self.action));
        }
        Ok(Step { action, node: self.node })
    }
}

impl std::str::FromStr for Step {
    type Err = String;

    /// A typed line: `ACTION [NODE] [DURATION] [PERCENT%] [peers=1,2]`.
    fn from_str(line: &str) -> Result<Step, String> {
        let mut words = line.split_whitespace();
        let Some(action) = words.next() else { return Err("an empty line".into()) };
        let mut text = StepText {
            at: None,
            action: action.to_string(),
            node: None,
            peers: Vec::new(),
            way: None,
            delay: None,
            percent: None,
            every: None,
            lasting: None,
            settle: false,
        };
        for word in words {
            if let Some(way) = word.strip_prefix("way=") {
                text.way = Some(match way {
                    "both" => Way::Both,
                    "inbound" => Way::Inbound,
                    "outbound" => Way::Outbound,
                    _ => return Err(format!("{word:?}: a way is both, inbound or outbound")),
                });
            } else if let Some(list) = word.strip_prefix("peers=") {
                text.peers = list
                    .split(',')
                    .map(|p| p.parse::<u32>().map_err(|_| format!("{p:?} is no node id")))
                    .collect::<Result<_, _>>()?;
            } else if let Some(p) = word.strip_suffix('%') {
                text.percent = Some(p.parse().map_err(|_| format!("{word:?} is no percentage"))?);
            } else if text.node.is_none() {
                text.node = Some(word.parse()?);
            } else if text.action == "delay" {
                text.delay = Some(super::super::common::parse_duration(word)?);
            } else {
                return Err(format!("{word:?}: what is it for?"));
            }
        }
        text.step()
    }
}

/// What the typed language takes, for a help line.
pub const HELP: &str = "kill N, restart N, stop N (hang), resume N, pause N / unpause N (agent), \
partition N [peers=1,2] [way=inbound|outbound], delay N 100ms, drop N 10%, reset N, heal [N]; \
N is an id, coordinator, holder, waiter or previous";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_lines_parse_or_explain() {
        let step = |line: &str| line.parse::<Step>();
        assert_eq!(step("kill 5"), Ok(Step { action: Action::Kill, node: Some(Target::Node(5)) }));
        assert_eq!(step(" cont 2 ").map(|s| s.action), Ok(Action::Resume));
        assert_eq!(step("start 5").map(|s| s.action), Ok(Action::Restart));
        assert_eq!(step("stop coordinator").map(|s| s.node), Ok(Some(Target::Coordinator)));
        assert_eq!(
            step("delay 2 100ms peers=1,3").map(|s| s.action),
            Ok(Action::Delay { peers: vec![1, 3], by: Duration::from_millis(100) })
        );
        assert_eq!(
            step("drop 2 25%").map(|s| s.action),
            Ok(Action::Drop { peers: vec![], percent: 25 })
        );
        assert_eq!(
            step("partition 3 way=inbound").map(|s| s.action),
            Ok(Action::Partition { peers: vec![], way: Way::Inbound })
        );
        assert!(step("partition 3 way=sideways").unwrap_err().contains("a way is"));
        assert_eq!(step("heal"), Ok(Step { action: Action::Heal, node: None }));
        assert!(step("kill").unwrap_err().contains("names no node"));
        assert!(step("kill 0").unwrap_err().contains("is no node"));
        assert!(step("nuke 3").unwrap_err().contains("unknown action"));
        assert!(step("drop 2 250%").unwrap_err().contains("at most 100"));
        assert!(step("kill 2 3").unwrap_err().contains("what is it for"));
    }

    #[test]
    fn a_table_step_checks_what_goes_with_what() {
        let text = |toml: &str| toml::from_str::<StepText>(toml).map_err(|e| e.to_string());
        let ok =
            text("at = \"1s\"\ndo = \"reset\"\nnode = \"holder\"\nevery = \"10ms\"\nfor = \"1s\"")
                .unwrap();
        assert_eq!(ok.node, Some(Target::Holder));
        assert!(matches!(ok.step().unwrap().action, Action::Reset { repeat: Some(_), .. }));
        let bad = text("do = \"kill\"\nnode = 2\nevery = \"10ms\"").unwrap();
        assert!(bad.step().unwrap_err().contains("go together"));
        assert!(text("do = \"kill\"\nnode = \"king\"").unwrap_err().contains("is no node"));
        assert!(text("do = \"kill\"\nnode = 2\nwhen = 3").unwrap_err().contains("unknown field"));
    }
}
