//! What a node tells its watchers (`coterie watch`, the dashboard, the
//! diagrams): one broadcast of [`WatchEvent`]s, which the agent and the
//! application both feed, and the count of watchers that asked for every
//! message, so that a node nobody watches does no work for them.

use crate::protocol::{unix_us, NodeEvent, WatchEvent};
use coterie_core::{NodeId, Status};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use tokio::sync::broadcast;

/// Events a slow watcher may fall behind by before it is told it missed
/// some.
const BACKLOG: usize = 4096;

/// The node's event stream; see the module documentation.
pub(crate) struct Events {
    node: NodeId,
    tx: broadcast::Sender<WatchEvent>,
    /// Watchers that asked for every message sent and delivered.
    messages: AtomicUsize,
    /// Those of them that asked for heartbeats too.
    heartbeats: AtomicUsize,
}

impl Events {
    /// No watcher yet, for node `node`.
    pub(crate) fn new(node: NodeId) -> Events {
        Events {
            node,
            tx: broadcast::channel(BACKLOG).0,
            messages: AtomicUsize::new(0),
            heartbeats: AtomicUsize::new(0),
        }
    }

    /// Tells the watchers, if any, that `event` happened now.
    pub(crate) fn emit(&self, event: NodeEvent) {
        if self.tx.receiver_count() > 0 {
            let _ = self.tx.send(WatchEvent { node: self.node.0, unix_us: unix_us(), event });
        }
    }

    /// A stream of what happens from now on.
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<WatchEvent> {
        self.tx.subscribe()
    }

    /// The first event of every stream: where the node stands (`status`)
    /// as the watch begins.
    pub(crate) fn snapshot(&self, status: Status) -> WatchEvent {
        let event = NodeEvent::Snapshot {
            coordinator: status.coordinator,
            epoch: status.epoch,
            alive: status.alive,
            joined: status.joined,
            view: status.view,
            quorum: status.quorum,
        };
        WatchEvent { node: self.node.0, unix_us: unix_us(), event }
    }

    /// The event that stands for `missed` events a slow watcher skipped.
    pub(crate) fn missed(&self, missed: u64) -> WatchEvent {
        WatchEvent {
            node: self.node.0,
            unix_us: unix_us(),
            event: NodeEvent::Missed { events: missed },
        }
    }

    /// Whether anyone watches every message (or, with `heartbeat`, every
    /// heartbeat too).
    pub(crate) fn watching_messages(&self, heartbeat: bool) -> bool {
        let count = if heartbeat { &self.heartbeats } else { &self.messages };
        count.load(Relaxed) > 0
    }

    /// Counts a watcher of every message (and of heartbeats, if asked) in,
    /// until the returned guard is dropped.
    pub(crate) fn watch_messages(&self, heartbeats: bool) -> MessageWatch<'_> {
        self.messages.fetch_add(1, Relaxed);
        if heartbeats {
            self.heartbeats.fetch_add(1, Relaxed);
        }
        MessageWatch { events: self, heartbeats }
    }
}

/// A watcher of every message, counted in while it lives
/// ([`Events::watch_messages`]).
pub(crate) struct MessageWatch<'a> {
    events: &'a Events,
    heartbeats: bool,
}

impl Drop for MessageWatch<'_> {
    fn drop(&mut self) {
        self.events.messages.fetch_sub(1, Relaxed);
        if self.heartbeats {
            self.events.heartbeats.fetch_sub(1, Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watchers_of_every_message_are_counted_while_they_watch() {
        let events = Events::new(NodeId(1));
        assert!(!events.watching_messages(false));
        {
            let _w = events.watch_messages(false);
            assert!(events.watching_messages(false) && !events.watching_messages(true));
            let _h = events.watch_messages(true);
            assert!(events.watching_messages(true));
        }
        assert!(!events.watching_messages(false) && !events.watching_messages(true));
    }

    #[test]
    fn events_reach_subscribers_only() {
        let events = Events::new(NodeId(3));
        events.emit(NodeEvent::PeerUp { peer: 1 }); // nobody listens: dropped
        let mut rx = events.subscribe();
        events.emit(NodeEvent::PeerDown { peer: 2 });
        let got = rx.try_recv().unwrap();
        assert_eq!((got.node, got.event), (3, NodeEvent::PeerDown { peer: 2 }));
        assert!(rx.try_recv().is_err());
    }
}
