//! Workers: one thread each, with its own current-thread tokio runtime, its own listening
//! sockets (SO_REUSEPORT) or its own handle on a shared one, its own file cache and log
//! buffers. The [`Server`] hands them new configuration generations and stop orders.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use socket2::{Domain, Socket, Type};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::sync::{mpsc, watch, Notify};
use tokio::task::{AbortHandle, LocalSet};

use crate::conf::{Compiled, HttpConf, Listen};
use crate::files::FileCache;
use crate::log::ErrorLog;
use crate::module::{Opened, Running, Start};
use crate::user::Credentials;
use crate::Level;

pub(crate) mod state;
use state::{ActiveGuard, Generation, Shared, Worker};

/// Entries in each worker's open-file cache.
const FILE_CACHE_ENTRIES: usize = 1024;
/// How long a cached file is served without a stat to see whether it changed. A second keeps
/// a replaced file from being served stale for long, and takes a syscall off nearly every
/// request under load.
const FILE_CACHE_VALID: Duration = Duration::from_secs(1);

enum Command {
    Generation {
        generation: Arc<Generation>,
        added: Vec<(SocketAddr, std::net::TcpListener)>,
        removed: Vec<SocketAddr>,
    },
    /// USR1: the access log files opened anew.
    ReopenLogs(Vec<Opened>),
    Stop {
        graceful: bool,
    },
}

struct WorkerHandle {
    thread: JoinHandle<()>,
    commands: mpsc::UnboundedSender<Command>,
}

/// Listening sockets by address: per worker for `reuseport`, else one shared by all.
struct Bound {
    reuseport: bool,
    /// TCP_DEFER_ACCEPT is set on the sockets.
    deferred: bool,
    sockets: Vec<std::net::TcpListener>,
}

/// The running server: worker threads with their listeners.
pub struct Server {
    shared: Arc<Shared>,
    /// Workers and sockets change together, on reload.
    state: Mutex<State>,
}

struct State {
    workers: Vec<WorkerHandle>,
    bound: HashMap<SocketAddr, Bound>,
    /// The configuration the newest workers run, for USR1 and the next reload.
    generation: Arc<Generation>,
    /// Whom the workers serve as; a reload that changes it starts new workers.
    credentials: Option<Arc<Credentials>>,
    /// What the modules run beside the workers for the newest configuration.
    running: Vec<Running>,
}

impl Server {
    /// Binds every listener, starts the workers and returns once they accept.
    pub fn start(compiled: Compiled) -> io::Result<Server> {
        let error_log = ErrorLog::open(&compiled.main.error_log)?;
        let shared = Arc::new(Shared::new(error_log));
        let n = compiled.main.workers;
        let mut bound = HashMap::new();
        for l in &compiled.http.listens {
            bound.insert(l.addr, bind_all(l, l.reuseport, n)?);
        }
        let generation = Arc::new(Generation {
            http: compiled.http.clone(),
            worker_connections: compiled.main.worker_connections,
            opened: open_files(&compiled.http)?,
        });
        let credentials = compiled.main.credentials;
        let running = start_modules(&compiled.http, credentials.as_ref(), &shared);
        let workers = (0..n)
            .map(|id| {
                let listeners = listeners_of(&bound, id)?;
                spawn_worker(id, &shared, &generation, listeners, &credentials)
            })
            .collect::<io::Result<Vec<_>>>()?;
        Ok(Server {
            shared,
            state: Mutex::new(State {
                workers,
                bound,
                generation,
                credentials,
                running,
            }),
        })
    }

