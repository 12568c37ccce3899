//! The server: workers, connections, routing and the phases a request goes through.
//!
//! [`compile`] turns a loaded configuration into its runtime form ([`Compiled`]: typed settings,
//! server-name tables, location trees, compiled variables). [`Server::start`] binds the
//! listeners and starts one worker thread per `worker_processes`, each with its own
//! current-thread runtime. A worker accepts on its sockets (`worker`), runs each connection's
//! HTTP/1.1 loop (`conn`) or its HTTP/2 streams (`h2`), and takes each request through nginx's
//! phases (`request`): the rewrite phase (`rewrite`: `rewrite`, `set`, `if`, `return`,
//! `break`), location search (`location`), access rules and JWT authentication (`auth_jwt`),
//! `try_files`, index and static files (`index`, `static_file`, with the file machinery of
//! `files`), `error_page`, and the access log (`access_log`, with variables from `vars`).
//! Each nginx module is a file or folder of its own, listed in `modules`.
//! A reload compiles a new configuration and hands it to the workers; connections keep the
//! one they started with.

mod access;
mod access_log;
mod api;
mod auth_basic;
mod auth_jwt;
mod auth_request;
mod autoindex;
mod boxed;
mod charset;
mod conf;
mod conn;
mod empty_gif;
mod encode;
pub mod files;
#[doc(hidden)]
pub mod fuzz;
mod gateway;
mod geo;
mod grpc;
mod gzip;
mod h2;
mod headers;
mod health_check;
mod index;
mod limit_conn;
mod limit_req;
mod location;
mod log;
mod map;
mod mirror;
mod module;
mod modules;
mod net;
mod pace;
mod proxy;
mod realip;
mod referer;
mod request;
mod rewrite;
mod secure_link;
mod split_clients;
mod ssi;
mod static_file;
mod stats;
mod stub_status;
mod sub_filter;
mod subrequest;
mod tls;
mod tls_conf;
mod upstream;
mod user;
mod vars;
mod worker;
mod zone;

pub use conf::Compiled;
pub use conn::park::set_memory_release;
pub use portcullis_config::ConfigError;
pub use worker::Server;

/// Compiles a loaded configuration into its runtime form, with every module of this build.
/// `prefix` resolves relative paths; `error_log` is `-e`.
pub fn compile(
    loaded: &portcullis_config::Loaded,
    prefix: &std::path::Path,
    error_log: Option<&std::path::Path>,
) -> Result<Compiled, ConfigError> {
    let phases = std::sync::Arc::new(request::Phases::of(modules::ALL));
    conf::compile(loaded, prefix, error_log, modules::ALL, phases)
}

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
