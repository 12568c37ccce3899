//! The module registry: nginx's modules, each with its directives (where each may appear and
//! how many arguments it takes, mirroring the `ngx_command_t` arrays of nginx's modules) and
//! what portcullis does with each ([`Support`]). It is the one record of what is
//! implemented: the loader refuses what must not be ignored, the compiler warns about what is
//! ignored, and `-V` says which modules are built in.
//!
//! A name may have several entries when modules share it (`server` is a block in `http` and
//! a simple directive in `upstream`; `keepalive_timeout` takes one or two arguments in
//! `http` but one in `upstream`). Lookup takes the first entry allowed in the current
//! context, exactly as nginx walks its modules.

/// Contexts, as nginx's `NGX_*_CONF` bits.
pub(crate) mod ctx {
    pub(crate) const MAIN: u16 = 1 << 0;
    pub(crate) const EVENTS: u16 = 1 << 1;
    pub(crate) const HTTP: u16 = 1 << 2;
    pub(crate) const SRV: u16 = 1 << 3;
    pub(crate) const LOC: u16 = 1 << 4;
    pub(crate) const UPS: u16 = 1 << 5;
    /// `if` inside `server`.
    pub(crate) const SIF: u16 = 1 << 6;
    /// `if` inside `location`.
    pub(crate) const LIF: u16 = 1 << 7;
    pub(crate) const LMT: u16 = 1 << 8;

    pub(crate) const HSL: u16 = HTTP | SRV | LOC;
    pub(crate) const HS: u16 = HTTP | SRV;
    pub(crate) const HSLI: u16 = HTTP | SRV | LOC | LIF;
    pub(crate) const SL: u16 = SRV | LOC;
    /// The rewrite module's directives run in server, location and both kinds of `if`.
    pub(crate) const REWRITE: u16 = SRV | SIF | LOC | LIF;
}

/// Argument counts, as nginx's `NGX_CONF_TAKE*` bits: bit `n` allows `n` arguments.
pub(crate) mod args {
    pub(crate) const NOARGS: u16 = 1 << 0;
    pub(crate) const TAKE1: u16 = 1 << 1;
    pub(crate) const TAKE2: u16 = 1 << 2;
    pub(crate) const TAKE3: u16 = 1 << 3;
    pub(crate) const TAKE4: u16 = 1 << 4;
    pub(crate) const TAKE12: u16 = TAKE1 | TAKE2;
    pub(crate) const TAKE23: u16 = TAKE2 | TAKE3;
    pub(crate) const TAKE123: u16 = TAKE1 | TAKE2 | TAKE3;
    pub(crate) const TAKE1234: u16 = TAKE1 | TAKE2 | TAKE3 | TAKE4;
    /// Exactly one argument, `on` or `off`.
    pub(crate) const FLAG: u16 = 1 << 9;
    pub(crate) const MORE1: u16 = 1 << 10;
    pub(crate) const MORE2: u16 = 1 << 11;
    /// Any number of arguments, none too.
    pub(crate) const ANY: u16 = 1 << 12;
    /// Most arguments any directive takes with fixed counts (`NGX_CONF_MAX_ARGS`).
    pub(crate) const MAX_FIXED: usize = 8;
}

/// What the braces of a block directive contain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Block {
    /// A simple directive, ended by `;`.
    No,
    /// Directives checked against this table in the given context.
    Ctx(u16),
    /// `if`: `SIF` in a server, `LIF` in a location.
    If,
    /// `types`, `map`, `geo`, `split_clients`, `charset_map`: pairs that are data, not directives.
    Data,
}

/// What portcullis does with a directive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Support {
    /// Implemented.
    Yes,
    /// Accepted silently: it tunes something portcullis has no counterpart for (process
    /// scheduling, hash sizes, kernel hints), or what it asks for is always so.
    Inert,
    /// Implemented only with this value, nginx's default and portcullis's constant
    /// behaviour; any other value is ignored with a warning.
    DefaultOnly(&'static str),
    /// Not implemented; ignoring it can neither let a request through nor lift a limit nor
    /// lose data: accepted with a warning.
    Warn,
    /// Not implemented, and ignoring it could let through what nginx would stop, lift a
    /// limit or lose data: the configuration is refused, unless the directive has the one
    /// value given here that asks for nothing (`auth_basic off`).
    Refuse(Option<&'static str>),
}

/// Whether nginx builds a module unless configured out (`--without-X`), only when
/// configured in (`--with-X`), or always (no flag).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flag {
    None,
    Standard,
    Optional,
}

/// One nginx module.
#[derive(Debug)]
pub struct Module {
    /// nginx's name, as in its configure flags (`http_proxy_module`).
    pub name: &'static str,
    pub flag: Flag,
    pub directives: &'static [Spec],
}

impl Module {
    /// Built in: a module without a configure flag always is; another is when portcullis
    /// implements at least one of its directives.
    pub fn present(&self) -> bool {
        self.flag == Flag::None || self.directives.iter().any(|d| d.support == Support::Yes)
    }
}

/// One directive of a module.
#[derive(Debug)]
pub struct Spec {
    pub name: &'static str,
    pub(crate) contexts: u16,
    pub(crate) args: u16,
    pub(crate) block: Block,
    /// nginx rejects a second occurrence in the same block with `"x" directive is duplicate`
    /// (its slot setters refuse a value that is already set).
    pub(crate) once: bool,
    pub support: Support,
}

impl Spec {
    const fn with(self, support: Support) -> Spec {
        Spec { support, ..self }
    }
    const fn inert(self) -> Spec {
        self.with(Support::Inert)
    }
    const fn default_only(self, value: &'static str) -> Spec {
        self.with(Support::DefaultOnly(value))
    }
    const fn warn(self) -> Spec {
        self.with(Support::Warn)
    }
    const fn refuse(self) -> Spec {
        self.with(Support::Refuse(None))
    }
    const fn refuse_unless(self, value: &'static str) -> Spec {
        self.with(Support::Refuse(Some(value)))
    }

    /// A block directive (`geo ... { }`), not ended by `;`.
    pub fn is_block(&self) -> bool {
        self.block != Block::No
    }

