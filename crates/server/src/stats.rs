//! The connection and request counters nginx keeps for `stub_status` and the
//! `$connections_*` variables: connections accepted, handled and open; requests; and the
//! open connections by what they are doing (reading a request head, writing a response, or
//! waiting for a request).
//!
//! nginx keeps them in shared memory, one set for all workers, added to with atomic
//! instructions. Here each worker has its own set, written by its thread alone (a load and a
//! store, no locked instruction, no cache line bouncing between cores), and a reader adds up
//! every worker's. The sets live as long as the server: a reload keeps the counts, and a
//! worker that stops leaves its totals.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// One worker's counters. Only the worker's thread writes them.
#[derive(Default)]
#[repr(align(128))]
pub(crate) struct Counters {
    accepted: AtomicU64,
    handled: AtomicU64,
    requests: AtomicU64,
    active: AtomicU64,
    reading: AtomicU64,
    writing: AtomicU64,
    waiting: AtomicU64,
    ssl_handshakes: AtomicU64,
    ssl_failed: AtomicU64,
    ssl_reuses: AtomicU64,
}

/// Adds `by` (which may be `u64::MAX`, that is -1) to a counter only this thread writes.
#[inline]
fn bump(c: &AtomicU64, by: u64) {
    c.store(
        c.load(Ordering::Relaxed).wrapping_add(by),
        Ordering::Relaxed,
    );
}

const LESS: u64 = u64::MAX;

/// The sum of every worker's counters, as `stub_status` shows them.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Totals {
    pub accepted: u64,
    pub handled: u64,
    pub requests: u64,
    pub active: u64,
    pub reading: u64,
    pub writing: u64,
    pub waiting: u64,
    /// TLS handshakes made, failed, and made by resuming a session (the NGINX Plus API's
    /// `/ssl`).
    pub ssl_handshakes: u64,
    pub ssl_failed: u64,
    pub ssl_reuses: u64,
}

/// Every worker's counters, kept by the server.
#[derive(Default)]
pub(crate) struct Registry {
    workers: Mutex<Vec<Arc<Counters>>>,
}

impl Registry {
    /// A new worker's counters.
    pub fn add(&self) -> Arc<Counters> {
        let c = Arc::new(Counters::default());
        self.lock().push(c.clone());
        c
    }

    pub fn totals(&self) -> Totals {
        let mut t = Totals::default();
        // Read in place: `$connections_*` may ask for this on every log line.
        for w in self.lock().iter().map(|c| c.totals()) {
            t.accepted += w.accepted;
            t.handled += w.handled;
            t.requests += w.requests;
            t.active = t.active.wrapping_add(w.active);
            t.reading = t.reading.wrapping_add(w.reading);
            t.writing = t.writing.wrapping_add(w.writing);
            t.waiting = t.waiting.wrapping_add(w.waiting);
            t.ssl_handshakes += w.ssl_handshakes;
            t.ssl_failed += w.ssl_failed;
            t.ssl_reuses += w.ssl_reuses;
        }
        t
    }

