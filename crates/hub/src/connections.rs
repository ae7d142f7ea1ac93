//! The hub's client connections over all its listeners (AMQP over TCP, TLS and WebSockets, and
//! Kafka): how many it holds, and how a listener takes the next one.
//!
//! At most `--max-connections` at once ([`Slots`]). A connection that has not authenticated yet
//! — no valid token put on AMQP's `$cbs` node, no SASL exchange completed on Kafka — yields its
//! slot to a newer connection when every slot is taken: the oldest such connection is closed.
//! Sockets that connect and then stall (each closed at `--open-timeout` anyway) therefore cannot
//! lock other clients out meanwhile: only connections that proved a key hold a slot for good.
//!
//! [`accept`] takes the next connection and rides out what `accept()` fails with under load —
//! no file descriptor left, a connection reset before it was taken — never ending the listener:
//! out of descriptors, it closes the oldest unauthenticated connection to free one, else it
//! pauses with a warning. [`raise_open_files_limit`] gives the process the most descriptors its
//! hard limit allows.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Every connection slot of a hub.
pub struct Slots {
    max: usize,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    taken: usize,
    next_id: u64,
    /// Connections that have not authenticated, oldest first, each with what closes it.
    unauthenticated: VecDeque<(u64, watch::Sender<Eviction>)>,
}

/// Whether a connection was told to close, and what becomes of its slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Eviction {
    No,
    /// Its slot passed to a newer connection, which counts it from now on.
    HandedOver,
    /// Closed to free its file descriptor; its slot is free once it is gone.
    Closed,
}

/// One connection's slot; given back when dropped, however the connection ends.
pub struct Slot {
    slots: Arc<Slots>,
    id: u64,
    evicted: watch::Receiver<Eviction>,
}

/// How a slot was had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    /// A free one.
    Free,
    /// The oldest unauthenticated connection's, which is being closed.
    FromUnauthenticated,
}

impl Slots {
    pub fn new(max: usize) -> Arc<Self> {
        Arc::new(Slots {
            max,
            state: Mutex::new(State::default()),
        })
    }

    /// A slot for a new connection: a free one, else the oldest unauthenticated connection's;
    /// `None` when every slot is held by an authenticated connection.
    pub fn take(self: &Arc<Self>) -> Option<(Slot, Taken)> {
        let mut state = self.state.lock().expect("slots lock");
        let taken = if state.taken < self.max {
            state.taken += 1;
            Taken::Free
        } else {
            let (_, close) = state.unauthenticated.pop_front()?;
            // Its count passes to the new connection (see `Drop`).
            close.send_replace(Eviction::HandedOver);
            Taken::FromUnauthenticated
        };
        let id = state.next_id;
        state.next_id += 1;
        let (close, evicted) = watch::channel(Eviction::No);
        state.unauthenticated.push_back((id, close));
        Some((
            Slot {
                slots: self.clone(),
                id,
                evicted,
            },
            taken,
        ))
    }

    /// Tells the oldest unauthenticated connection to close, to free what it holds (its file
    /// descriptor); `false` when every connection has authenticated.
    pub fn close_oldest_unauthenticated(&self) -> bool {
        let mut state = self.state.lock().expect("slots lock");
        match state.unauthenticated.pop_front() {
            Some((_, close)) => {
                close.send_replace(Eviction::Closed);
                true
            }
            None => false,
        }
    }

    /// Connections counted now.
    pub fn taken(&self) -> usize {
        self.state.lock().expect("slots lock").taken
    }
}

impl Slot {
    /// The connection authenticated: it keeps its slot until it ends.
    pub fn authenticated(&self) {
        let mut state = self.slots.state.lock().expect("slots lock");
        state.unauthenticated.retain(|(id, _)| *id != self.id);
    }