    /// Takes exactly `on` or `off`.
    pub fn is_flag(&self) -> bool {
        self.args & args::FLAG != 0
    }

    /// The first context it may appear in and the arguments it takes at the fewest, as
    /// nginx names them, for tests that place every directive somewhere.
    pub fn sample(&self) -> (&'static str, usize) {
        use args::*;
        let context = [
            (MAIN, "main"),
            (EVENTS, "events"),
            (HTTP, "http"),
            (SRV, "server"),
            (LOC, "location"),
            (UPS, "upstream"),
            (LIF, "if"),
            (LMT, "limit_except"),
        ]
        .iter()
        .find(|(bit, _)| self.contexts & bit != 0)
        .map_or("main", |(_, name)| name);
        let fewest = (0..MAX_FIXED).find(|&n| self.takes(n)).unwrap_or(0);
        (context, fewest)
    }

    /// Whether `n` arguments (the name not counted) are acceptable, by nginx's rules.
    pub(crate) fn takes(&self, n: usize) -> bool {
        use args::*;
        if self.args & FLAG != 0 {
            return n == 1;
        }
        if self.args & ANY != 0 {
            return true;
        }
        if self.args & MORE1 != 0 {
            return n >= 1;
        }
        if self.args & MORE2 != 0 {
            return n >= 2;
        }
        n < args::MAX_FIXED && self.args & (1 << n) != 0
    }
}

use args::*;
use ctx::*;

const fn d(name: &'static str, contexts: u16, args: u16) -> Spec {
    Spec {
        name,
        contexts,
        args,
        block: Block::No,
        // Every `on`/`off` directive goes through nginx's flag slot, which refuses duplicates.
        once: args & FLAG != 0,
        support: Support::Yes,
    }
}

/// A directive that may appear only once per block.
const fn once(name: &'static str, contexts: u16, args: u16) -> Spec {
    Spec {
        name,
        contexts,
        args,
        block: Block::No,
        once: true,
        support: Support::Yes,
    }
}

const fn block(name: &'static str, contexts: u16, args: u16, inner: Block) -> Spec {
    Spec {
        name,
        contexts,
        args,
        block: inner,
        once: false,
        support: Support::Yes,
    }
}