    /// Swaps in a new configuration. Everything that can fail (binding new addresses, and
    /// sockets for added workers) is done first: if it fails, nothing changes and the old
    /// configuration keeps serving. Addresses in both keep their sockets, so no connection
    /// waiting in a backlog is lost. Workers beyond a smaller `worker_processes` stop
    /// gracefully; added ones start. A worker cannot take back the privileges it gave up, so
    /// when `user` changes every worker is replaced, as nginx replaces its processes.
    pub fn reload(&self, compiled: Compiled) -> io::Result<()> {
        let mut state = self
            .state
            .lock()
            .map_err(|_| io::Error::other("worker table poisoned"))?;
        let State {
            workers,
            bound,
            generation: current,
            credentials,
            running,
        } = &mut *state;
        // Every file is opened anew, as nginx does on reload: a log moved away is left.
        let opened = open_files(&compiled.http)?;
        let (old_n, new_n) = (workers.len(), compiled.main.workers);
        let mut fresh = HashMap::new();
        let mut extra = Vec::new();
        for l in &compiled.http.listens {
            match bound.get(&l.addr) {
                None => {
                    fresh.insert(l.addr, bind_all(l, l.reuseport, new_n)?);
                }
                Some(b) if b.reuseport && new_n > b.sockets.len() => {
                    let more = bind_all(l, true, new_n - b.sockets.len())?;
                    extra.push((l.addr, more.sockets));
                }
                Some(_) => {}
            }
        }
        let removed: Vec<SocketAddr> = bound
            .keys()
            .filter(|a| !compiled.http.listens.iter().any(|l| l.addr == **a))
            .copied()
            .collect();
        let generation = Arc::new(Generation {
            http: compiled.http.clone(),
            worker_connections: compiled.main.worker_connections,
            opened,
        });
        if compiled.main.credentials != *credentials {
            // A worker cannot take back the privileges it gave up: a new set starts before
            // the old one stops, so the ports never go unserved, and nothing changes unless
            // every new worker started.
            let addrs: Vec<SocketAddr> = bound
                .keys()
                .filter(|a| !removed.contains(a))
                .chain(fresh.keys())
                .copied()
                .collect();
            let socket = |addr: &SocketAddr, id: usize| -> io::Result<std::net::TcpListener> {
                if let Some(b) = fresh.get(addr) {
                    return socket_for(b, id);
                }
                let b = bound
                    .get(addr)
                    .ok_or_else(|| io::Error::other("no socket"))?;
                match extra.iter().find(|(a, _)| a == addr) {
                    Some((_, more)) if b.reuseport && id >= b.sockets.len() => {
                        more[id - b.sockets.len()].try_clone()
                    }
                    _ => socket_for(b, id),
                }
            };
            let mut started = Vec::with_capacity(new_n);
            let spawned = (0..new_n).try_for_each(|id| {
                let listeners = addrs
                    .iter()
                    .map(|a| Ok((*a, socket(a, id)?)))
                    .collect::<io::Result<Vec<_>>>()?;
                let w = spawn_worker(
                    id,
                    &self.shared,
                    &generation,
                    listeners,
                    &compiled.main.credentials,
                )?;
                started.push(w);
                Ok(())
            });
            if let Err(e) =
                spawned.and_then(|()| self.shared.error_log.replace(&compiled.main.error_log))
            {
                retire(started);
                return Err(e);
            }
            apply_bound(bound, &removed, fresh, extra, new_n);
            set_deferred(bound, &compiled.http.listens, &self.shared.error_log);
            retire(std::mem::replace(workers, started));
            *current = generation;
            *credentials = compiled.main.credentials;
            *running = start_modules(&compiled.http, credentials.as_ref(), &self.shared);
            return Ok(());
        }
        self.shared.error_log.replace(&compiled.main.error_log)?;
        for (id, w) in workers.iter().enumerate().take(new_n) {
            let added = fresh
                .iter()
                .map(|(addr, b)| Ok((*addr, socket_for(b, id)?)))
                .collect::<io::Result<Vec<_>>>()?;
            let _ = w.commands.send(Command::Generation {
                generation: generation.clone(),
                added,
                removed: removed.clone(),
            });
        }
        apply_bound(bound, &removed, fresh, extra, new_n);
        set_deferred(bound, &compiled.http.listens, &self.shared.error_log);
        *current = generation.clone();
        *running = start_modules(&compiled.http, credentials.as_ref(), &self.shared);
        if new_n < old_n {
            retire(workers.drain(new_n..).collect());
        }
        for id in old_n..new_n {
            workers.push(spawn_worker(
                id,
                &self.shared,
                &generation,
                listeners_of(bound, id)?,
                credentials,
            )?);
        }
        Ok(())
    }

