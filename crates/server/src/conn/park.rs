//! Idle keepalive connections that are no task. A plain HTTP/1.1 connection that has waited
//! for its next request through two of the worker's ticks (one to two seconds) leaves its task
//! and tokio's reactor: its socket goes into an epoll set of the worker's own, one-shot, and
//! what the connection must remember (its socket, what it knows of itself, its place in the
//! worker's counts, the deadline of its keepalive_timeout) into a slot of a table. When the
//! socket becomes readable, a new task takes the connection up again; at its deadline, or when
//! a graceful stop begins, the slot is dropped and the socket closes.
//!
//! A waiting task holds about 1.4 KB: the task with its future (1,024 bytes), tokio's
//! registration of the socket (256 bytes), the wait for the worker's stop and tick. A parked
//! connection holds its slot (192 bytes) and an entry in the deadlines' ordered set: 0.32-0.38
//! KB in all, measured, against nginx's 0.55 per idle connection. A connection parks only after
//! a second of waiting, so one that carries requests back to back never pays the move out of
//! the reactor and back (four system calls and a task).

use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::rc::Rc;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::sync::Notify;

use super::info::ConnInfo;
use crate::worker::state::{ActiveGuard, Generation, Worker};

/// Events taken from the epoll set per call.
const EVENTS: usize = 64;
/// Slots reserved at once, at most: 12 MB of address space, touched only as used. Past it the
/// table grows as vectors do.
const RESERVED_MOST: usize = 1 << 16;
/// Connections parked before the worker gives their tasks' memory back: collecting costs a
/// visit of the worker's heap, and pages given back are faulted in again when next used.
const RELEASE_AFTER: u32 = 256;

/// Gives the calling thread's free memory back to the system, for the allocator in use.
static RELEASE: OnceLock<fn()> = OnceLock::new();

/// Sets what a worker calls, at its next tick, once [`RELEASE_AFTER`] connections have parked:
/// their tasks' memory is free then, and an allocator that gives free pages back only when it
/// is next busy (mimalloc) would otherwise keep it while the worker waits.
pub fn set_memory_release(release: fn()) {
    let _ = RELEASE.set(release);
}

/// What a parked connection keeps, to be taken up again.
pub(crate) struct Parked {
    pub guard: ActiveGuard,
    pub generation: Arc<Generation>,
    pub held: Held,
}

/// What a connection keeps of its own state while parked: the rest is made again.
pub(crate) struct Held {
    pub stream: std::net::TcpStream,
    pub info: ConnInfo,
    pub refuse: Option<u16>,
    pub nodelay: bool,
    /// Whether the socket is in the epoll set already, disabled since its event came: it
    /// parked before.
    pub watched: bool,
    /// Where its keepalive_timeout ends.
    pub until: Instant,
}

/// A worker's parked connections.
pub(crate) struct Parking {
    /// The epoll set the parked sockets are in; readable when one of them is.
    epoll: AsyncFd<OwnedFd>,
    slots: RefCell<Slots<Parked>>,
    /// Each parked connection's deadline, with its key.
    deadlines: RefCell<BTreeSet<(Instant, u64)>>,
    /// Told when a connection parks with a deadline earlier than all the others'.
    earlier: Notify,
    /// The worker's ticks so far, and their signal to waiting connections.
    ticks: Cell<u64>,
    tick: Notify,
    /// Connections parked since their memory was last given back.
    parked: Cell<u32>,
}

/// A table of parked connections. A key is a slot's index and, in its high half, the slot's
/// generation, so that a key outlived by its connection finds nothing.
struct Slots<T> {
    slots: Vec<Slot<T>>,
    free: Vec<u32>,
}

struct Slot<T> {
    generation: u32,
    parked: Option<T>,
}