/// Every module, in nginx's order of precedence for a shared name, and every directive each
/// accepts, with what portcullis does with it ([`Support`]).
pub static MODULES: &[Module] = &[
    // The main context: processes, users, logs.
    Module {
        name: "core",
        flag: Flag::None,
        directives: &[
            d("daemon", MAIN, FLAG),
            d("master_process", MAIN, FLAG).inert(),
            once("timer_resolution", MAIN, TAKE1).inert(),
            once("pid", MAIN, TAKE1),
            once("lock_file", MAIN, TAKE1).inert(),
            once("worker_processes", MAIN, TAKE1),
            once("debug_points", MAIN, TAKE1).warn(),
            once("user", MAIN, TAKE12),
            once("worker_priority", MAIN, TAKE1).inert(),
            once("worker_cpu_affinity", MAIN, MORE1).inert(),
            once("worker_rlimit_nofile", MAIN, TAKE1),
            once("worker_rlimit_core", MAIN, TAKE1).warn(),
            once("worker_shutdown_timeout", MAIN, TAKE1).inert(),
            once("working_directory", MAIN, TAKE1).inert(),
            d("env", MAIN, TAKE1).warn(),
            d("load_module", MAIN, TAKE1).warn(),
            d("pcre_jit", MAIN, FLAG).inert(),
            d("thread_pool", MAIN, TAKE23).inert(),
            d("ssl_engine", MAIN, TAKE1).warn(),
            d("error_log", MAIN | HSL, MORE1),
            Spec {
                once: true,
                ..block("events", MAIN, NOARGS, Block::Ctx(EVENTS))
            },
            Spec {
                once: true,
                ..block("http", MAIN, NOARGS, Block::Ctx(HTTP))
            },
        ],
    },
    // Connection processing.
    Module {
        name: "events",
        flag: Flag::None,
        directives: &[
            once("worker_connections", EVENTS, TAKE1),
            once("use", EVENTS, TAKE1).inert(),
            d("multi_accept", EVENTS, FLAG).inert(),
            d("accept_mutex", EVENTS, FLAG).inert(),
            once("accept_mutex_delay", EVENTS, TAKE1).inert(),
            d("debug_connection", EVENTS, TAKE1).inert(),
            once("worker_aio_requests", EVENTS, TAKE1).inert(),
        ],
    },
    // Servers, locations, static files, limits of requests.
    Module {
        name: "http_core_module",
        flag: Flag::None,
        directives: &[
            once("variables_hash_max_size", HTTP, TAKE1).inert(),
            once("variables_hash_bucket_size", HTTP, TAKE1).inert(),
            once("server_names_hash_max_size", HTTP, TAKE1).inert(),
            once("server_names_hash_bucket_size", HTTP, TAKE1).inert(),
            block("server", HTTP, NOARGS, Block::Ctx(SRV)),
            once("connection_pool_size", HS, TAKE1).warn(),
            once("request_pool_size", HS, TAKE1).warn(),
            once("client_header_timeout", HS, TAKE1),
            once("client_header_buffer_size", HS, TAKE1),
            once("large_client_header_buffers", HS, TAKE2),
            // Debian's nginx 1.22.1 has it backported.
            once("max_headers", HS, TAKE1),
            d("ignore_invalid_headers", HS, FLAG),
            d("merge_slashes", HS, FLAG),
            d("underscores_in_headers", HS, FLAG),
            block("location", SL, TAKE12, Block::Ctx(LOC)),
            d("listen", SRV, MORE1),
            d("server_name", SRV, MORE1),
            once("types_hash_max_size", HSL, TAKE1).inert(),
            once("types_hash_bucket_size", HSL, TAKE1).inert(),
            block("types", HSL, NOARGS, Block::Data),
            once("default_type", HSL, TAKE1),
            once("root", HSLI, TAKE1),
            once("alias", LOC, TAKE1),
            block("limit_except", LOC, MORE1, Block::Ctx(LMT)),
            once("client_max_body_size", HSL, TAKE1),
            once("client_body_buffer_size", HSL, TAKE1),
            once("client_body_timeout", HSL, TAKE1),
            once("client_body_temp_path", HSL, TAKE1234).inert(),
            once("client_body_in_file_only", HSL, TAKE1).warn(),
            d("client_body_in_single_buffer", HSL, FLAG).warn(),
            d("sendfile", HSLI, FLAG).inert(),
            once("sendfile_max_chunk", HSL, TAKE1).inert(),
            once("subrequest_output_buffer_size", HSL, TAKE1),
            once("aio", HSL, TAKE1).inert(),
            d("aio_write", HSL, FLAG).warn(),
            once("read_ahead", HSL, TAKE1).warn(),
            once("directio", HSL, TAKE1).inert(),
            once("directio_alignment", HSL, TAKE1).warn(),
            d("tcp_nopush", HSL, FLAG).inert(),
            d("tcp_nodelay", HSL, FLAG).inert(),
            once("send_timeout", HSL, TAKE1),
            once("send_lowat", HSL, TAKE1).warn(),
            once("postpone_output", HSL, TAKE1).inert(),
            once("limit_rate", HSLI, TAKE1),
            once("limit_rate_after", HSLI, TAKE1),
            once("keepalive_time", HSL, TAKE1),
            once("keepalive_timeout", HSL, TAKE12),
            once("keepalive_requests", HSL, TAKE1),
            d("keepalive_disable", HSL, TAKE12).inert(),
            once("satisfy", HSL, TAKE1),
            once("auth_delay", HSL, TAKE1).refuse_unless("0s"),
            once("internal", LOC, NOARGS),
            once("lingering_close", HSL, TAKE1).inert(),
            once("lingering_time", HSL, TAKE1).inert(),
            once("lingering_timeout", HSL, TAKE1).inert(),
            d("reset_timedout_connection", HSL, FLAG).inert(),
            d("absolute_redirect", HSL, FLAG),
            d("server_name_in_redirect", HSL, FLAG),
            d("port_in_redirect", HSL, FLAG),
            d("msie_padding", HSL, FLAG).default_only("on"),
            d("msie_refresh", HSL, FLAG).inert(),
            d("log_not_found", HSL, FLAG),
            d("log_subrequest", HSL, FLAG).inert(),
            d("recursive_error_pages", HSL, FLAG),
            once("server_tokens", HSL, TAKE1),
            d("chunked_transfer_encoding", HSL, FLAG),
            d("etag", HSL, FLAG),
            d("error_page", HSLI, MORE2),
            once("post_action", HSLI, TAKE1).refuse(),
            once("open_file_cache", HSL, TAKE12).inert(),
            once("open_file_cache_valid", HSL, TAKE1).inert(),
            once("open_file_cache_min_uses", HSL, TAKE1).inert(),
            d("open_file_cache_errors", HSL, FLAG).inert(),
            d("open_file_cache_events", HSL, FLAG).warn(),
            once("resolver", HSL, MORE1),
            once("resolver_timeout", HSL, TAKE1),
            d("gzip_vary", HSL, FLAG),
            once("gzip_http_version", HSL, TAKE1),
            d("gzip_proxied", HSL, MORE1),
            d("gzip_disable", HSL, MORE1),
            once("disable_symlinks", HSL, TAKE12).refuse_unless("off"),
            once("try_files", SL, MORE2),
            once("if_modified_since", HSL, TAKE1),
            once("max_ranges", HSL, TAKE1).refuse(),
            once("output_buffers", HSL, TAKE2).inert(),
        ],
    },
    // `access_log` and `log_format`.
    Module {
        name: "http_log_module",
        flag: Flag::None,
        directives: &[
            d("log_format", HTTP, MORE2),
            d("access_log", HSLI | LMT, MORE1),
            once("open_log_file_cache", HSL, TAKE1234).inert(),
        ],
    },
    // Files served as they are: no directives.
    Module {
        name: "http_static_module",
        flag: Flag::None,
        directives: &[],
    },
    // `index`.
    Module {
        name: "http_index_module",
        flag: Flag::None,
        directives: &[d("index", HSL, MORE1)],
    },
    // `rewrite`, `return`, `if`, `set`, `break`.
    Module {
        name: "http_rewrite_module",
        flag: Flag::Standard,
        directives: &[
            d("rewrite", REWRITE, TAKE23),
            d("return", REWRITE, TAKE12),
            d("break", REWRITE, NOARGS),
            block("if", SL, MORE1, Block::If),
            d("set", REWRITE, TAKE2),
            d("rewrite_log", HTTP | REWRITE, FLAG),
            d("uninitialized_variable_warn", HTTP | REWRITE, FLAG),
        ],
    },
    // `allow` and `deny`.
    Module {
        name: "http_access_module",
        flag: Flag::Standard,
        directives: &[d("allow", HSL | LMT, TAKE1), d("deny", HSL | LMT, TAKE1)],
    },
    // Users and passwords from a file.
    Module {
        name: "http_auth_basic_module",
        flag: Flag::Standard,
        directives: &[
            once("auth_basic", HSL | LMT, TAKE1),
            once("auth_basic_user_file", HSL | LMT, TAKE1),
        ],
    },
    // Authorization by a subrequest.
    Module {
        name: "http_auth_request_module",
        flag: Flag::Optional,
        directives: &[
            once("auth_request", HSL, TAKE1),
            d("auth_request_set", HSL, TAKE2),
        ],
    },
    // JWT authentication, as NGINX Plus has it.
    Module {
        name: "http_auth_jwt_module",
        flag: Flag::Optional,
        directives: &[
            d("auth_jwt", HSL | LMT, TAKE12),
            d("auth_jwt_key_file", HSL | LMT, TAKE1),
            d("auth_jwt_key_request", HSL | LMT, TAKE1),
            d("auth_jwt_key_cache", HSL, TAKE1),
            d("auth_jwt_leeway", HSL, TAKE1),
            d("auth_jwt_type", HSL | LMT, TAKE1),
            d("auth_jwt_require", HSL | LMT, MORE1),
            d("auth_jwt_claim_set", HTTP, MORE2),
            d("auth_jwt_header_set", HTTP, MORE2),
            once("auth_jwt_verified_cache", HSL, TAKE12),
        ],
    },
    // Request rate limits.
    Module {
        name: "http_limit_req_module",
        flag: Flag::Standard,
        directives: &[
            d("limit_req_zone", HTTP, TAKE3),
            d("limit_req", HSL, TAKE123),
            once("limit_req_status", HSL, TAKE1),
            once("limit_req_log_level", HSL, TAKE1),
            once("limit_req_dry_run", HSL, FLAG),
        ],
    },
    // Limits on the requests in progress.
    Module {
        name: "http_limit_conn_module",
        flag: Flag::Standard,
        directives: &[
            d("limit_conn_zone", HTTP, TAKE2),
            d("limit_conn", HSL, TAKE2),
            once("limit_conn_status", HSL, TAKE1),
            once("limit_conn_log_level", HSL, TAKE1),
            once("limit_conn_dry_run", HSL, FLAG),
        ],
    },
    // The client address from a header.
    Module {
        name: "http_realip_module",
        flag: Flag::Optional,
        directives: &[
            d("set_real_ip_from", HSL, TAKE1),
            once("real_ip_header", HSL, TAKE1),
            once("real_ip_recursive", HSL, FLAG),
        ],
    },
    // Signed links.
    Module {
        name: "http_secure_link_module",
        flag: Flag::Optional,
        directives: &[
            once("secure_link", HSL, TAKE1),
            once("secure_link_md5", HSL, TAKE1),
            once("secure_link_secret", LOC, TAKE1),
        ],
    },
    // `valid_referers` and `$invalid_referer`.
    Module {
        name: "http_referer_module",
        flag: Flag::Standard,
        directives: &[
            d("valid_referers", SL, MORE1),
            once("referer_hash_max_size", SL, TAKE1).inert(),
            once("referer_hash_bucket_size", SL, TAKE1).inert(),
        ],
    },
    // Connection counters and the status page.
    Module {
        name: "http_stub_status_module",
        flag: Flag::Optional,
        directives: &[d("stub_status", SL, NOARGS | TAKE1)],
    },
    // Charsets: naming them, and recoding between them.
    Module {
        name: "http_charset_module",
        flag: Flag::Standard,
        directives: &[
            once("charset", HSLI, TAKE1),
            once("source_charset", HSLI, TAKE1),
            d("override_charset", HSLI, FLAG),
            d("charset_types", HSL, MORE1),
            block("charset_map", HTTP, TAKE2, Block::Data),
        ],
    },
    // Copies of requests to other locations.
    Module {
        name: "http_mirror_module",
        flag: Flag::Standard,
        directives: &[
            d("mirror", HSL, TAKE1),
            once("mirror_request_body", HSL, FLAG),
        ],
    },
    // `map`.
    Module {
        name: "http_map_module",
        flag: Flag::Standard,
        directives: &[
            block("map", HTTP, TAKE2, Block::Data),
            once("map_hash_max_size", HTTP, TAKE1).inert(),
            once("map_hash_bucket_size", HTTP, TAKE1).inert(),
        ],
    },
    // Variables by client address.
    Module {
        name: "http_geo_module",
        flag: Flag::Standard,
        directives: &[block("geo", HTTP, TAKE12, Block::Data)],
    },
    // A/B variables.
    Module {
        name: "http_split_clients_module",
        flag: Flag::Standard,
        directives: &[block("split_clients", HTTP, TAKE2, Block::Data)],
    },
    // `add_header`, `add_trailer` and `expires`.
    Module {
        name: "http_headers_module",
        flag: Flag::None,
        directives: &[
            d("add_header", HSLI, TAKE23),
            d("add_trailer", HSLI, TAKE23),
            once("expires", HSLI, TAKE12),
        ],
    },
    // Compression.
    Module {
        name: "http_gzip_module",
        flag: Flag::Standard,
        directives: &[
            d("gzip", HSLI, FLAG),
            once("gzip_buffers", HSL, TAKE2),
            d("gzip_types", HSL, MORE1),
            once("gzip_comp_level", HSL, TAKE1),
            once("gzip_window", HSL, TAKE1),
            once("gzip_hash", HSL, TAKE1),
            once("postpone_gzipping", HSL, TAKE1),
            d("gzip_no_buffer", HSL, FLAG),
            once("gzip_min_length", HSL, TAKE1),
        ],
    },
    // Precompressed files.
    Module {
        name: "http_gzip_static_module",
        flag: Flag::Optional,
        directives: &[once("gzip_static", HSL, TAKE1)],
    },
    // Text replaced in response bodies.
    Module {
        name: "http_sub_module",
        flag: Flag::Optional,
        directives: &[
            d("sub_filter", HSL, TAKE2),
            d("sub_filter_types", HSL, MORE1),
            d("sub_filter_once", HSL, FLAG),
            d("sub_filter_last_modified", HSL, FLAG),
        ],
    },
    // Decompression for clients that do not take gzip.
    Module {
        name: "http_gunzip_module",
        flag: Flag::Optional,
        directives: &[d("gunzip", HSL, FLAG), once("gunzip_buffers", HSL, TAKE2)],
    },
    // `upstream` groups.
    Module {
        name: "http_upstream_module",
        flag: Flag::None,
        directives: &[
            block("upstream", HTTP, TAKE1, Block::Ctx(UPS)),
            d("server", UPS, MORE1),
        ],
    },
    // `least_conn`.
    Module {
        name: "http_upstream_least_conn_module",
        flag: Flag::Standard,
        directives: &[d("least_conn", UPS, NOARGS)],
    },
    // `hash`.
    Module {
        name: "http_upstream_hash_module",
        flag: Flag::Standard,
        directives: &[d("hash", UPS, TAKE12)],
    },
    // `ip_hash`.
    Module {
        name: "http_upstream_ip_hash_module",
        flag: Flag::Standard,
        directives: &[d("ip_hash", UPS, NOARGS)],
    },
    // `random`.
    Module {
        name: "http_upstream_random_module",
        flag: Flag::Standard,
        directives: &[d("random", UPS, NOARGS | TAKE12)],
    },
    // Connection pools to upstreams.
    Module {
        name: "http_upstream_keepalive_module",
        flag: Flag::Standard,
        directives: &[
            once("keepalive", UPS, TAKE1),
            d("keepalive_requests", UPS, TAKE1),
            once("keepalive_timeout", UPS, TAKE1),
            d("keepalive_time", UPS, TAKE1),
        ],
    },
    // `zone`: peer state is shared by all workers without it; with it, the API may change
    // the group's servers, which NGINX Plus's `state` file keeps.
    Module {
        name: "http_upstream_zone_module",
        flag: Flag::Standard,
        directives: &[d("zone", UPS, TAKE12), once("state", UPS, TAKE1)],
    },
    // Active health checks of upstream servers, as NGINX Plus has them (no configure flag).
    // NGINX Plus's API module (`api`, `status_zone`), with portcullis's own
    // Prometheus metrics and dashboard.
    Module {
        name: "http_api_module",
        flag: Flag::None,
        directives: &[
            once("status_zone", SRV | LOC | LIF, TAKE1),
            once("api", LOC, NOARGS | TAKE1),
            once("prometheus_metrics", LOC, NOARGS),
            once("dashboard", LOC, NOARGS | TAKE1),
        ],
    },
    Module {
        name: "http_upstream_hc_module",
        flag: Flag::None,
        directives: &[
            d("health_check", LOC, ANY),
            block("match", HTTP, TAKE1, Block::Data),
        ],
    },
    // `proxy_pass` and its settings.
    Module {
        name: "http_proxy_module",
        flag: Flag::Standard,
        directives: &[
            once("proxy_pass", LOC | LIF | LMT, TAKE1),
            d("proxy_redirect", HSL, TAKE12),
            d("proxy_cookie_domain", HSL, TAKE12),
            d("proxy_cookie_path", HSL, TAKE12),
            d("proxy_cookie_flags", HSL, TAKE1234),
            once("proxy_store", HSL, TAKE1).refuse_unless("off"),
            once("proxy_store_access", HSL, TAKE123).warn(),
            d("proxy_buffering", HSL, FLAG),
            d("proxy_request_buffering", HSL, FLAG),
            d("proxy_ignore_client_abort", HSL, FLAG),
            once("proxy_bind", HSL, TAKE12).warn(),
            d("proxy_socket_keepalive", HSL, FLAG).warn(),
            once("proxy_connect_timeout", HSL, TAKE1),
            once("proxy_send_timeout", HSL, TAKE1),
            once("proxy_send_lowat", HSL, TAKE1).warn(),
            d("proxy_intercept_errors", HSL, FLAG),
            d("proxy_set_header", HSL, TAKE2),
            once("proxy_headers_hash_max_size", HSL, TAKE1).warn(),
            once("proxy_headers_hash_bucket_size", HSL, TAKE1).warn(),
            once("proxy_set_body", HSL, TAKE1),
            once("proxy_method", HSL, TAKE1),
            d("proxy_pass_request_headers", HSL, FLAG),
            d("proxy_pass_request_body", HSL, FLAG),
            once("proxy_buffer_size", HSL, TAKE1),
            once("proxy_read_timeout", HSL, TAKE1),
            once("proxy_buffers", HSL, TAKE2),
            once("proxy_busy_buffers_size", HSL, TAKE1),
            d("proxy_force_ranges", HSL, FLAG),
            once("proxy_limit_rate", HSL, TAKE1).refuse_unless("0"),
            once("proxy_cache", HSL, TAKE1),
            once("proxy_cache_key", HSL, TAKE1),
            d("proxy_cache_path", HTTP, MORE2),
            d("proxy_cache_bypass", HSL, MORE1),
            d("proxy_no_cache", HSL, MORE1),
            d("proxy_cache_valid", HSL, MORE1),
            once("proxy_cache_min_uses", HSL, TAKE1),
            once("proxy_cache_max_range_offset", HSL, TAKE1),
            d("proxy_cache_use_stale", HSL, MORE1),
            d("proxy_cache_methods", HSL, MORE1),
            d("proxy_cache_lock", HSL, FLAG),
            once("proxy_cache_lock_timeout", HSL, TAKE1),
            once("proxy_cache_lock_age", HSL, TAKE1),
            d("proxy_cache_revalidate", HSL, FLAG),
            d("proxy_cache_convert_head", HSL, FLAG),
            d("proxy_cache_background_update", HSL, FLAG),
            once("proxy_temp_path", HSL, TAKE1234).inert(),
            once("proxy_max_temp_file_size", HSL, TAKE1).warn(),
            once("proxy_temp_file_write_size", HSL, TAKE1).warn(),
            d("proxy_next_upstream", HSL, MORE1),
            once("proxy_next_upstream_tries", HSL, TAKE1),
            once("proxy_next_upstream_timeout", HSL, TAKE1),
            d("proxy_pass_header", HSL, TAKE1),
            d("proxy_hide_header", HSL, TAKE1),
            d("proxy_ignore_headers", HSL, MORE1),
            once("proxy_http_version", HSL, TAKE1),
            d("proxy_ssl_session_reuse", HSL, FLAG),
            d("proxy_ssl_protocols", HSL, MORE1),
            once("proxy_ssl_ciphers", HSL, TAKE1),
            once("proxy_ssl_name", HSL, TAKE1),
            d("proxy_ssl_server_name", HSL, FLAG),
            d("proxy_ssl_verify", HSL, FLAG),
            once("proxy_ssl_verify_depth", HSL, TAKE1),
            once("proxy_ssl_trusted_certificate", HSL, TAKE1),
            once("proxy_ssl_crl", HSL, TAKE1),
            once("proxy_ssl_certificate", HSL, TAKE1),
            once("proxy_ssl_certificate_key", HSL, TAKE1),
            once("proxy_ssl_password_file", HSL, TAKE1),
            d("proxy_ssl_conf_command", HSL, TAKE2).warn(),
        ],
    },
    // TLS.
    Module {
        name: "http_ssl_module",
        flag: Flag::Optional,
        directives: &[
            d("ssl", HS, FLAG),
            d("ssl_certificate", HS, TAKE1),
            d("ssl_certificate_key", HS, TAKE1),
            once("ssl_password_file", HS, TAKE1),
            // Read, with its own warning: DHE suites are not offered.
            once("ssl_dhparam", HS, TAKE1),
            once("ssl_ecdh_curve", HS, TAKE1),
            d("ssl_protocols", HS, MORE1),
            once("ssl_ciphers", HS, TAKE1),
            once("ssl_buffer_size", HS, TAKE1),
            once("ssl_verify_client", HS, TAKE1),
            once("ssl_verify_depth", HS, TAKE1),
            once("ssl_client_certificate", HS, TAKE1),
            once("ssl_trusted_certificate", HS, TAKE1),
            d("ssl_prefer_server_ciphers", HS, FLAG),
            d("ssl_session_cache", HS, TAKE12),
            d("ssl_session_tickets", HS, FLAG),
            d("ssl_session_ticket_key", HS, TAKE1),
            once("ssl_session_timeout", HS, TAKE1),
            once("ssl_crl", HS, TAKE1),
            once("ssl_ocsp", HS, TAKE1).refuse_unless("off"),
            once("ssl_ocsp_responder", HS, TAKE1).warn(),
            once("ssl_ocsp_cache", HS, TAKE1).warn(),
            d("ssl_stapling", HS, FLAG).default_only("off"),
            once("ssl_stapling_file", HS, TAKE1).warn(),
            once("ssl_stapling_responder", HS, TAKE1).warn(),
            // Nothing is stapled (`ssl_stapling` is ignored), so there is nothing to verify.
            d("ssl_stapling_verify", HS, FLAG).default_only("off"),
            d("ssl_early_data", HS, FLAG).default_only("off"),
            d("ssl_conf_command", HS, TAKE2).warn(),
            d("ssl_reject_handshake", HS, FLAG),
        ],
    },
    // HTTP/2.
    Module {
        name: "http_v2_module",
        flag: Flag::Optional,
        directives: &[
            d("http2", HS, FLAG),
            once("http2_recv_buffer_size", HTTP, TAKE1),
            once("http2_pool_size", HS, TAKE1),
            once("http2_max_concurrent_streams", HS, TAKE1),
            once("http2_max_concurrent_pushes", HS, TAKE1).warn(),
            d("http2_max_requests", HS, TAKE1),
            d("http2_max_field_size", HS, TAKE1),
            d("http2_max_header_size", HS, TAKE1),
            once("http2_body_preread_size", HS, TAKE1),
            once("http2_streams_index_size", HS, TAKE1),
            d("http2_recv_timeout", HS, TAKE1),
            d("http2_idle_timeout", HS, TAKE1),
            once("http2_chunk_size", HSL, TAKE1),
            d("http2_push_preload", HSL, FLAG).warn(),
            d("http2_push", HSL, TAKE1).warn(),
        ],
    },
    // Modules of nginx's standard build that portcullis does not have: their directives are
    // unknown, as they are to an nginx configured without them.
    Module {
        name: "http_ssi_module",
        flag: Flag::Standard,
        directives: &[
            once("ssi", HSLI, FLAG),
            once("ssi_silent_errors", HSL, FLAG),
            once("ssi_ignore_recycled_buffers", HSL, FLAG),
            once("ssi_min_file_chunk", HSL, TAKE1),
            once("ssi_value_length", HSL, TAKE1),
            d("ssi_types", HSL, MORE1),
            once("ssi_last_modified", HSL, FLAG),
        ],
    },
    Module {
        name: "http_userid_module",
        flag: Flag::Standard,
        directives: &[],
    },
    Module {
        name: "http_autoindex_module",
        flag: Flag::Standard,
        directives: &[
            d("autoindex", HSL, FLAG),
            d("autoindex_format", HSL, TAKE1),
            d("autoindex_exact_size", HSL, FLAG),
            d("autoindex_localtime", HSL, FLAG),
        ],
    },
    Module {
        name: "http_fastcgi_module",
        flag: Flag::Standard,
        directives: &[
            once("fastcgi_pass", LOC | LIF, TAKE1),
            d("fastcgi_param", HSL, TAKE23),
            once("fastcgi_index", HSL, TAKE1),
            once("fastcgi_split_path_info", LOC, TAKE1),
            d("fastcgi_keep_conn", HSL, FLAG),
            d("fastcgi_pass_request_headers", HSL, FLAG),
            d("fastcgi_pass_request_body", HSL, FLAG),
            d("fastcgi_hide_header", HSL, TAKE1),
            d("fastcgi_pass_header", HSL, TAKE1),
            d("fastcgi_ignore_headers", HSL, MORE1),
            d("fastcgi_intercept_errors", HSL, FLAG),
            d("fastcgi_ignore_client_abort", HSL, FLAG),
            once("fastcgi_connect_timeout", HSL, TAKE1),
            once("fastcgi_send_timeout", HSL, TAKE1),
            once("fastcgi_read_timeout", HSL, TAKE1),
            d("fastcgi_next_upstream", HSL, MORE1),
            once("fastcgi_next_upstream_tries", HSL, TAKE1),
            once("fastcgi_next_upstream_timeout", HSL, TAKE1),
            d("fastcgi_buffering", HSL, FLAG),
            d("fastcgi_request_buffering", HSL, FLAG),
            once("fastcgi_buffer_size", HSL, TAKE1),
            once("fastcgi_buffers", HSL, TAKE2),
            once("fastcgi_busy_buffers_size", HSL, TAKE1),
            d("fastcgi_force_ranges", HSL, FLAG),
            once("fastcgi_temp_path", HSL, TAKE1234).inert(),
            once("fastcgi_max_temp_file_size", HSL, TAKE1).warn(),
            once("fastcgi_temp_file_write_size", HSL, TAKE1).warn(),
            once("fastcgi_bind", HSL, TAKE12).warn(),
            d("fastcgi_socket_keepalive", HSL, FLAG).warn(),
            once("fastcgi_send_lowat", HSL, TAKE1).warn(),
            d("fastcgi_catch_stderr", HSL, TAKE1).warn(),
            once("fastcgi_limit_rate", HSL, TAKE1).refuse_unless("0"),
            once("fastcgi_store", HSL, TAKE1).refuse_unless("off"),
            once("fastcgi_store_access", HSL, TAKE123).warn(),
            d("fastcgi_cache_path", HTTP, MORE2),
            once("fastcgi_cache", HSL, TAKE1),
            once("fastcgi_cache_key", HSL, TAKE1),
            d("fastcgi_cache_valid", HSL, MORE1),
            d("fastcgi_cache_bypass", HSL, MORE1),
            d("fastcgi_no_cache", HSL, MORE1),
            d("fastcgi_cache_use_stale", HSL, MORE1),
            d("fastcgi_cache_methods", HSL, MORE1),
            once("fastcgi_cache_min_uses", HSL, TAKE1),
            d("fastcgi_cache_lock", HSL, FLAG),
            once("fastcgi_cache_lock_timeout", HSL, TAKE1),
            once("fastcgi_cache_lock_age", HSL, TAKE1),
            d("fastcgi_cache_revalidate", HSL, FLAG),
            d("fastcgi_cache_background_update", HSL, FLAG),
            once("fastcgi_cache_max_range_offset", HSL, TAKE1),
        ],
    },
    Module {
        name: "http_uwsgi_module",
        flag: Flag::Standard,
        directives: &[
            once("uwsgi_pass", LOC | LIF, TAKE1),
            d("uwsgi_param", HSL, TAKE23),
            d("uwsgi_pass_request_headers", HSL, FLAG),
            d("uwsgi_pass_request_body", HSL, FLAG),
            d("uwsgi_hide_header", HSL, TAKE1),
            d("uwsgi_pass_header", HSL, TAKE1),
            d("uwsgi_ignore_headers", HSL, MORE1),
            d("uwsgi_intercept_errors", HSL, FLAG),
            d("uwsgi_ignore_client_abort", HSL, FLAG),
            once("uwsgi_connect_timeout", HSL, TAKE1),
            once("uwsgi_send_timeout", HSL, TAKE1),
            once("uwsgi_read_timeout", HSL, TAKE1),
            d("uwsgi_next_upstream", HSL, MORE1),
            once("uwsgi_next_upstream_tries", HSL, TAKE1),
            once("uwsgi_next_upstream_timeout", HSL, TAKE1),
            d("uwsgi_buffering", HSL, FLAG),
            d("uwsgi_request_buffering", HSL, FLAG),
            once("uwsgi_buffer_size", HSL, TAKE1),
            once("uwsgi_buffers", HSL, TAKE2),
            once("uwsgi_busy_buffers_size", HSL, TAKE1),
            d("uwsgi_force_ranges", HSL, FLAG),
            once("uwsgi_temp_path", HSL, TAKE1234).inert(),
            once("uwsgi_max_temp_file_size", HSL, TAKE1).warn(),
            once("uwsgi_temp_file_write_size", HSL, TAKE1).warn(),
            once("uwsgi_bind", HSL, TAKE12).warn(),
            d("uwsgi_socket_keepalive", HSL, FLAG).warn(),
            once("uwsgi_send_lowat", HSL, TAKE1).warn(),
            once("uwsgi_limit_rate", HSL, TAKE1).refuse_unless("0"),
            once("uwsgi_store", HSL, TAKE1).refuse_unless("off"),
            once("uwsgi_store_access", HSL, TAKE123).warn(),
            d("uwsgi_cache_path", HTTP, MORE2),
            once("uwsgi_cache", HSL, TAKE1),
            once("uwsgi_cache_key", HSL, TAKE1),
            d("uwsgi_cache_valid", HSL, MORE1),
            d("uwsgi_cache_bypass", HSL, MORE1),
            d("uwsgi_no_cache", HSL, MORE1),
            d("uwsgi_cache_use_stale", HSL, MORE1),
            d("uwsgi_cache_methods", HSL, MORE1),
            once("uwsgi_cache_min_uses", HSL, TAKE1),
            d("uwsgi_cache_lock", HSL, FLAG),
            once("uwsgi_cache_lock_timeout", HSL, TAKE1),
            once("uwsgi_cache_lock_age", HSL, TAKE1),
            d("uwsgi_cache_revalidate", HSL, FLAG),
            d("uwsgi_cache_background_update", HSL, FLAG),
            once("uwsgi_cache_max_range_offset", HSL, TAKE1),
            once("uwsgi_modifier1", HSL, TAKE1),
            once("uwsgi_modifier2", HSL, TAKE1),
        ],
    },
    Module {
        name: "http_scgi_module",
        flag: Flag::Standard,
        directives: &[
            once("scgi_pass", LOC | LIF, TAKE1),
            d("scgi_param", HSL, TAKE23),
            d("scgi_pass_request_headers", HSL, FLAG),
            d("scgi_pass_request_body", HSL, FLAG),
            d("scgi_hide_header", HSL, TAKE1),
            d("scgi_pass_header", HSL, TAKE1),
            d("scgi_ignore_headers", HSL, MORE1),
            d("scgi_intercept_errors", HSL, FLAG),
            d("scgi_ignore_client_abort", HSL, FLAG),
            once("scgi_connect_timeout", HSL, TAKE1),
            once("scgi_send_timeout", HSL, TAKE1),
            once("scgi_read_timeout", HSL, TAKE1),
            d("scgi_next_upstream", HSL, MORE1),
            once("scgi_next_upstream_tries", HSL, TAKE1),
            once("scgi_next_upstream_timeout", HSL, TAKE1),
            d("scgi_buffering", HSL, FLAG),
            d("scgi_request_buffering", HSL, FLAG),
            once("scgi_buffer_size", HSL, TAKE1),
            once("scgi_buffers", HSL, TAKE2),
            once("scgi_busy_buffers_size", HSL, TAKE1),
            d("scgi_force_ranges", HSL, FLAG),
            once("scgi_temp_path", HSL, TAKE1234).inert(),
            once("scgi_max_temp_file_size", HSL, TAKE1).warn(),
            once("scgi_temp_file_write_size", HSL, TAKE1).warn(),
            once("scgi_bind", HSL, TAKE12).warn(),
            d("scgi_socket_keepalive", HSL, FLAG).warn(),
            once("scgi_send_lowat", HSL, TAKE1).warn(),
            once("scgi_limit_rate", HSL, TAKE1).refuse_unless("0"),
            once("scgi_store", HSL, TAKE1).refuse_unless("off"),
            once("scgi_store_access", HSL, TAKE123).warn(),
            d("scgi_cache_path", HTTP, MORE2),
            once("scgi_cache", HSL, TAKE1),
            once("scgi_cache_key", HSL, TAKE1),
            d("scgi_cache_valid", HSL, MORE1),
            d("scgi_cache_bypass", HSL, MORE1),
            d("scgi_no_cache", HSL, MORE1),
            d("scgi_cache_use_stale", HSL, MORE1),
            d("scgi_cache_methods", HSL, MORE1),
            once("scgi_cache_min_uses", HSL, TAKE1),
            d("scgi_cache_lock", HSL, FLAG),
            once("scgi_cache_lock_timeout", HSL, TAKE1),
            once("scgi_cache_lock_age", HSL, TAKE1),
            d("scgi_cache_revalidate", HSL, FLAG),
            d("scgi_cache_background_update", HSL, FLAG),
            once("scgi_cache_max_range_offset", HSL, TAKE1),
        ],
    },
    Module {
        name: "http_grpc_module",
        flag: Flag::Standard,
        directives: &[
            once("grpc_pass", LOC | LIF, TAKE1),
            d("grpc_set_header", HSL, TAKE2),
            d("grpc_pass_header", HSL, TAKE1),
            d("grpc_hide_header", HSL, TAKE1),
            d("grpc_ignore_headers", HSL, MORE1),
            d("grpc_intercept_errors", HSL, FLAG),
            once("grpc_connect_timeout", HSL, TAKE1),
            once("grpc_send_timeout", HSL, TAKE1),
            once("grpc_read_timeout", HSL, TAKE1),
            d("grpc_next_upstream", HSL, MORE1),
            once("grpc_next_upstream_tries", HSL, TAKE1),
            once("grpc_next_upstream_timeout", HSL, TAKE1),
            once("grpc_buffer_size", HSL, TAKE1),
            once("grpc_bind", HSL, TAKE12).warn(),
            d("grpc_socket_keepalive", HSL, FLAG).warn(),
            d("grpc_ssl_session_reuse", HSL, FLAG),
            d("grpc_ssl_protocols", HSL, MORE1),
            once("grpc_ssl_ciphers", HSL, TAKE1),
            once("grpc_ssl_name", HSL, TAKE1),
            d("grpc_ssl_server_name", HSL, FLAG),
            d("grpc_ssl_verify", HSL, FLAG),
            once("grpc_ssl_verify_depth", HSL, TAKE1),
            once("grpc_ssl_trusted_certificate", HSL, TAKE1),
            once("grpc_ssl_crl", HSL, TAKE1),
            once("grpc_ssl_certificate", HSL, TAKE1),
            once("grpc_ssl_certificate_key", HSL, TAKE1),
            once("grpc_ssl_password_file", HSL, TAKE1),
            d("grpc_ssl_conf_command", HSL, TAKE2).warn(),
        ],
    },
    Module {
        name: "http_memcached_module",
        flag: Flag::Standard,
        directives: &[],
    },
    Module {
        name: "http_empty_gif_module",
        flag: Flag::Standard,
        directives: &[d("empty_gif", LOC, NOARGS)],
    },
    Module {
        name: "http_browser_module",
        flag: Flag::Standard,
        directives: &[],
    },
];

