//! INTERFACE SKETCH (to be implemented): the API the binary uses.

pub mod static_files;

use std::path::{Path, PathBuf};

pub use portcullis_config::ConfigError;

/// nginx's error log levels, most severe first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Emerg,
    Alert,
    Crit,
    Error,
    Warn,
    Notice,
    Info,
    Debug,
}

/// A configuration compiled into its runtime form. Everything that can fail at load time
/// (regexes, files, addresses) has failed here, so `-t` and reload see the same errors.
pub struct Compiled {
    _p: (),
}

impl Compiled {
    /// `daemon on|off`; nginx's default is on.
    pub fn daemon(&self) -> bool {
        unimplemented!()
    }
    /// `pid` (default `<prefix>/logs/portcullis.pid`); `None` for `pid off`? (nginx has no
    /// off; kept for the embedded default, which writes none).
    pub fn pid_path(&self) -> Option<&Path> {
        unimplemented!()
    }
    pub fn worker_rlimit_nofile(&self) -> Option<u64> {
        unimplemented!()
    }
}

/// Compiles a loaded configuration. `prefix` resolves relative paths (`-p`); `error_log` is
/// the `-e` override.
pub fn compile(
    loaded: &portcullis_config::Loaded,
    prefix: &Path,
    error_log: Option<&Path>,
) -> Result<Compiled, ConfigError> {
    unimplemented!("{:?} {prefix:?} {error_log:?}", loaded.directives.len())
}

/// The running server: worker threads with their listeners.
pub struct Server {
    _p: PathBuf,
}

impl Server {
    /// Binds every listener, starts the workers and returns once they accept.
    pub fn start(compiled: Compiled) -> std::io::Result<Server> {
        let _ = compiled;
        unimplemented!()
    }
    /// Swaps in a new configuration. On error the old one keeps serving.
    pub fn reload(&self, compiled: Compiled) -> std::io::Result<()> {
        let _ = compiled;
        unimplemented!()
    }
    /// Writes a line to the current error log, in nginx's format.
    pub fn log(&self, level: Level, message: &str) {
        let _ = (level, message);
        unimplemented!()
    }
    pub fn reopen_logs(&self) {
        unimplemented!()
    }
    /// Stops: `graceful` finishes in-flight requests first (QUIT), else closes at once (TERM).
    /// Access logs are flushed either way. Returns when every worker has exited.
    pub fn stop(self, graceful: bool) {
        let _ = graceful;
        unimplemented!()
    }
}
