//! The hub's client connections over all its listeners (AMQP over TCP, TLS and WebSockets, and
//! Kafka): how many it holds, and how a listener takes the next one.
//!
//! At most `--max-connections` at once ([`Slots`]). A connection that has not authenticated yet
//! — no valid token put on AMQP's `$cbs` node, no SASL exchange completed on Kafka — yields its
//! slot to a newer connection when every slot is taken: the oldest such connection is closed.
//! Sockets that connect and then stall (each closed at `--open-timeout` anyway) therefore cannot
//! lock other clients out meanwhile: only connections that proved a key hold a slot for good.
//!
//! What unauthenticated connections hold, over every listener, is bounded too: each buffer that
//! a client can fill before it authenticates (an unfinished AMQP frame, a WebSocket message, a
//! Kafka request before SASL) is charged to one budget through its [`Meter`], and when a
//! charge passes `--max-unauthenticated-bytes` the oldest unauthenticated connections are
//! closed until it fits (the charging one among them, when it is the oldest). What a closed
//! connection held is freed with it. Authenticated connections are charged nothing: each is
//! held to its own limits (frame size, unfinished deliveries) by the key it proved.
//!
//! [`accept`] takes the next connection and rides out what `accept()` fails with under load —
//! no file descriptor left, a connection reset before it was taken — never ending the listener:
//! out of descriptors, it closes the oldest unauthenticated connection to free one, else it
//! pauses with a warning. [`raise_open_files_limit`] gives the process the most descriptors its
//! hard limit allows.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Every connection slot of a hub, and the budget of what its unauthenticated connections hold.
pub struct Slots {
    max: usize,
    max_unauthenticated_bytes: usize,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    taken: usize,
    next_id: u64,
    /// Connections that have not authenticated, oldest first, each with what closes it.
    unauthenticated: VecDeque<(u64, watch::Sender<Eviction>)>,
    /// What each unauthenticated connection's buffers hold (by its id), and their sum.
    held: HashMap<u64, usize>,
    held_total: usize,
}

impl State {
    /// Tells the oldest unauthenticated connection to close (`how`), its buffers no longer
    /// counted; its id.
    fn close_oldest(&mut self, how: Eviction) -> Option<u64> {
        let (id, close) = self.unauthenticated.pop_front()?;
        close.send_replace(how);
        self.forget_held(id);
        Some(id)
    }

    fn forget_held(&mut self, id: u64) {
        if let Some(held) = self.held.remove(&id) {
            self.held_total -= held;
        }
    }
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
    /// Set once the connection authenticated: its meters charge nothing from then on.
    authenticated: Arc<AtomicBool>,
}

/// One buffer's share of the unauthenticated connections' budget ([`Slot::meter`]): the buffer
/// says what it holds with [`Meter::hold`] before it grows. Dropped, it holds nothing.
pub struct Meter {
    slots: Arc<Slots>,
    id: u64,
    authenticated: Arc<AtomicBool>,
    charged: usize,
}

/// The unauthenticated connections' budget is spent and this connection, the oldest, is closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "the hub's unauthenticated connections hold as much as --max-unauthenticated-bytes allows, and this one is the oldest"
)]
pub struct OverBudget;

/// How a slot was had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    /// A free one.
    Free,
    /// The oldest unauthenticated connection's, which is being closed.
    FromUnauthenticated,
}

impl Slots {
    /// `max` connections, whose unauthenticated ones hold `max_unauthenticated_bytes` together.
    pub fn new(max: usize, max_unauthenticated_bytes: usize) -> Arc<Self> {
        Arc::new(Slots {
            max,
            max_unauthenticated_bytes,
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
            // Its count passes to the new connection (see `Drop`).
            state.close_oldest(Eviction::HandedOver)?;
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
                authenticated: Arc::new(AtomicBool::new(false)),
            },
            taken,
        ))
    }

    /// Tells the oldest unauthenticated connection to close, to free what it holds (its file
    /// descriptor); `false` when every connection has authenticated.
    pub fn close_oldest_unauthenticated(&self) -> bool {
        let mut state = self.state.lock().expect("slots lock");
        state.close_oldest(Eviction::Closed).is_some()
    }

    /// Connections counted now.
    pub fn taken(&self) -> usize {
        self.state.lock().expect("slots lock").taken
    }

    /// What unauthenticated connections' buffers hold now, together.
    pub fn unauthenticated_bytes(&self) -> usize {
        self.state.lock().expect("slots lock").held_total
    }
}

impl Slot {
    /// The connection authenticated: it keeps its slot until it ends, and what its buffers
    /// hold is no longer charged.
    pub fn authenticated(&self) {
        self.authenticated.store(true, Ordering::Release);
        let mut state = self.slots.state.lock().expect("slots lock");
        state.unauthenticated.retain(|(id, _)| *id != self.id);
        state.forget_held(self.id);
    }