    /// Writes a line to the error log, in nginx's format.
    pub fn log(&self, level: Level, message: &str) {
        self.shared.error_log.write(level, None, message);
    }

    /// USR1: the error log and every worker's access logs are opened anew.
    pub fn reopen_logs(&self) {
        if let Err(e) = self.shared.error_log.reopen() {
            self.log(
                Level::Alert,
                &format!("reopening the error log failed: {e}"),
            );
        }
        let Ok(mut state) = self.state.lock() else {
            return;
        };
        let current = state.generation.clone();
        for log in &current.http.error_logs {
            if let Err(e) = log.reopen() {
                self.log(Level::Alert, &format!("reopening an error log failed: {e}"));
            }
        }
        let opened = match open_files(&current.http) {
            Ok(opened) => opened,
            Err(e) => {
                self.log(
                    Level::Alert,
                    &format!("reopening the access logs failed: {e}"),
                );
                return;
            }
        };
        for w in &state.workers {
            let _ = w.commands.send(Command::ReopenLogs(opened.clone()));
        }
        state.generation = Arc::new(Generation {
            http: current.http.clone(),
            worker_connections: current.worker_connections,
            opened,
        });
    }

    /// Makes the servers of the running configuration's group `name` (one in a `zone`) be
    /// `servers` (`address:port` each) with no reload, as NGINX Plus's API would: those no
    /// longer listed are removed (requests under way finish on them), new ones added with
    /// the default settings. An error says why nothing more was changed.
    pub fn set_upstream_servers(&self, name: &str, servers: &[String]) -> Result<(), String> {
        use portcullis_proxy::upstream::{Change, ServerParams};
        let generation = match self.state.lock() {
            Ok(state) => state.generation.clone(),
            Err(_) => return Err("worker table poisoned".into()),
        };
        let group = generation.http.upstreams.get(name);
        let live = group
            .and_then(|g| g.live())
            .ok_or_else(|| format!("no upstream \"{name}\" in a zone"))?;
        let fail = |e: crate::upstream::group::LiveError<std::convert::Infallible>| match e {
            crate::upstream::group::LiveError::Change(e) => e.to_string(),
            crate::upstream::group::LiveError::State(e) => e,
            crate::upstream::group::LiveError::Make(never) => match never {},
        };
        let current = live.current();
        // New ones first: a group whose every server is replaced is never empty.
        for server in servers {
            if !current.peers().iter().any(|p| *p.name == **server) {
                let change = Change::Add {
                    server: server.clone(),
                    params: ServerParams::default(),
                };
                live.change(|_| Ok(change)).map_err(fail)?;
            }
        }
        for peer in current.peers() {
            if !servers.iter().any(|s| **s == *peer.name) {
                let id = peer.id();
                live.change(|_| Ok(Change::Remove { id })).map_err(fail)?;
            }
        }
        Ok(())
    }

    /// Stops: `graceful` finishes in-flight requests first (QUIT), else closes at once (TERM).
    /// Access logs are flushed either way. Returns when every worker has exited.
    pub fn stop(self, graceful: bool) {
        let Ok(State { workers, bound, .. }) = self.state.into_inner() else {
            return;
        };
        // The workers' handles close with their accept loops; ours must close too, or the
        // kernel would go on completing handshakes that nobody accepts.
        drop(bound);
        for w in &workers {
            let _ = w.commands.send(Command::Stop { graceful });
        }
        for w in workers {
            let _ = w.thread.join();
        }
    }
}