    /// Resolves when the connection must close to make way for another (never, once
    /// authenticated).
    pub fn evicted(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut evicted = self.evicted.clone();
        async move {
            if evicted.wait_for(|e| *e != Eviction::No).await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut state = self.slots.state.lock().expect("slots lock");
        state.unauthenticated.retain(|(id, _)| *id != self.id);
        // A slot handed over is counted by the connection that took it.
        if *self.evicted.borrow() != Eviction::HandedOver {
            state.taken -= 1;
        }
    }
}

/// The next connection on `listener`. When `accept()` fails for want of descriptors (EMFILE,
/// ENFILE), the oldest unauthenticated connection is closed to free one and the listener tries
/// again at once; with none to close, or for another error (no buffers, a connection aborted
/// before it was taken), it logs and tries again after a pause (50 ms, doubling to 1 s while
/// errors continue), as axum's server does. The listener stays, whatever the error.
pub async fn accept(listener: &TcpListener, what: &str, slots: &Slots) -> (TcpStream, SocketAddr) {
    let mut pause = Duration::from_millis(50);
    loop {
        match listener.accept().await {
            Ok(accepted) => return accepted,
            Err(error) => {
                let out_of_descriptors =
                    matches!(error.raw_os_error(), Some(libc::EMFILE | libc::ENFILE));
                if out_of_descriptors && slots.close_oldest_unauthenticated() {
                    tracing::info!(listener = what, %error, "out of file descriptors: the oldest unauthenticated connection is closed to free one");
                    // Its task closes its socket when it next runs.
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                }
                tracing::warn!(listener = what, %error, ?pause, "accepting a connection failed; the listener pauses and goes on");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
        }
    }
}

/// Raises the soft limit on open files to the hard limit (a hub serves a socket per client and
/// a file per open segment); returns the limit now in force. Best effort: where the limit cannot
/// be read or set, it stays as it was.
pub fn raise_open_files_limit() -> Option<u64> {
    #[cfg(unix)]
    {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit and setrlimit write and read the struct given, nothing else.
        unsafe {
            if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
                return None;
            }
            if limit.rlim_cur < limit.rlim_max {
                let raised = libc::rlimit {
                    rlim_cur: limit.rlim_max,
                    rlim_max: limit.rlim_max,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                    limit = raised;
                }
            }
        }
        Some(limit.rlim_cur)
    }
    #[cfg(not(unix))]
    None
}

/// One counted thing (a link of a connection): the count goes down when it is dropped, however
/// its task ends.
pub(crate) struct Counted(Arc<AtomicUsize>);

impl Counted {
    /// Counts one more, unless `limit` are already counted.
    pub(crate) fn take(counter: &Arc<AtomicUsize>, limit: usize) -> Option<Counted> {
        counter
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < limit).then_some(n + 1)
            })
            .ok()
            .map(|_| Counted(counter.clone()))
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_counted_and_given_back() {
        let slots = Slots::new(2);
        let (a, how) = slots.take().unwrap();
        assert_eq!(how, Taken::Free);
        let (b, _) = slots.take().unwrap();
        a.authenticated();
        b.authenticated();
        assert!(
            slots.take().is_none(),
            "two authenticated connections hold both"
        );
        assert_eq!(slots.taken(), 2);
        drop(a);
        assert_eq!(slots.taken(), 1);
        let (c, how) = slots.take().unwrap();
        assert_eq!(how, Taken::Free);
        drop((b, c));
        assert_eq!(slots.taken(), 0);
    }

    #[tokio::test]
    async fn a_full_hub_closes_its_oldest_unauthenticated_connection_for_a_new_one() {
        let within = Duration::from_secs(1);
        let slots = Slots::new(3);
        let (oldest, _) = slots.take().unwrap();
        let (proven, _) = slots.take().unwrap();
        proven.authenticated();
        let (younger, _) = slots.take().unwrap();

        let (newest, how) = slots.take().unwrap();
        assert_eq!(how, Taken::FromUnauthenticated);
        tokio::time::timeout(within, oldest.evicted())
            .await
            .expect("the oldest unauthenticated connection is told to close");
        // Its slot went on to the newest: closing it counts nothing down.
        drop(oldest);
        assert_eq!(slots.taken(), 3);

        // Next in line is the younger one, never the authenticated one.
        let (fourth, how) = slots.take().unwrap();
        assert_eq!(how, Taken::FromUnauthenticated);
        tokio::time::timeout(within, younger.evicted())
            .await
            .unwrap();
        drop(younger);
        newest.authenticated();
        let (fifth, _) = slots.take().unwrap();
        tokio::time::timeout(within, fourth.evicted())
            .await
            .unwrap();
        drop(fourth);
        fifth.authenticated();
        assert!(
            slots.take().is_none(),
            "three authenticated connections hold the three slots"
        );
        assert_eq!(slots.taken(), 3);
        drop(proven);
        assert_eq!(slots.taken(), 2);
        drop((newest, fifth));
        assert_eq!(slots.taken(), 0);
    }

    #[tokio::test]
    async fn a_connection_closed_to_free_its_descriptor_frees_its_slot() {
        let slots = Slots::new(2);
        let (proven, _) = slots.take().unwrap();
        proven.authenticated();
        let (waiting, _) = slots.take().unwrap();
        assert!(slots.close_oldest_unauthenticated());
        tokio::time::timeout(Duration::from_secs(1), waiting.evicted())
            .await
            .unwrap();
        drop(waiting);
        assert_eq!(slots.taken(), 1);
        assert!(
            !slots.close_oldest_unauthenticated(),
            "only an authenticated one is left"
        );
    }

    #[tokio::test]
    async fn an_authenticated_connection_is_never_told_to_close() {
        let slots = Slots::new(1);
        let (slot, _) = slots.take().unwrap();
        slot.authenticated();
        assert!(slots.take().is_none());
        assert!(
            tokio::time::timeout(Duration::from_millis(100), slot.evicted())
                .await
                .is_err()
        );
    }

    #[test]
    fn the_open_files_limit_is_raised_to_the_hard_limit() {
        let limit = raise_open_files_limit().expect("readable on Linux");
        let mut now = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: reading this process's limit into a local struct.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut now) }, 0);
        assert_eq!(now.rlim_cur, now.rlim_max);
        assert_eq!(limit, now.rlim_cur);
    }
}