/// Every directive of every module, in registry order.
pub fn directives() -> impl Iterator<Item = &'static Spec> {
    MODULES.iter().flat_map(|m| m.directives)
}

/// The entries named `name`, in registry order.
pub(crate) fn entries(name: &str) -> impl Iterator<Item = &'static Spec> + '_ {
    directives().filter(move |s| s.name == name)
}

/// Whether `name` is a directive portcullis accepts somewhere (`include` included).
pub fn is_known(name: &str) -> bool {
    name == "include" || entries(name).next().is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argument_counts() {
        let spec = |name: &str, c: u16| {
            entries(name)
                .find(|s| s.contexts & c != 0)
                .expect("in table")
        };
        let root = spec("root", HTTP);
        assert!(root.takes(1) && !root.takes(0) && !root.takes(2));
        let ka = spec("keepalive_timeout", HTTP);
        assert!(ka.takes(1) && ka.takes(2) && !ka.takes(3));
        assert!(!spec("keepalive_timeout", UPS).takes(2));
        let ep = spec("error_page", HTTP);
        assert!(!ep.takes(1) && ep.takes(2) && ep.takes(9));
        let random = spec("random", UPS);
        assert!(random.takes(0) && random.takes(2) && !random.takes(3));
        assert!(spec("sendfile", HTTP).takes(1) && !spec("sendfile", HTTP).takes(2));
        assert!(!spec("internal", LOC).takes(1));
    }

    #[test]
    fn known_names() {
        assert!(is_known("proxy_ssl_verify"));
        assert!(is_known("include"));
        assert!(is_known("auth_jwt_verified_cache"));
        assert!(!is_known("autoindexes"));
        assert!(!is_known(""));
    }

    #[test]
    fn shared_names_resolve_by_context() {
        let server: Vec<_> = entries("server").collect();
        assert_eq!(server.len(), 2);
        assert_eq!(server[0].block, Block::Ctx(SRV));
        assert_eq!(server[1].block, Block::No);
    }

    #[test]
    fn every_entry_is_sane() {
        for s in directives() {
            assert!(s.contexts != 0, "{} has no context", s.name);
            assert!(s.args != 0, "{} takes nothing", s.name);
            assert!(
                !s.name.is_empty()
                    && s.name
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            );
        }
    }
}