/// Stops `retired` workers gracefully: their in-flight requests finish on their own, and
/// nobody needs to wait for that.
fn retire(retired: Vec<WorkerHandle>) {
    for w in &retired {
        let _ = w.commands.send(Command::Stop { graceful: true });
    }
    std::thread::spawn(move || {
        for w in retired {
            let _ = w.thread.join();
        }
    });
}

/// A worker thread's stack: SSI includes nest up to 51 subrequests deep, each a few
/// futures polled inside the one above (only the pages used are ever touched).
const WORKER_STACK: usize = 16 * 1024 * 1024;

/// Starts worker `id` on its sockets of `bound`, serving as `credentials` when set, and
/// returns once it accepts.
fn spawn_worker(
    id: usize,
    shared: &Arc<Shared>,
    generation: &Arc<Generation>,
    listeners: Vec<(SocketAddr, std::net::TcpListener)>,
    credentials: &Option<Arc<Credentials>>,
) -> io::Result<WorkerHandle> {
    let (tx, rx) = mpsc::unbounded_channel();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let shared = shared.clone();
    let generation = generation.clone();
    let credentials = credentials.clone();
    let thread = std::thread::Builder::new()
        .name(format!("worker-{id}"))
        .stack_size(WORKER_STACK)
        .spawn(move || {
            // Before anything else, so that no file of a request is ever opened as root.
            if let Some(c) = credentials {
                if let Err(e) = c.apply_to_this_thread() {
                    let _ = ready_tx.send(Err(e));
                    return;
                }
            }
            run_worker(shared, generation, listeners, rx, ready_tx)
        })?;
    match ready_rx.recv() {
        Ok(Ok(())) => Ok(WorkerHandle {
            thread,
            commands: tx,
        }),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(io::Error::other("a worker exited while starting")),
    }
}

fn bind_all(l: &Listen, reuseport: bool, workers: usize) -> io::Result<Bound> {
    let addr = l.addr;
    let count = if reuseport { workers } else { 1 };
    let sockets = (0..count)
        .map(|_| bind(l, reuseport))
        .collect::<io::Result<Vec<_>>>()
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("bind() to {addr} failed {}", crate::log::os_error(&e)),
            )
        })?;
    Ok(Bound {
        reuseport,
        deferred: l.deferred,
        sockets,
    })
}

fn bind(l: &Listen, reuseport: bool) -> io::Result<std::net::TcpListener> {
    let addr = l.addr;
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    s.set_reuse_address(true)?;
    if reuseport {
        s.set_reuse_port(true)?;
    }
    if addr.is_ipv6() {
        s.set_only_v6(true)?;
    }
    s.bind(&addr.into())?;
    s.listen(l.backlog)?;
    s.set_nonblocking(true)?;
    let s = s.into();
    if l.deferred {
        defer_accept(&s, true)?;
    }
    Ok(s)
}