    /// A meter for one of the connection's buffers.
    pub fn meter(&self) -> Meter {
        Meter {
            slots: self.slots.clone(),
            id: self.id,
            authenticated: self.authenticated.clone(),
            charged: 0,
        }
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

impl Meter {
    /// The buffer holds `bytes` now (say so before it grows). Past the budget, the oldest
    /// unauthenticated connections are closed until it fits: `Err` when this connection is one
    /// of them, and its buffer should be given up at once. Free once the connection has
    /// authenticated.
    pub fn hold(&mut self, bytes: usize) -> Result<(), OverBudget> {
        if self.authenticated.load(Ordering::Acquire) {
            self.charged = 0;
            return Ok(());
        }
        let mut state = self.slots.state.lock().expect("slots lock");
        let Some(held) = state.held_entry(self.id) else {
            // Authenticated or told to close meanwhile: no longer counted.
            self.charged = 0;
            return Ok(());
        };
        *held = *held - self.charged + bytes;
        state.held_total = state.held_total - self.charged + bytes;
        self.charged = bytes;
        let mut closed_self = false;
        while state.held_total > self.slots.max_unauthenticated_bytes {
            match state.close_oldest(Eviction::Closed) {
                Some(id) => closed_self |= id == self.id,
                None => break,
            }
        }
        if closed_self {
            self.charged = 0;
            Err(OverBudget)
        } else {
            Ok(())
        }
    }

    /// Whether the connection has authenticated (its buffers may grow to their own limits).
    pub fn is_authenticated(&self) -> bool {
        self.authenticated.load(Ordering::Acquire)
    }
}

impl State {
    /// An unauthenticated connection's held bytes, made on its first charge.
    fn held_entry(&mut self, id: u64) -> Option<&mut usize> {
        if !self.held.contains_key(&id)
            && !self
                .unauthenticated
                .iter()
                .any(|(waiting, _)| *waiting == id)
        {
            return None;
        }
        Some(self.held.entry(id).or_default())
    }
}

impl Drop for Meter {
    fn drop(&mut self) {
        if self.charged > 0 {
            let _ = self.hold(0);
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut state = self.slots.state.lock().expect("slots lock");
        state.unauthenticated.retain(|(id, _)| *id != self.id);
        state.forget_held(self.id);
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
        let slots = Slots::new(2, 1 << 20);
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
        let slots = Slots::new(3, 1 << 20);
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
        let slots = Slots::new(2, 1 << 20);
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
        let slots = Slots::new(1, 1 << 20);
        let (slot, _) = slots.take().unwrap();
        slot.authenticated();
        assert!(slots.take().is_none());
        assert!(
            tokio::time::timeout(Duration::from_millis(100), slot.evicted())
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn past_the_budget_the_oldest_unauthenticated_connections_close_first() {
        let within = Duration::from_secs(1);
        let slots = Slots::new(10, 1000);
        let (oldest, _) = slots.take().unwrap();
        let (proven, _) = slots.take().unwrap();
        let (middle, _) = slots.take().unwrap();
        let (newest, _) = slots.take().unwrap();
        let (mut a, mut b, mut c) = (oldest.meter(), middle.meter(), newest.meter());
        assert_eq!(a.hold(400), Ok(()));
        assert_eq!(b.hold(400), Ok(()));
        // An authenticated connection is charged nothing, whatever it holds.
        proven.authenticated();
        let mut proven_meter = proven.meter();
        assert_eq!(proven_meter.hold(1 << 30), Ok(()));
        assert_eq!(slots.unauthenticated_bytes(), 800);
        // The newest passes the budget: the oldest is closed, and what it held is not counted.
        assert_eq!(c.hold(400), Ok(()));
        tokio::time::timeout(within, oldest.evicted())
            .await
            .expect("the oldest is told to close");
        assert_eq!(slots.unauthenticated_bytes(), 800);
        assert_eq!(
            a.hold(900),
            Ok(()),
            "a closed connection's buffer is not charged"
        );
        // A buffer that shrinks gives back; a second meter of one connection adds to it.
        assert_eq!(b.hold(100), Ok(()));
        let mut b2 = middle.meter();
        assert_eq!(b2.hold(300), Ok(()));
        assert_eq!(slots.unauthenticated_bytes(), 800);
        // The oldest left asks for more than there is: it is the one closed.
        assert_eq!(b2.hold(950), Err(OverBudget));
        tokio::time::timeout(within, middle.evicted())
            .await
            .unwrap();
        assert_eq!(slots.unauthenticated_bytes(), 400);
        // Authenticating gives its charge back; dropping a meter does too.
        newest.authenticated();
        assert_eq!(slots.unauthenticated_bytes(), 0);
        let (later, _) = slots.take().unwrap();
        let mut d = later.meter();
        d.hold(700).unwrap();
        drop(d);
        assert_eq!(slots.unauthenticated_bytes(), 0);
        drop((oldest, middle, later));
        assert_eq!(slots.taken(), 2);
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
