//! What every task of a worker reaches: the worker's own state behind an `Rc`, the state all
//! workers share, and the configuration generation a connection started with.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::{watch, Notify};

use crate::conf::HttpConf;
use crate::files::FileCache;
use crate::log::ErrorLog;
use crate::module::Opened;

/// State shared by all workers: the error log, the connection counter behind `*N`, and
/// every worker's `stub_status` counters.
pub(crate) struct Shared {
    pub error_log: Arc<ErrorLog>,
    connections: AtomicU64,
    pub stats: crate::stats::Registry,
}

impl Shared {
    pub fn new(error_log: ErrorLog) -> Shared {
        Shared {
            error_log: Arc::new(error_log),
            connections: AtomicU64::new(0),
            stats: crate::stats::Registry::default(),
        }
    }

    pub fn next_connection(&self) -> u64 {
        self.connections.fetch_add(1, Ordering::Relaxed) + 1
    }
}

/// What a connection needs of the configuration; a connection keeps the one it started with.
pub(crate) struct Generation {
    pub http: Arc<HttpConf>,
    pub worker_connections: usize,
    /// What the server opened for each module of `http` (its access log files), in the
    /// registry's order.
    pub opened: Vec<Opened>,
}

/// Per-worker state, reached from every task of the worker through an `Rc`.
pub(crate) struct Worker {
    pub shared: Arc<Shared>,
    pub generation: RefCell<Arc<Generation>>,
    pub files: RefCell<FileCache>,
    pub dates: RefCell<portcullis_http::DateCache>,
    /// Open connections, for worker_connections and for a graceful stop.
    pub active: Cell<usize>,
    /// This worker's `stub_status` counters, one of `shared.stats`.
    pub counters: Arc<crate::stats::Counters>,
    /// Set when a graceful stop begins: idle keepalive connections close.
    pub stopping: watch::Receiver<bool>,
    /// Woken when the last connection of a stopping worker closes.
    pub drained: Notify,
    /// Balancer state and keepalive pools of the upstream groups in use.
    pub upstreams: RefCell<crate::upstream::WorkerUpstreams>,
    /// Host names of `proxy_pass` URLs made of variables, as resolved so far.
    pub resolvers: RefCell<crate::upstream::resolve::WorkerResolvers>,
    /// Each module's state in this worker, in the registry's order.
    pub modules: Vec<Box<dyn std::any::Any>>,
    /// Idle keepalive connections that left their tasks.
    pub parking: crate::conn::park::Parking,
}

/// Counts a connection as open for as long as it lives, for the worker and for
/// `stub_status`.
pub(crate) struct ActiveGuard(pub Rc<Worker>, pub crate::stats::Connection);

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        let n = self.0.active.get() - 1;
        self.0.active.set(n);
        if n == 0 {
            self.0.drained.notify_one();
        }
    }
}
