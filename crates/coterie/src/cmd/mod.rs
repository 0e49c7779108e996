//! One module per subcommand.

pub mod bench;
pub mod chart;
pub mod check;
pub mod common;
pub mod dashboard;
pub mod demo;
pub mod elect;
pub mod fault;
pub mod harness;
pub mod help;
pub mod history;
pub mod init;
pub mod lock;
pub mod locks;
pub mod nemesis;
pub mod node;
pub mod recording;
pub mod run;
pub mod sim;
pub mod status;
pub mod timeline;
pub mod up;
pub mod watch;
pub mod watchers;
pub mod witness;
pub mod workload;