    /// Each worker's counters, in the order the workers started.
    pub fn per_worker(&self) -> Vec<Totals> {
        self.lock().iter().map(|c| c.totals()).collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Arc<Counters>>> {
        // The list is only pushed to: a panic elsewhere cannot leave it half made.
        self.workers.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Counters {
    /// This worker's counters, read now.
    fn totals(&self) -> Totals {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let c = self;
        Totals {
            accepted: get(&c.accepted),
            handled: get(&c.handled),
            requests: get(&c.requests),
            active: get(&c.active),
            reading: get(&c.reading),
            writing: get(&c.writing),
            waiting: get(&c.waiting),
            ssl_handshakes: get(&c.ssl_handshakes),
            ssl_failed: get(&c.ssl_failed),
            ssl_reuses: get(&c.ssl_reuses),
        }
    }

    /// A connection was accepted, and will be refused (`worker_connections` are not
    /// enough): nginx's accepts then exceed its handled.
    pub fn refused(&self) {
        bump(&self.accepted, 1);
    }
}

/// What an open connection is doing, as `stub_status` counts it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum State {
    /// Between requests (or before the first): `Waiting`.
    Waiting,
    /// Reading a request head: `Reading`.
    Reading,
    /// Answering a request: `Writing`.
    Writing,
    /// None of those (a TLS handshake; an HTTP/2 connection with streams open, which
    /// count for themselves).
    Busy,
}

impl State {
    fn counter(self, c: &Counters) -> Option<&AtomicU64> {
        match self {
            State::Waiting => Some(&c.waiting),
            State::Reading => Some(&c.reading),
            State::Writing => Some(&c.writing),
            State::Busy => None,
        }
    }
}

/// An accepted connection, counted as open (and in its state) for as long as it lives.
pub(crate) struct Connection {
    counters: Arc<Counters>,
    state: Cell<State>,
}

impl Connection {
    /// Counts a connection just accepted: accepted, handled and open, waiting for its
    /// first request.
    pub fn accepted(counters: &Arc<Counters>) -> Connection {
        bump(&counters.accepted, 1);
        bump(&counters.handled, 1);
        bump(&counters.active, 1);
        bump(&counters.waiting, 1);
        Connection {
            counters: counters.clone(),
            state: Cell::new(State::Waiting),
        }
    }

    /// The connection goes on to `state`.
    #[inline]
    pub fn set(&self, state: State) {
        let old = self.state.replace(state);
        if old == state {
            return;
        }
        if let Some(c) = old.counter(&self.counters) {
            bump(c, LESS);
        }
        if let Some(c) = state.counter(&self.counters) {
            bump(c, 1);
        }
    }

    /// A TLS handshake ended: made (`Some`, and whether it resumed a session) or failed.
    pub fn handshake(&self, made: Option<bool>) {
        match made {
            Some(reused) => {
                bump(&self.counters.ssl_handshakes, 1);
                if reused {
                    bump(&self.counters.ssl_reuses, 1);
                }
            }
            None => bump(&self.counters.ssl_failed, 1),
        }
    }

    /// The first bytes of a request came: one more request, whose head is being read.
    #[inline]
    pub fn request(&self) {
        bump(&self.counters.requests, 1);
        self.set(State::Reading);
    }

    /// An HTTP/2 stream: one more request, counted as writing until the guard is dropped
    /// (its head came whole).
    pub fn stream(&self) -> Stream {
        bump(&self.counters.requests, 1);
        bump(&self.counters.writing, 1);
        Stream(self.counters.clone())
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.set(State::Busy);
        bump(&self.counters.active, LESS);
    }
}

/// An HTTP/2 stream being answered.
pub(crate) struct Stream(Arc<Counters>);

impl Drop for Stream {
    fn drop(&mut self) {
        bump(&self.0.writing, LESS);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_move_between_counters_and_leave_nothing_behind() {
        let reg = Registry::default();
        let a = reg.add();
        let b = reg.add();
        b.refused();
        let c1 = Connection::accepted(&a);
        let c2 = Connection::accepted(&b);
        c1.request();
        let t = reg.totals();
        assert_eq!((t.accepted, t.handled, t.requests), (3, 2, 1));
        assert_eq!((t.active, t.reading, t.writing, t.waiting), (2, 1, 0, 1));
        c1.set(State::Writing);
        let s = c2.stream();
        c2.set(State::Busy);
        let t = reg.totals();
        assert_eq!((t.requests, t.reading, t.writing, t.waiting), (2, 0, 2, 0));
        drop(s);
        drop(c1);
        let t = reg.totals();
        assert_eq!((t.active, t.reading, t.writing, t.waiting), (1, 0, 0, 0));
        drop(c2);
        let t = reg.totals();
        assert_eq!((t.accepted, t.handled, t.requests), (3, 2, 2));
        assert_eq!((t.active, t.reading, t.writing, t.waiting), (0, 0, 0, 0));
    }
}