/// `listen ... deferred`: TCP_DEFER_ACCEPT, one second, as nginx sets it. The kernel hands
/// over a connection once its first bytes came (or its handshake was retried for that long),
/// so a connection's first read finds the request.
fn defer_accept(s: &std::net::TcpListener, on: bool) -> io::Result<()> {
    let seconds = libc::c_int::from(on);
    // SAFETY: the option's value is a c_int that outlives the call, and its size is given.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_DEFER_ACCEPT,
            (&raw const seconds).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Worker `id`'s socket for a bound address: its own with reuseport, else a duplicate of the
/// shared one.
/// Worker `id`'s handles on every bound address.
fn listeners_of(
    bound: &HashMap<SocketAddr, Bound>,
    id: usize,
) -> io::Result<Vec<(SocketAddr, std::net::TcpListener)>> {
    bound
        .iter()
        .map(|(addr, b)| Ok((*addr, socket_for(b, id)?)))
        .collect()
}

/// Applies a reload to the bound addresses: `removed` closed, `fresh` added, `extra`
/// reuseport sockets added, and reuseport sockets beyond `workers` dropped (workers that stop
/// keep their own handles until they do).
fn apply_bound(
    bound: &mut HashMap<SocketAddr, Bound>,
    removed: &[SocketAddr],
    fresh: HashMap<SocketAddr, Bound>,
    extra: Vec<(SocketAddr, Vec<std::net::TcpListener>)>,
    workers: usize,
) {
    for a in removed {
        bound.remove(a);
    }
    bound.extend(fresh);
    for (addr, sockets) in extra {
        if let Some(b) = bound.get_mut(&addr) {
            b.sockets.extend(sockets);
        }
    }
    for b in bound.values_mut().filter(|b| b.reuseport) {
        b.sockets.truncate(workers);
    }
}

/// Sets TCP_DEFER_ACCEPT anew on the sockets kept whose `deferred` changed; as nginx, a
/// failure is logged and ignored.
fn set_deferred(bound: &mut HashMap<SocketAddr, Bound>, listens: &[Listen], log: &ErrorLog) {
    for l in listens {
        let Some(b) = bound.get_mut(&l.addr).filter(|b| b.deferred != l.deferred) else {
            continue;
        };
        // Kept as it was if a socket refused, so that the next reload tries again.
        let mut set = true;
        for socket in &b.sockets {
            if let Err(e) = defer_accept(socket, l.deferred) {
                set = false;
                let message = format!(
                    "setsockopt(TCP_DEFER_ACCEPT, {}) for {} failed, ignored {}",
                    u8::from(l.deferred),
                    l.addr,
                    crate::log::os_error(&e)
                );
                log.write(Level::Alert, None, &message);
            }
        }
        if set {
            b.deferred = l.deferred;
        }
    }
}

fn socket_for(b: &Bound, id: usize) -> io::Result<std::net::TcpListener> {
    if b.reuseport {
        b.sockets[id].try_clone()
    } else {
        b.sockets[0].try_clone()
    }
}

fn run_worker(
    shared: Arc<Shared>,
    generation: Arc<Generation>,
    listeners: Vec<(SocketAddr, std::net::TcpListener)>,
    mut commands: mpsc::UnboundedReceiver<Command>,
    ready: std::sync::mpsc::Sender<io::Result<()>>,
) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let local = LocalSet::new();
    // The parked connections' epoll set is watched by the runtime's reactor.
    let parking = {
        let _runtime = rt.enter();
        crate::conn::park::Parking::new()
    };
    let parking = match parking {
        Ok(p) => p,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let (stop_tx, stop_rx) = watch::channel(false);
    let modules = module_states(&generation);
    let counters = shared.stats.add();
    let worker = Rc::new(Worker {
        shared,
        counters,
        generation: RefCell::new(generation),
        files: RefCell::new(FileCache::with_validity(
            FILE_CACHE_ENTRIES,
            FILE_CACHE_VALID,
        )),
        dates: RefCell::new(portcullis_http::DateCache::new()),
        active: Cell::new(0),
        stopping: stop_rx,
        drained: Notify::new(),
        upstreams: RefCell::default(),
        resolvers: RefCell::default(),
        modules,
        parking,
    });
    let graceful = local.block_on(&rt, async {
        let mut accepting: HashMap<SocketAddr, AbortHandle> = HashMap::new();
        for (addr, l) in listeners {
            match start_accepting(&worker, addr, l) {
                Ok(h) => {
                    accepting.insert(addr, h);
                }
                Err(e) => {
                    let _ = ready.send(Err(e));
                    return false;
                }
            }
        }
        let _ = ready.send(Ok(()));
        let flusher = tokio::task::spawn_local(tick(worker.clone()));
        let parked = tokio::task::spawn_local(crate::conn::park::run(worker.clone()));
        let graceful = loop {
            match commands.recv().await {
                Some(Command::Generation {
                    generation,
                    added,
                    removed,
                }) => {
                    let http = &generation.http;
                    let states = http.modules.iter().zip(&worker.modules);
                    for ((m, state), (loaded, opened)) in
                        states.zip(http.loaded.iter().zip(&generation.opened))
                    {
                        m.reload(&**state, &**loaded, opened);
                    }
                    *worker.generation.borrow_mut() = generation;
                    worker.upstreams.borrow_mut().clear();
                    for a in removed {
                        if let Some(h) = accepting.remove(&a) {
                            h.abort();
                        }
                    }
                    for (addr, l) in added {
                        match start_accepting(&worker, addr, l) {
                            Ok(h) => {
                                accepting.insert(addr, h);
                            }
                            Err(e) => worker.shared.error_log.write(
                                Level::Alert,
                                None,
                                &format!("listening on {addr} failed: {e}"),
                            ),
                        }
                    }
                    // Handles to files of the old generation's roots may no longer be wanted.
                    *worker.files.borrow_mut() =
                        FileCache::with_validity(FILE_CACHE_ENTRIES, FILE_CACHE_VALID);
                }
                Some(Command::ReopenLogs(opened)) => {
                    let http = worker.generation.borrow().http.clone();
                    for ((m, state), opened) in
                        http.modules.iter().zip(&worker.modules).zip(&opened)
                    {
                        m.reopen(&**state, opened);
                    }
                }
                Some(Command::Stop { graceful }) => break graceful,
                None => break false,
            }
        };
        for h in accepting.values() {
            h.abort();
        }
        flusher.abort();
        if graceful {
            let _ = stop_tx.send(true);
            while worker.active.get() > 0 {
                worker.drained.notified().await;
            }
        }
        parked.abort();
        graceful
    });
    let _ = graceful;
    // Parked connections hold the worker (their count in it): closed here, as the tasks of
    // the others are dropped with the runtime.
    worker.parking.clear();
    let http = worker.generation.borrow().http.clone();
    for (m, state) in http.modules.iter().zip(&worker.modules) {
        m.stop(&**state);
    }
}

fn start_accepting(
    worker: &Rc<Worker>,
    addr: SocketAddr,
    l: std::net::TcpListener,
) -> io::Result<AbortHandle> {
    // SAFETY: the listener owns its descriptor, the same one, for as long as the AsyncFd that
    // owns the listener lives.
    let listener = unsafe { AsyncFd::register_with_interest(l, Interest::READABLE) }
        .map_err(io::Error::from)?;
    let task = tokio::task::spawn_local(accept_loop(worker.clone(), addr, listener));
    Ok(task.abort_handle())
}

/// Accepts a connection. Its socket is non-blocking and left out of the reactor: the
/// connection registers it only if it must wait (see `portcullis_proxy::Sock`).
async fn accept(listener: &AsyncFd<TcpListener>) -> io::Result<(TcpStream, SocketAddr)> {
    loop {
        let mut ready = listener.readable().await?;
        // Each accept spends the task's budget, as tokio's own accept does: a flood of
        // connections lets the worker's other connections, timers and reactor run now and
        // then.
        let coop = std::future::poll_fn(tokio::task::coop::poll_proceed).await;
        match ready.try_io(|l| accept4(l.get_ref())) {
            Ok(accepted) => {
                coop.made_progress();
                return accepted;
            }
            Err(_would_block) => {}
        }
    }
}

/// accept4(2), non-blocking and close-on-exec.
fn accept4(listener: &TcpListener) -> io::Result<(TcpStream, SocketAddr)> {
    let (socket, peer) =
        socket2::SockRef::from(listener).accept4(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC)?;
    let peer = peer
        .as_socket()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "not an IP address"))?;
    Ok((socket.into(), peer))
}

