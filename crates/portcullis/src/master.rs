//! The running instance's controlling side, nginx's master process: it starts the server,
//! owns the pid file, and turns signals into actions until told to stop.
//!
//! | signal      | action                                                        |
//! |-------------|---------------------------------------------------------------|
//! | HUP         | read the configuration again and swap it in; on error, keep the old one |
//! | USR1        | reopen the log files (after rotation)                         |
//! | QUIT        | stop gracefully: finish in-flight requests, then exit 0       |
//! | TERM, INT   | stop at once, then exit 0                                     |
//!
//! `-s` is the other end: it reads the pid file and sends one of these.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use portcullis_server::{Compiled, Level, Server};
use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::cli;
use crate::config::Setup;
use crate::default_config;
use crate::process::{self, say, Failure, Forked, Startup};

/// `-s`: sends `signal` to the instance whose pid file the configuration names.
pub fn send(setup: &Setup, compiled: &Compiled, signal: cli::Signal) -> Result<(), Failure> {
    let Some(path) = pid_path(setup, compiled) else {
        return Err(Failure::new(
            Level::Error,
            "the built-in default configuration writes no pid file; stop it with Ctrl-C",
        ));
    };
    let pid = process::read_pid_file(&path)?;
    process::send_signal(pid, signal.number())
}

/// Runs the server until a stop signal, detaching first when `daemon on`. Returns the exit
/// code: 0 after a stop signal, 1 when startup fails.
pub fn run(setup: &Setup, compiled: Compiled) -> ExitCode {
    apply_nofile_limit(&compiled, say);

    let startup = if compiled.daemon() && !setup.is_built_in() {
        match process::daemonize() {
            Ok(Forked::Parent { started: true }) => return ExitCode::SUCCESS,
            // The child has printed why before exiting.
            Ok(Forked::Parent { started: false }) => return ExitCode::FAILURE,
            Ok(Forked::Child(startup)) => Some(startup),
            Err(e) => {
                say(Failure::new(
                    Level::Emerg,
                    format!("daemon() failed ({})", process::os_error_text(&e)),
                ));
                return ExitCode::FAILURE;
            }
        }
    } else {
        None
    };

    match serve(setup, compiled, startup) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            say(failure);
            ExitCode::FAILURE
        }
    }
}

/// Starts the server, writes the pid file, reports readiness and handles signals until a
/// stop. Any error here happens before readiness is reported, so a waiting parent exits 1.
fn serve(setup: &Setup, compiled: Compiled, startup: Option<Startup>) -> Result<(), Failure> {
    // Signals are read on a single-threaded runtime of their own: nothing else runs on it,
    // and handlers are installed before the server starts so that an early HUP or TERM is
    // handled rather than killing the process.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::new(Level::Emerg, format!("signal setup failed: {e}")))?;
    let mut signals = {
        let _context = runtime.enter();
        Signals::install()
            .map_err(|e| Failure::new(Level::Emerg, format!("signal setup failed: {e}")))?
    };

    let mut pid_file = pid_path(setup, &compiled);
    let server = Server::start(compiled).map_err(|e| Failure::new(Level::Emerg, e.to_string()))?;
    // The pid file appears only once every listener is bound: whoever waits for it may
    // connect at once.
    if let Some(path) = &pid_file {
        if let Err(failure) = process::write_pid_file(path) {
            server.stop(false);
            return Err(failure);
        }
    }
    if let Some(startup) = startup {
        startup.ready();
    }
    if setup.is_built_in() {
        say(format!(
            "serving the built-in default on {} and {}",
            default_config::URL,
            default_config::HTTPS_HINT
        ));
        for hint in default_config::demo_hints() {
            say(hint);
        }
    }

    let graceful = runtime.block_on(async {
        loop {
            match signals.next().await {
                Event::Reload => reload(setup, &server, &mut pid_file),
                Event::Reopen => {
                    server.log(
                        Level::Notice,
                        "signal 10 (SIGUSR1) received, reopening logs",
                    );
                    server.reopen_logs();
                }
                Event::Quit => {
                    server.log(Level::Notice, "signal 3 (SIGQUIT) received, shutting down");
                    break true;
                }
                Event::Terminate(name, number) => {
                    server.log(
                        Level::Notice,
                        &format!("signal {number} ({name}) received, exiting"),
                    );
                    break false;
                }
            }
        }
    });

    server.stop(graceful);
    if let Some(path) = &pid_file {
        process::remove_pid_file(path);
    }
    Ok(())
}

