//! Telling a node's tasks to stop, as tokio-rs/mini-redis does: the node
//! holds the sending side and flips it once; every task holds a
//! [`Shutdown`] that resolves from then on, and remembers that it did.

use tokio::sync::watch;

/// A task's view of the node's stop signal. Cheap to clone: one per task.
#[derive(Clone)]
pub(crate) struct Shutdown {
    told: bool,
    signal: watch::Receiver<bool>,
}

/// The node's side: dropping it or calling [`Trigger::fire`] stops every
/// task that holds a [`Shutdown`] made from it.
pub(crate) struct Trigger(watch::Sender<bool>);

impl Trigger {
    /// A trigger and the first [`Shutdown`] it reaches.
    pub(crate) fn new() -> (Trigger, Shutdown) {
        let (tx, rx) = watch::channel(false);
        (Trigger(tx), Shutdown { told: false, signal: rx })
    }

    /// Tells every task to stop.
    pub(crate) fn fire(&self) {
        let _ = self.0.send(true);
    }
}

impl Shutdown {
    /// Resolves once the node is told to stop (at once if it was).
    pub(crate) async fn recv(&mut self) {
        if self.told {
            return;
        }
        // An error means the trigger is gone: the node is stopping too.
        let _ = self.signal.wait_for(|stop| *stop).await;
        self.told = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_copy_hears_the_trigger_and_remembers() {
        let (trigger, mut a) = Trigger::new();
        let mut b = a.clone();
        trigger.fire();
        a.recv().await;
        b.recv().await;
        assert!(a.told && b.told);
        drop(trigger);
        a.recv().await; // resolves again at once
    }

    #[tokio::test]
    async fn a_dropped_trigger_stops_everyone() {
        let (trigger, mut a) = Trigger::new();
        drop(trigger);
        a.recv().await;
    }
}