impl<T> Default for Slots<T> {
    fn default() -> Self {
        Slots {
            slots: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<T> Slots<T> {
    /// Puts `parked` in a free slot. The table reserves room for `most` at once.
    fn insert(&mut self, parked: T, most: usize) -> u64 {
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                // Room for as many as the worker may hold, reserved, not touched: the table
                // does not double and copy itself, which left the copies' pages resident.
                if self.slots.len() == self.slots.capacity() {
                    let room = most.min(RESERVED_MOST).saturating_sub(self.slots.len());
                    match room {
                        0 => self.slots.reserve(1),
                        room => self.slots.reserve_exact(room),
                    }
                }
                self.slots.push(Slot {
                    generation: 0,
                    parked: None,
                });
                (self.slots.len() - 1) as u32
            }
        };
        let slot = &mut self.slots[index as usize];
        slot.parked = Some(parked);
        (u64::from(slot.generation) << 32) | u64::from(index)
    }

    fn take(&mut self, key: u64) -> Option<T> {
        let index = key as u32;
        let slot = self.slots.get_mut(index as usize)?;
        if u64::from(slot.generation) != key >> 32 {
            return None;
        }
        let parked = slot.parked.take()?;
        slot.generation = slot.generation.wrapping_add(1);
        self.free.push(index);
        Some(parked)
    }
}

impl Parking {
    /// Made within the worker's runtime, whose reactor watches the epoll set.
    pub fn new() -> io::Result<Parking> {
        // SAFETY: epoll_create1 takes no pointers; a descriptor it returns is ours alone.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just opened and is owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: the OwnedFd keeps the descriptor open, the same one, for as long as the
        // AsyncFd that owns it lives.
        let epoll = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }
            .map_err(io::Error::from)?;
        Ok(Parking {
            epoll,
            slots: RefCell::default(),
            deadlines: RefCell::default(),
            earlier: Notify::new(),
            ticks: Cell::new(0),
            tick: Notify::new(),
            parked: Cell::new(0),
        })
    }

    /// The worker's clock, once a second: waiting connections count it, and the memory of
    /// those that parked since the last goes back to the system.
    pub fn tick(&self) {
        self.ticks.set(self.ticks.get() + 1);
        self.tick.notify_waiters();
        if self.parked.get() >= RELEASE_AFTER {
            self.parked.set(0);
            if let Some(release) = RELEASE.get() {
                release();
            }
        }
    }

    pub fn ticks(&self) -> u64 {
        self.ticks.get()
    }

    /// Resolves at the worker's next tick.
    pub async fn ticked(&self) {
        self.tick.notified().await
    }

    /// Parks a connection. It closes instead if the worker is stopping, and goes on waiting in
    /// a task of its own if the socket cannot be watched.
    pub fn park(&self, mut parked: Parked) {
        if *parked.guard.0.stopping.borrow() {
            return;
        }
        let fd = parked.held.stream.as_raw_fd();
        let (until, watched) = (parked.held.until, parked.held.watched);
        parked.held.watched = true;
        let most = parked.generation.worker_connections;
        let key = self.slots.borrow_mut().insert(parked, most);
        if let Err(e) = self.watch(fd, key, watched) {
            let Some(parked) = self.slots.borrow_mut().take(key) else {
                return;
            };
            parked.guard.0.shared.error_log.write(
                crate::Level::Alert,
                Some(parked.held.info.id),
                &format!("epoll_ctl() failed {}", crate::log::os_error(&e)),
            );
            tokio::task::spawn_local(super::resume(parked));
            return;
        }
        self.parked.set(self.parked.get() + 1);
        let mut deadlines = self.deadlines.borrow_mut();
        let earliest = deadlines.first().is_none_or(|&(first, _)| until < first);
        deadlines.insert((until, key));
        if earliest {
            self.earlier.notify_one();
        }
    }

