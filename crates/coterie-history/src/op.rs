//! One operation of a history: a JSON object on a line of its own.
//!
//! ```json
//! {"time_ns":5120331,"process":3,"type":"invoke","f":"acquire","name":"default","node":2}
//! {"time_ns":9410210,"process":3,"type":"ok","f":"acquire","name":"default","node":2,"fence":4294967313}
//! {"time_ns":9530114,"process":3,"type":"ok","f":"read","name":"default","register":"fenced","fence":4294967313,"value":41}
//! {"time_ns":9990000,"process":0,"type":"info","f":"fault","detail":"pause n2 for 1.2s"}
//! {"time_ns":9990412,"process":4,"type":"invoke","f":"acquire","name":"config","mode":"read"}
//! ```
//!
//! An acquire may say how it holds the lock (`mode`): `read`, shared with
//! other readers, or `write` (the default, left out), alone.
//!
//! Each client process has at most one operation in flight: its `invoke`
//! is followed by that operation's completion (`ok`, `fail` or `info`) or
//! by nothing, if the process died first. Process 0 is the nemesis (and
//! the driver's final reads of the register); its operations are `info`.

use serde::{Deserialize, Serialize};

/// The process number of the nemesis and of the driver's own operations.
pub const NEMESIS: u32 = 0;

/// How an operation went, as its process saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// The process asked.
    Invoke,
    /// It happened.
    Ok,
    /// It certainly did not happen (a timeout before the grant, a refused
    /// try, a stale fence refused by the register).
    Fail,
    /// Nobody knows whether it happened (the connection broke with the
    /// request in flight), or it is news rather than an answer: the nemesis,
    /// or a held lock found lost.
    Info,
}

/// What was asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Func {
    /// Take the lock `name`.
    Acquire,
    /// Let it go.
    Release,
    /// The lock this process held was lost (its session expired, its node
    /// died): from here on it does not hold it. Always `info`.
    Lose,
    /// Read the register.
    Read,
    /// Write `value` to the register.
    Write,
    /// The nemesis starts a fault (`detail` says which, on whom).
    Fault,
    /// The nemesis ends a fault.
    Heal,
    /// The nemesis is over: every fault healed, every process running.
    /// The checker times recovery from the last of these.
    End,
}

/// How a lock is held: shared with other readers, or alone.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Any number of readers at once, never with a writer.
    Read,
    /// Alone: no other holder, reader or writer.
    #[default]
    Write,
}

impl Mode {
    fn is_write(&self) -> bool {
        *self == Mode::Write
    }
}

/// Which copy of the register.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Register {
    /// Takes every read and write: a resource that knows nothing of fences.
    Plain,
    /// Refuses a write whose fence is below the highest it has seen, and
    /// a read whose fence is below the last write's.
    Fenced,
}

/// One line of a history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Op {
    /// When, in nanoseconds of the host's monotonic clock.
    pub time_ns: u64,
    /// Which client process (0: the nemesis and the driver).
    pub process: u32,
    /// How it went.
    #[serde(rename = "type")]
    pub kind: Kind,
    /// What was asked.
    pub f: Func,
    /// The lock's name.
    #[serde(default = "default_name", skip_serializing_if = "is_default_name")]
    pub name: String,
    /// How an acquire holds the lock (`write`, the default, is left out).
    #[serde(default, skip_serializing_if = "Mode::is_write")]
    pub mode: Mode,
    /// The node the client talks to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<u32>,
    /// The grant's fence (acquire ok), or the fence a register operation
    /// carries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence: Option<u64>,
    /// Which register.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub register: Option<Register>,
    /// The value read or written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<i64>,
    /// Why it failed, or what is unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What the nemesis did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

fn default_name() -> String {
    "default".to_string()
}

fn is_default_name(name: &str) -> bool {
    name == "default"
}

impl Op {
    /// An operation of `process` on the lock `name`, with no detail yet.
    pub fn new(time_ns: u64, process: u32, kind: Kind, f: Func, name: &str) -> Op {
        Op {
            time_ns,
            process,
            kind,
            f,
            name: name.to_string(),
            mode: Mode::Write,
            node: None,
            fence: None,
            register: None,
            value: None,
            error: None,
            detail: None,
        }
    }

    /// The same operation, completed as `kind` at `time_ns`.
    pub fn complete(&self, time_ns: u64, kind: Kind) -> Op {
        Op { time_ns, kind, ..self.clone() }
    }

    /// With the mode.
    pub fn mode(mut self, mode: Mode) -> Op {
        self.mode = mode;
        self
    }

    /// With the node.
    pub fn node(mut self, node: u32) -> Op {
        self.node = Some(node);
        self
    }

    /// With the fence.
    pub fn fence(mut self, fence: u64) -> Op {
        self.fence = Some(fence);
        self
    }

    /// With the register.
    pub fn register(mut self, register: Register) -> Op {
        self.register = Some(register);
        self
    }

    /// With the value.
    pub fn value(mut self, value: i64) -> Op {
        self.value = Some(value);
        self
    }

    /// With the error.
    pub fn error(mut self, error: impl Into<String>) -> Op {
        self.error = Some(error.into());
        self
    }

    /// With the detail.
    pub fn detail(mut self, detail: impl Into<String>) -> Op {
        self.detail = Some(detail.into());
        self
    }

    /// The line as JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("an Op always serializes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_reads_back_as_written() {
        let op = Op::new(7, 3, Kind::Ok, Func::Acquire, "jobs/nightly").node(2).fence(99);
        let line = op.to_json();
        assert_eq!(
            line,
            r#"{"time_ns":7,"process":3,"type":"ok","f":"acquire","name":"jobs/nightly","node":2,"fence":99}"#
        );
        assert_eq!(serde_json::from_str::<Op>(&line).unwrap(), op);
    }

    #[test]
    fn a_read_says_so_and_a_write_is_the_default() {
        let read = Op::new(7, 3, Kind::Invoke, Func::Acquire, "config").mode(Mode::Read);
        assert_eq!(
            read.to_json(),
            r#"{"time_ns":7,"process":3,"type":"invoke","f":"acquire","name":"config","mode":"read"}"#
        );
        assert_eq!(serde_json::from_str::<Op>(&read.to_json()).unwrap(), read);
        let write = Op::new(7, 3, Kind::Invoke, Func::Acquire, "config");
        assert!(!write.to_json().contains("mode"));
        let said: Op = serde_json::from_str(
            r#"{"time_ns":7,"process":3,"type":"invoke","f":"acquire","mode":"write"}"#,
        )
        .unwrap();
        assert_eq!(said.mode, Mode::Write);
    }

    #[test]
    fn the_default_name_may_be_left_out() {
        let op: Op =
            serde_json::from_str(r#"{"time_ns":1,"process":1,"type":"invoke","f":"acquire"}"#)
                .unwrap();
        assert_eq!(op.name, "default");
        assert!(!op.to_json().contains("name"));
    }
}