async fn accept_loop(worker: Rc<Worker>, addr: SocketAddr, listener: AsyncFd<TcpListener>) {
    loop {
        match accept(&listener).await {
            Ok((stream, peer)) => {
                let generation = worker.generation.borrow().clone();
                if worker.active.get() >= generation.worker_connections {
                    worker.counters.refused();
                    worker.shared.error_log.write(
                        Level::Alert,
                        None,
                        &format!(
                            "{} worker_connections are not enough",
                            generation.worker_connections
                        ),
                    );
                    continue;
                }
                // The listening address's place in the generation: the connection's future
                // keeps an index, not the address.
                let listens = &generation.http.listens;
                let Some(listen) = listens.iter().position(|l| l.addr == addr) else {
                    continue;
                };
                worker.active.set(worker.active.get() + 1);
                let stat = crate::stats::Connection::accepted(&worker.counters);
                let guard = ActiveGuard(worker.clone(), stat);
                // Boxed where it is built: the task moves a box, not the future, as it
                // starts.
                let serve = || crate::conn::serve(guard, generation, listen, stream, peer);
                tokio::task::spawn_local(crate::boxed::boxed(serve));
            }
            // A connection reset before it was accepted: nginx logs it and accepts on.
            Err(e) if e.raw_os_error() == Some(libc::ECONNABORTED) => {
                let message = format!("accept() failed {}", crate::log::os_error(&e));
                worker.shared.error_log.write(Level::Error, None, &message);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                // Out of descriptors or memory: nginx disables accepting for a moment rather
                // than spinning on the error.
                worker.shared.error_log.write(
                    Level::Crit,
                    None,
                    &format!("accept() failed {}", crate::log::os_error(&e)),
                );
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

/// Once a second: idle upstream connections past their keepalive_timeout close, idle client
/// connections count the second (two make them park), and each module does what waits on
/// time (buffered access log lines whose `flush=` passed).
async fn tick(worker: Rc<Worker>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    // A late tick is not made up for at once: two close together would park a connection
    // that waited a moment.
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        worker.parking.tick();
        worker
            .upstreams
            .borrow_mut()
            .sweep(std::time::Instant::now());
        let http = worker.generation.borrow().http.clone();
        let states = http.modules.iter().zip(&worker.modules);
        for ((m, state), loaded) in states.zip(&http.loaded) {
            m.tick(&**state, &**loaded);
        }
    }
}

/// Each module's state in a new worker, from what loading `http` kept for it.
fn module_states(generation: &Generation) -> Vec<Box<dyn std::any::Any>> {
    let http = &generation.http;
    let modules = http
        .modules
        .iter()
        .zip(&http.loaded)
        .zip(&generation.opened);
    modules
        .map(|((m, loaded), opened)| m.worker(&**loaded, opened))
        .collect()
}

/// What the modules run beside the workers for a configuration (see `Module::start`).
fn start_modules(
    http: &HttpConf,
    credentials: Option<&Arc<Credentials>>,
    shared: &Arc<Shared>,
) -> Vec<Running> {
    let cx = Start {
        credentials,
        error_log: &shared.error_log,
    };
    let modules = http.modules.iter().zip(&http.loaded);
    modules
        .filter_map(|(m, loaded)| m.start(&**loaded, &cx))
        .collect()
}

/// What each module of `http` writes to, opened by the server itself (see `Module::open`).
fn open_files(http: &HttpConf) -> io::Result<Vec<Opened>> {
    let modules = http.modules.iter().zip(&http.loaded);
    modules.map(|(m, loaded)| m.open(&**loaded)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// TCP_DEFER_ACCEPT as the kernel reports it: 0 when off.
    fn deferral(s: &TcpListener) -> libc::c_int {
        let mut value: libc::c_int = -1;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: value and len point to a c_int and its size, which outlive the call.
        let r = unsafe {
            libc::getsockopt(
                s.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_DEFER_ACCEPT,
                (&raw mut value).cast(),
                &mut len,
            )
        };
        assert_eq!(r, 0, "{}", io::Error::last_os_error());
        value
    }

    #[test]
    fn deferred_is_set_on_a_listening_socket_and_taken_off_again() {
        let s = TcpListener::bind("127.0.0.1:0").unwrap();
        assert_eq!(deferral(&s), 0);
        defer_accept(&s, true).unwrap();
        assert!(deferral(&s) > 0);
        defer_accept(&s, false).unwrap();
        assert_eq!(deferral(&s), 0);
    }
}