    /// Arms `fd` in the epoll set for one readable event: added, or, for a socket that parked
    /// before (`watched`) and is still in the set, disabled since its event came, armed again.
    fn watch(&self, fd: i32, key: u64, watched: bool) -> io::Result<()> {
        let (op, other) = match watched {
            true => (libc::EPOLL_CTL_MOD, libc::EPOLL_CTL_ADD),
            false => (libc::EPOLL_CTL_ADD, libc::EPOLL_CTL_MOD),
        };
        match self.control(op, fd, key) {
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::EEXIST)) => {
                self.control(other, fd, key)
            }
            done => done,
        }
    }

    fn control(&self, op: i32, fd: i32, key: u64) -> io::Result<()> {
        let mut event = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLONESHOT) as u32,
            u64: key,
        };
        // SAFETY: `event` is a valid epoll_event for the call's duration.
        match unsafe { libc::epoll_ctl(self.epoll.as_raw_fd(), op, fd, &mut event) } {
            0 => Ok(()),
            _ => Err(io::Error::last_os_error()),
        }
    }

    fn take(&self, key: u64) -> Option<Parked> {
        let parked = self.slots.borrow_mut().take(key)?;
        self.deadlines
            .borrow_mut()
            .remove(&(parked.held.until, key));
        Some(parked)
    }

    /// Closes the connections whose keepalive_timeout ended by `now`.
    fn expire(&self, now: Instant) {
        loop {
            let key = match self.deadlines.borrow().first() {
                Some(&(until, key)) if until <= now => key,
                _ => return,
            };
            drop(self.take(key));
        }
    }

    /// Closes every parked connection: the worker stops.
    pub fn clear(&self) {
        self.deadlines.borrow_mut().clear();
        let slots = std::mem::take(&mut *self.slots.borrow_mut());
        drop(slots);
    }

    /// Takes up to `events.len()` of the events the epoll set holds, and says how many. With
    /// no timeout the call is not interrupted, and it has no other way to fail here.
    fn ready(&self, events: &mut [libc::epoll_event]) -> usize {
        let epoll = self.epoll.as_raw_fd();
        // SAFETY: `events` is valid for writes of its length.
        let n = unsafe { libc::epoll_wait(epoll, events.as_mut_ptr(), events.len() as i32, 0) };
        n.max(0) as usize
    }
}

/// Whether bytes wait on a socket whose client closed its side (a request sent before
/// `shutdown`): they are served.
fn sends(stream: &std::net::TcpStream) -> bool {
    let mut byte = 0u8;
    // SAFETY: `byte` is valid for a write of one byte.
    let n = unsafe {
        libc::recv(
            stream.as_raw_fd(),
            (&mut byte as *mut u8).cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    n > 0
}

/// The worker's task for its parked connections: takes each up again when its socket becomes
/// readable, closes it at its deadline, and closes them all when a graceful stop begins.
pub(crate) async fn run(worker: Rc<Worker>) {
    let parking = &worker.parking;
    let mut stopping = worker.stopping.clone();
    let mut events = [libc::epoll_event { events: 0, u64: 0 }; EVENTS];
    loop {
        let first = parking.deadlines.borrow().first().map(|&(until, _)| until);
        let expiry = async {
            match first {
                Some(until) => tokio::time::sleep_until(until.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            _ = stopping.wait_for(|s| *s) => {
                parking.clear();
                return;
            }
            ready = parking.epoll.readable() => {
                let Ok(mut ready) = ready else {
                    // The runtime is shutting down.
                    parking.clear();
                    return;
                };
                let n = parking.ready(&mut events);
                for e in &events[..n] {
                    let (flags, key) = (e.events, e.u64);
                    let Some(parked) = parking.take(key) else { continue };
                    // A client that closed without sending: closed here, without a task.
                    let hup = (libc::EPOLLRDHUP | libc::EPOLLHUP | libc::EPOLLERR) as u32;
                    if flags & hup == 0 || sends(&parked.held.stream) {
                        tokio::task::spawn_local(crate::boxed::boxed(|| super::resume(parked)));
                    }
                }
                if n < EVENTS {
                    ready.clear_ready();
                }
            }
            _ = expiry => parking.expire(Instant::now()),
            _ = parking.earlier.notified() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A parked connection's slot is most of what it holds (BENCHMARKS.md, "Memory per idle
    /// keepalive connection"): 192 bytes, of which `ConnInfo` is 120.
    #[test]
    fn a_parked_connections_slot_stays_small() {
        let size = std::mem::size_of::<Slot<Parked>>();
        assert!(size <= 192, "a slot is {size} bytes");
    }

    #[test]
    fn a_key_outlived_by_its_connection_finds_nothing() {
        let mut slots = Slots::default();
        let a = slots.insert("a", 4);
        assert!(
            slots.slots.capacity() >= 4,
            "room for the most, reserved at once"
        );
        assert_eq!(slots.take(a), Some("a"));
        assert_eq!(slots.take(a), None, "taken already");
        // The same slot again, under another key: the old one finds nothing.
        let b = slots.insert("b", 4);
        assert_eq!(b as u32, a as u32);
        assert_eq!(slots.take(a), None);
        let c = slots.insert("c", 4);
        assert_ne!(c as u32, b as u32);
        assert_eq!(slots.take(b), Some("b"));
        assert_eq!(slots.take(c), Some("c"));
    }
}