/// HUP: reads the configuration as at startup (same `-c`, `-p`, `-g`, `-e`) and swaps it in.
/// Any failure is logged and the running configuration keeps serving.
fn reload(setup: &Setup, server: &Server, pid_file: &mut Option<PathBuf>) {
    server.log(Level::Notice, "signal 1 (SIGHUP) received, reconfiguring");
    let compiled = match setup.read(|warning| server.log(Level::Warn, warning)) {
        Ok((_, compiled)) => compiled,
        Err(e) => {
            server.log(Level::Emerg, &e.to_string());
            return;
        }
    };
    apply_nofile_limit(&compiled, |failure| {
        server.log(failure.level, &failure.message)
    });
    let new_pid_file = pid_path(setup, &compiled);
    if let Err(e) = server.reload(compiled) {
        server.log(Level::Alert, &e.to_string());
        return;
    }
    // As nginx does when `pid` changes: the new file first, then the old one goes.
    if new_pid_file != *pid_file {
        if let Some(path) = &new_pid_file {
            if let Err(failure) = process::write_pid_file(path) {
                server.log(failure.level, &failure.message);
            }
        }
        if let Some(old) = pid_file.as_deref() {
            process::remove_pid_file(old);
        }
        *pid_file = new_pid_file;
    }
}

/// The pid file to write and to read for `-s`. The built-in default has none: it runs in
/// the foreground and must leave nothing behind.
fn pid_path(setup: &Setup, compiled: &Compiled) -> Option<PathBuf> {
    if setup.is_built_in() {
        return None;
    }
    compiled.pid_path().map(Path::to_path_buf)
}

/// `worker_rlimit_nofile`; a refusal is reported and startup goes on, as in nginx.
fn apply_nofile_limit(compiled: &Compiled, mut report: impl FnMut(Failure)) {
    if let Some(limit) = compiled.worker_rlimit_nofile() {
        if let Err(failure) = process::set_nofile_limit(limit) {
            report(failure);
        }
    }
}

/// What a received signal asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Event {
    Reload,
    Reopen,
    Quit,
    /// TERM or INT: the signal's name and number, for the log line.
    Terminate(&'static str, libc::c_int),
}

/// The signal streams the master listens to.
struct Signals {
    hup: Signal,
    usr1: Signal,
    quit: Signal,
    term: Signal,
    int: Signal,
}

impl Signals {
    /// Installs the handlers; must run inside the runtime's context.
    fn install() -> std::io::Result<Signals> {
        Ok(Signals {
            hup: signal(SignalKind::hangup())?,
            usr1: signal(SignalKind::user_defined1())?,
            quit: signal(SignalKind::quit())?,
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    /// Waits for the next signal. A stream ends only when the runtime shuts down, which
    /// cannot happen while this is awaited; if it did, stopping is the safe reading.
    async fn next(&mut self) -> Event {
        tokio::select! {
            Some(()) = self.hup.recv() => Event::Reload,
            Some(()) = self.usr1.recv() => Event::Reopen,
            Some(()) = self.quit.recv() => Event::Quit,
            Some(()) = self.term.recv() => Event::Terminate("SIGTERM", libc::SIGTERM),
            Some(()) = self.int.recv() => Event::Terminate("SIGINT", libc::SIGINT),
            else => Event::Terminate("SIGTERM", libc::SIGTERM),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raise(signo: libc::c_int) {
        // SAFETY: raise has no memory-safety preconditions; a handler is installed first.
        assert_eq!(unsafe { libc::raise(signo) }, 0);
    }

    /// Every handled signal maps to its event. One test covers them all because handlers
    /// are process-wide: tests running in parallel must not race on them.
    #[test]
    fn signals_map_to_events() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let mut signals = {
            let _context = runtime.enter();
            Signals::install().expect("install")
        };
        for (signo, expected) in [
            (libc::SIGHUP, Event::Reload),
            (libc::SIGUSR1, Event::Reopen),
            (libc::SIGQUIT, Event::Quit),
            (libc::SIGTERM, Event::Terminate("SIGTERM", libc::SIGTERM)),
            (libc::SIGINT, Event::Terminate("SIGINT", libc::SIGINT)),
        ] {
            raise(signo);
            let event = runtime.block_on(async {
                tokio::time::timeout(std::time::Duration::from_secs(5), signals.next()).await
            });
            assert_eq!(event, Ok(expected), "signal {signo}");
        }
    }
}
