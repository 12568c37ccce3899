//! Variables: `$name` in a directive's argument is resolved to a [`Var`] when the configuration
//! loads, so a request only evaluates a list of literal and variable pieces.

use portcullis_config::{ConfigError, Directive};

/// A variable known at load time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Var {
    Args,
    BodyBytesSent,
    BytesSent,
    Capture(usize),
    Connection,
    ConnectionRequests,
    ContentLength,
    ContentType,
    Cookie(String),
    DocumentRoot,
    /// `$realpath_root`: the root with every symbolic link resolved.
    RealpathRoot,
    /// `$binary_remote_addr`: the client address in 4 (IPv4) or 16 (IPv6) bytes.
    BinaryRemoteAddr,
    /// `$connection_time`: seconds since the connection was accepted, to the millisecond.
    ConnectionTime,
    /// `$request_id`: 32 random hex digits, the same for one request wherever used.
    RequestId,
    Host,
    Hostname,
    /// `$http_name`: the first header of the name, spelt with `-` or `_`.
    HttpHeader(String),
    /// `$http_host`, `$http_user_agent`, `$http_referer` and `$http_via`: nginx reads these
    /// from the header it knows by name, never from one spelt with `_`
    /// (underscores_in_headers on).
    NamedHeader(String),
    /// `$http_cookie` and `$http_x_forwarded_for`: every such header, joined by the
    /// separator, as nginx 1.22 reads a repeated one.
    JoinedHeader(String, &'static [u8]),
    IsArgs,
    Arg(String),
    Msec,
    NginxVersion,
    Pid,
    RemoteAddr,
    RemotePort,
    RemoteUser,
    Request,
    RequestFilename,
    RequestLength,
    RequestMethod,
    RequestTime,
    RequestUri,
    Scheme,
    SentHttp(String),
    ServerAddr,
    ServerName,
    ServerPort,
    ServerProtocol,
    Status,
    TimeIso8601,
    TimeLocal,
    Uri,
    /// A variable of `set` (or a regex's named capture): its slot among the request's values.
    Set(usize),
    /// A `set` variable named as a prefixed one (`$arg_x`, `$http_x`, `$cookie_x`): its value
    /// once a `set` gave it one in the request, the prefixed variable's until then, as in
    /// nginx.
    SetOr(usize, Box<Var>),
    UpstreamAddr,
    /// `$upstream_cache_status`.
    UpstreamCacheStatus,
    UpstreamStatus,
    UpstreamResponseTime,
    UpstreamConnectTime,
    /// `$upstream_response_length`: body bytes from each upstream tried.
    UpstreamResponseLength,
    /// `$upstream_bytes_sent` and `$upstream_bytes_received`: bytes to and from each
    /// upstream tried.
    UpstreamBytesSent,
    UpstreamBytesReceived,
    /// `$upstream_http_<name>`: a header of the last upstream's response.
    UpstreamHttp(String),
    /// `$upstream_cookie_<name>`: a cookie the last upstream's response set.
    UpstreamCookie(String),
    /// `$tcpinfo_rtt`, `$tcpinfo_rttvar`, `$tcpinfo_snd_cwnd`, `$tcpinfo_rcv_space`.
    TcpInfo(TcpInfo),
    /// `$proxy_protocol_*`: what the connection's PROXY protocol header named.
    ProxyProtocol(ProxyProtocolVar),
    /// `$pipe`: "p" for a pipelined request, else ".".
    Pipe,
    /// `$http2`: `h2` over TLS, `h2c` over plain TCP, empty for HTTP/1.x.
    Http2,
    /// `$request_completion`: `OK` once the response went out whole.
    RequestCompletion,
    /// `$limit_rate`: the response's rate limit, as set or fixed when the response began.
    LimitRate,
    /// `$sent_trailer_<name>` (lowercase, `-` for `_`): a trailer `add_trailer` sent.
    SentTrailer(String),
    /// Variables of features that never take part here, whose value is then empty in nginx
    /// too: `$upstream_trailer_*` (nginx 1.22's proxy keeps no upstream trailers) and
    /// `$ssl_early_data` (TLS early data is never accepted).
    Empty,
    /// `$request_body`: the client's body, when it was read whole to be proxied.
    RequestBody,
    UpstreamHeaderTime,
    /// `$https` and the `$ssl_*` variables of the connection's TLS.
    Ssl(SslVar),
    /// A variable a module declared (`$jwt_claim_*` of `auth_jwt`, say).
    Module(ModuleVar),
}

/// A module's variable: the module's place in the registry, and what the module compiled of
/// the name, which only it reads.
#[derive(Clone)]
pub struct ModuleVar {
    pub module: usize,
    pub var: std::sync::Arc<dyn std::any::Any + Send + Sync>,
}

impl std::fmt::Debug for ModuleVar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ModuleVar({})", self.module)
    }
}

impl PartialEq for ModuleVar {
    fn eq(&self, other: &Self) -> bool {
        self.module == other.module && std::sync::Arc::ptr_eq(&self.var, &other.var)
    }
}

impl Eq for ModuleVar {}

/// How a module resolves a variable name to what its handler evaluates; `None` for a name
/// that is not its own.
pub(crate) type Resolve =
    Box<dyn Fn(&str) -> Option<std::sync::Arc<dyn std::any::Any + Send + Sync>> + Send + Sync>;

impl Var {
    /// Whether an empty value of the variable is a value nginx's log writes as nothing,
    /// rather than the `-` of one it does not have (`$http2` of an HTTP/1.1 request).
    pub fn empty_is_a_value(&self) -> bool {
        matches!(
            self,
            Var::Http2
                | Var::RequestCompletion
                | Var::IsArgs
                | Var::ServerName
                | Var::Ssl(SslVar::Https)
        )
    }

    /// One of a family of variables named by a prefix and a name of the request's own, which
    /// a `set` of the same name leaves readable until it runs.
    fn is_prefixed(&self) -> bool {
        matches!(
            self,
            Var::HttpHeader(_)
                | Var::NamedHeader(_)
                | Var::JoinedHeader(..)
                | Var::UpstreamHttp(_)
                | Var::UpstreamCookie(_)
                | Var::SentTrailer(_)
                | Var::SentHttp(_)
                | Var::Arg(_)
                | Var::Cookie(_)
        )
    }
}

/// What `$proxy_protocol_addr`, `_port`, `_server_addr` and `_server_port` show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyProtocolVar {
    Addr,
    Port,
    ServerAddr,
    ServerPort,
}

/// One of the kernel's figures of a TCP connection that the `$tcpinfo_*` variables show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TcpInfo {
    /// `$tcpinfo_rtt`: smoothed round-trip time, microseconds.
    Rtt,
    /// `$tcpinfo_rttvar`: its variance.
    RttVar,
    /// `$tcpinfo_snd_cwnd`: the congestion window, segments.
    SndCwnd,
    /// `$tcpinfo_rcv_space`: the receive space.
    RcvSpace,
}

/// The TLS variables, from the connection's handshake; empty on a plain connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslVar {
    /// `$https`: "on" over TLS.
    Https,
    Protocol,
    Cipher,
    /// `$ssl_alpn_protocol`: the protocol ALPN chose, empty without one.
    AlpnProtocol,
    /// `$ssl_curve`: the key exchange group, by OpenSSL's name.
    Curve,
    /// `$ssl_ciphers` and `$ssl_curves`: what the client offered.
    Ciphers,
    Curves,
    ServerName,
    ClientVerify,
    ClientSDn,
    SessionReused,
    /// `$ssl_session_id`: the session's id, in hex.
    SessionId,
    ClientIDn,
    /// `$ssl_client_s_dn_legacy` and `$ssl_client_i_dn_legacy`: OpenSSL's one-line form.
    ClientSDnLegacy,
    ClientIDnLegacy,
    ClientSerial,
    ClientFingerprint,
    ClientVStart,
    ClientVEnd,
    ClientVRemain,
    ClientRawCert,
    ClientCert,
    ClientEscapedCert,
}

/// The variables a configuration declares, known before any of its arguments is compiled,
/// as nginx collects them first (a `$name` may be used above its `set`): `set` targets and
/// regex named captures, each a slot of a request's values; and what the modules declare.
#[derive(Default)]
pub(crate) struct Names {
    pub set: Vec<String>,
    /// The variables that read as empty without a warning while unset, as nginx gives them a
    /// handler of their own: the named groups of regexes, and what only a module sets
    /// (`auth_request_set`).
    pub quiet: Vec<String>,
    /// The modules' variables: each module's place in the registry and how it resolves a name.
    pub modules: Vec<(usize, Resolve)>,
    /// Those that a `set` variable of the same name does not hide (`map` targets).
    pub modules_first: Vec<(usize, Resolve)>,
    /// Some argument reads `$upstream_http_*`: proxied requests keep the upstream's head.
    pub upstream_heads: std::sync::atomic::AtomicBool,
    /// Some argument reads `$request_body`: proxied requests keep the body they read.
    pub request_body: std::sync::atomic::AtomicBool,
    /// Some argument reads `$ssl_ciphers` or `$ssl_curves`: TLS connections keep what the
    /// client offered.
    pub client_hello: std::sync::atomic::AtomicBool,
    /// Some argument reads `$ssl_session_id`: TLS connections find their session's id.
    pub session_id: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for Names {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Names")
            .field("set", &self.set)
            .field("modules", &(self.modules.len() + self.modules_first.len()))
            .finish_non_exhaustive()
    }
}

impl Names {
    /// Makes the variables `resolve` knows the module's at place `module` of the registry.
    pub fn add_module_variables(&mut self, module: usize, resolve: Resolve) {
        self.modules.push((module, resolve));
    }

    /// As [`add_module_variables`](Self::add_module_variables), for variables read in place of
    /// a `set` variable of the same name.
    pub fn add_module_variables_first(&mut self, module: usize, resolve: Resolve) {
        self.modules_first.push((module, resolve));
    }

    /// The variables of a module's blocks (`map`, `geo`, `split_clients`): the `block`
    /// directives among `http`, each making the variable `target` names; a variable's slot is
    /// the place of the last block that makes it (a later block of the same name replaces an
    /// earlier one, as in nginx). They are read in place of a `set` variable of the same name.
    /// A built-in variable is refused as their target, as nginx refuses it.
    pub fn add_block_targets(
        &mut self,
        module: usize,
        http: &[Directive],
        block: &str,
        target: fn(&Directive) -> &str,
    ) -> Result<(), ConfigError> {
        let mut targets = Vec::new();
        for d in http.iter().filter(|d| d.name == block) {
            let name = target(d);
            refuse_built_in(d, name)?;
            targets.push(name.to_owned());
        }
        self.add_module_variables_first(
            module,
            Box::new(move |name| {
                let i = targets.iter().rposition(|n| n.eq_ignore_ascii_case(name))?;
                Some(std::sync::Arc::new(i) as std::sync::Arc<dyn std::any::Any + Send + Sync>)
            }),
        );
        Ok(())
    }

    /// A module's variables of fixed names: a variable's slot is its place in `fixed`.
    pub fn add_fixed(&mut self, module: usize, fixed: &'static [&'static str]) {
        self.add_module_variables(
            module,
            Box::new(move |name| {
                let i = fixed.iter().position(|n| *n == name)?;
                Some(std::sync::Arc::new(i) as std::sync::Arc<dyn std::any::Any + Send + Sync>)
            }),
        );
    }

    fn module_variable(list: &[(usize, Resolve)], name: &str) -> Option<Var> {
        list.iter().find_map(|(module, resolve)| {
            let var = resolve(name)?;
            Some(Var::Module(ModuleVar {
                module: *module,
                var,
            }))
        })
    }

    /// Declares the named groups of regex `pattern`: variables, empty without a warning
    /// until a match sets them.
    pub fn add_named_groups(&mut self, pattern: &str) {
        let from = self.set.len();
        crate::location::named_groups(pattern, &mut self.set);
        self.quiet.extend_from_slice(&self.set[from..]);
    }

    /// The slot of `set` variable `name` (any case: nginx's names are).
    pub fn set_slot(&self, name: &str) -> Option<usize> {
        self.set.iter().position(|n| n.eq_ignore_ascii_case(name))
    }
}

impl Var {
    pub(crate) fn from_name(name: &str, names: &Names) -> Option<Var> {
        // nginx's variable names are case-insensitive: `$HOST` is `$host`. A module's own
        // names are tried as written first, so that `$jwt_claim_userId` keeps its claim's
        // case.
        let lower = &name.to_ascii_lowercase();
        let module_first = Names::module_variable(&names.modules_first, name)
            .or_else(|| Names::module_variable(&names.modules_first, lower));
        if module_first.is_some() {
            return module_first;
        }
        if let Some(slot) = names.set_slot(name) {
            // A `set` leaves a prefixed name readable until it runs, as nginx declares its
            // variable weak; what only a regex or a module sets reads empty until then.
            let quiet = names.quiet.iter().any(|q| q.eq_ignore_ascii_case(name));
            return Some(match Var::unset(name, lower, names) {
                Some(var) if var.is_prefixed() && !quiet => Var::SetOr(slot, Box::new(var)),
                _ => Var::Set(slot),
            });
        }
        Var::unset(name, lower, names)
    }

    /// The variable `name` (`lower` in lowercase) names when no `set` does.
    fn unset(name: &str, lower: &str, names: &Names) -> Option<Var> {
        let module = Names::module_variable(&names.modules, name)
            .or_else(|| Names::module_variable(&names.modules, lower));
        if module.is_some() {
            return module;
        }
        let name = lower;
        // `$1` to `$9` are the captures; nginx has no other variable named by digits.
        if let [digit @ b'1'..=b'9'] = name.as_bytes() {
            return Some(Var::Capture(usize::from(digit - b'0')));
        }
        if name.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let header = |prefix: &str| {
            name.strip_prefix(prefix)
                .map(|rest| rest.to_ascii_lowercase().replace('_', "-"))
        };
        if let Some(h) = header("http_") {
            return Some(match h.as_str() {
                "cookie" => Var::JoinedHeader(h, b"; "),
                "x-forwarded-for" => Var::JoinedHeader(h, b", "),
                "host" | "user-agent" | "referer" | "via" => Var::NamedHeader(h),
                _ => Var::HttpHeader(h),
            });
        }
        if let Some(h) = header("upstream_http_") {
            names
                .upstream_heads
                .store(true, std::sync::atomic::Ordering::Relaxed);
            return Some(Var::UpstreamHttp(h));
        }
        if let Some(c) = name.strip_prefix("upstream_cookie_") {
            names
                .upstream_heads
                .store(true, std::sync::atomic::Ordering::Relaxed);
            return Some(Var::UpstreamCookie(c.to_string()));
        }
        if let Some(t) = name.strip_prefix("sent_trailer_") {
            return Some(Var::SentTrailer(t.to_ascii_lowercase().replace('_', "-")));
        }
        if name.starts_with("upstream_trailer_") {
            return Some(Var::Empty);
        }
        if let Some(h) = header("sent_http_") {
            // A proxied response's fields are its upstream's.
            names
                .upstream_heads
                .store(true, std::sync::atomic::Ordering::Relaxed);
            return Some(Var::SentHttp(h));
        }
        if let Some(a) = name.strip_prefix("arg_") {
            return Some(Var::Arg(a.to_string()));
        }
        if let Some(c) = name.strip_prefix("cookie_") {
            return Some(Var::Cookie(c.to_string()));
        }
        Some(match name {
            "args" | "query_string" => Var::Args,
            "body_bytes_sent" => Var::BodyBytesSent,
            "bytes_sent" => Var::BytesSent,
            "connection" => Var::Connection,
            "connection_requests" => Var::ConnectionRequests,
            "content_length" => Var::ContentLength,
            "content_type" => Var::ContentType,
            "document_root" => Var::DocumentRoot,
            "realpath_root" => Var::RealpathRoot,
            "host" => Var::Host,
            "hostname" => Var::Hostname,
            "is_args" => Var::IsArgs,
            "msec" => Var::Msec,
            "nginx_version" => Var::NginxVersion,
            "pid" => Var::Pid,
            "remote_addr" => Var::RemoteAddr,
            "binary_remote_addr" => Var::BinaryRemoteAddr,
            "connection_time" => Var::ConnectionTime,
            "request_id" => Var::RequestId,
            "remote_port" => Var::RemotePort,
            "remote_user" => Var::RemoteUser,
            "request" => Var::Request,
            "request_filename" => Var::RequestFilename,
            "request_length" => Var::RequestLength,
            "request_method" => Var::RequestMethod,
            "request_time" => Var::RequestTime,
            "request_uri" => Var::RequestUri,
            "scheme" => Var::Scheme,
            "server_addr" => Var::ServerAddr,
            "server_name" => Var::ServerName,
            "server_port" => Var::ServerPort,
            "server_protocol" => Var::ServerProtocol,
            "status" => Var::Status,
            "time_iso8601" => Var::TimeIso8601,
            "time_local" => Var::TimeLocal,
            "uri" | "document_uri" => Var::Uri,
            "upstream_addr" => Var::UpstreamAddr,
            "upstream_status" => Var::UpstreamStatus,
            "upstream_response_time" => Var::UpstreamResponseTime,
            "upstream_connect_time" => Var::UpstreamConnectTime,
            "upstream_header_time" => Var::UpstreamHeaderTime,
            "upstream_response_length" => Var::UpstreamResponseLength,
            "upstream_bytes_sent" => Var::UpstreamBytesSent,
            "upstream_bytes_received" => Var::UpstreamBytesReceived,
            "request_body" => {
                names
                    .request_body
                    .store(true, std::sync::atomic::Ordering::Relaxed);
                Var::RequestBody
            }
            "limit_rate" => Var::LimitRate,
            "pipe" => Var::Pipe,
            "http2" => Var::Http2,
            "request_completion" => Var::RequestCompletion,
            // The body is never written to a file (`client_body_in_file_only` is ignored).
            "request_body_file" => Var::Empty,
            "tcpinfo_rtt" => Var::TcpInfo(TcpInfo::Rtt),
            "tcpinfo_rttvar" => Var::TcpInfo(TcpInfo::RttVar),
            "tcpinfo_snd_cwnd" => Var::TcpInfo(TcpInfo::SndCwnd),
            "tcpinfo_rcv_space" => Var::TcpInfo(TcpInfo::RcvSpace),
            "upstream_cache_status" => Var::UpstreamCacheStatus,
            "proxy_protocol_addr" => Var::ProxyProtocol(ProxyProtocolVar::Addr),
            "proxy_protocol_port" => Var::ProxyProtocol(ProxyProtocolVar::Port),
            "proxy_protocol_server_addr" => Var::ProxyProtocol(ProxyProtocolVar::ServerAddr),
            "proxy_protocol_server_port" => Var::ProxyProtocol(ProxyProtocolVar::ServerPort),
            "ssl_early_data" => Var::Empty,
            "https" => Var::Ssl(SslVar::Https),
            "ssl_protocol" => Var::Ssl(SslVar::Protocol),
            "ssl_cipher" => Var::Ssl(SslVar::Cipher),
            "ssl_alpn_protocol" => Var::Ssl(SslVar::AlpnProtocol),
            "ssl_curve" => Var::Ssl(SslVar::Curve),
            "ssl_ciphers" | "ssl_curves" => {
                names
                    .client_hello
                    .store(true, std::sync::atomic::Ordering::Relaxed);
                Var::Ssl(if name == "ssl_ciphers" {
                    SslVar::Ciphers
                } else {
                    SslVar::Curves
                })
            }
            "ssl_server_name" => Var::Ssl(SslVar::ServerName),
            "ssl_client_verify" => Var::Ssl(SslVar::ClientVerify),
            "ssl_client_s_dn" => Var::Ssl(SslVar::ClientSDn),
            "ssl_session_reused" => Var::Ssl(SslVar::SessionReused),
            "ssl_session_id" => {
                names
                    .session_id
                    .store(true, std::sync::atomic::Ordering::Relaxed);
                Var::Ssl(SslVar::SessionId)
            }
            "ssl_client_i_dn" => Var::Ssl(SslVar::ClientIDn),
            "ssl_client_s_dn_legacy" => Var::Ssl(SslVar::ClientSDnLegacy),
            "ssl_client_i_dn_legacy" => Var::Ssl(SslVar::ClientIDnLegacy),
            "ssl_client_serial" => Var::Ssl(SslVar::ClientSerial),
            "ssl_client_fingerprint" => Var::Ssl(SslVar::ClientFingerprint),
            "ssl_client_v_start" => Var::Ssl(SslVar::ClientVStart),
            "ssl_client_v_end" => Var::Ssl(SslVar::ClientVEnd),
            "ssl_client_v_remain" => Var::Ssl(SslVar::ClientVRemain),
            "ssl_client_raw_cert" => Var::Ssl(SslVar::ClientRawCert),
            "ssl_client_cert" => Var::Ssl(SslVar::ClientCert),
            "ssl_client_escaped_cert" => Var::Ssl(SslVar::ClientEscapedCert),
            _ => return None,
        })
    }
}

/// Which of nginx's `ngx_escape_uri` tables an [`escape`] uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Escape {
    /// NGX_ESCAPE_URI: controls, space, `"`, `#`, `%`, `<`, `>`, `?`, `\`, `^`, `{`, `|`,
    /// `}`, the backtick and bytes from 0x7f (nginx's table since 1.21.1).
    Uri,
    /// NGX_ESCAPE_ARGS: as `Uri`, and `&`, `+`, `;`.
    Args,
    /// NGX_ESCAPE_URI_COMPONENT: all but letters, digits and `-._~`.
    Component,
    /// NGX_ESCAPE_HTML: controls, space, `"`, `#`, `%`, `'`, `<`, `>`, `\`, `^`, `{`, `|`,
    /// `}`, the backtick and bytes from 0x7f.
    Html,
}

/// Appends `value` with the bytes `kind` escapes written as `%XX` (uppercase), as nginx's
/// `ngx_escape_uri` does.
pub(crate) fn escape(value: &[u8], out: &mut impl bytes::BufMut, kind: Escape) {
    for &b in value {
        let escaped = match kind {
            Escape::Uri => b <= b' ' || b >= 0x7f || b"\"#%<>?\\^`{|}".contains(&b),
            Escape::Args => b <= b' ' || b >= 0x7f || b"\"#%&+;<>?\\^`{|}".contains(&b),
            Escape::Component => !(b.is_ascii_alphanumeric() || b"-._~".contains(&b)),
            Escape::Html => b <= b' ' || b >= 0x7f || b"\"#%'<>\\^`{|}".contains(&b),
        };
        if escaped {
            out.put_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        } else {
            out.put_u8(b);
        }
    }
}

/// `set $name value` (run in the rewrite phase in the order written) and the like
/// (`auth_request_set`): a value for a variable of a request.
#[derive(Clone)]
pub(crate) struct SetVar {
    /// The variable's slot among the request's values.
    pub slot: usize,
    pub value: Template,
}

/// The name of the variable an argument such as `set`'s first names: `$name` without its `$`.
pub(crate) fn variable_name(arg: &str) -> Option<&str> {
    arg.strip_prefix('$').filter(|n| !n.is_empty())
}

pub(crate) fn compile_set(d: &Directive, names: &Names) -> Result<SetVar, ConfigError> {
    let name = variable_name(d.arg(0))
        .ok_or_else(|| ConfigError::at(d, format!("invalid variable name \"{}\"", d.arg(0))))?;
    refuse_limit_rate(d, name)?;
    refuse_built_in(d, name)?;
    Ok(SetVar {
        // Declared before compiling, by the module that owns the directive.
        slot: names
            .set_slot(name)
            .ok_or_else(|| ConfigError::at(d, format!("invalid variable name \"{}\"", d.arg(0))))?,
        value: Template::compile(d.arg(1), d, names)?,
    })
}

/// nginx's own variables take no value from `set`, `map` and the like, but for `$args`,
/// `$limit_rate` and the TLS module's: a configuration that tries is refused, as nginx
/// refuses it, rather than have the name read two ways.
fn refuse_built_in(d: &Directive, name: &str) -> Result<(), ConfigError> {
    let lower = name.to_ascii_lowercase();
    let changeable = ["args", "limit_rate"].contains(&lower.as_str()) || lower.starts_with("ssl_");
    match Var::unset(name, &lower, &Names::default()) {
        Some(var) if !changeable && !var.is_prefixed() && !matches!(var, Var::Capture(_)) => Err(
            ConfigError::at(d, format!("the duplicate \"{name}\" variable")),
        ),
        _ => Ok(()),
    }
}

/// nginx's `$limit_rate` is the request's own: `set` (rewrite's) changes the rate; a `map` or
/// another module's setting of it would change only how it reads, which is not done here:
/// refused.
pub(crate) fn refuse_limit_rate(d: &Directive, name: &str) -> Result<(), ConfigError> {
    if name.eq_ignore_ascii_case("limit_rate") {
        return Err(ConfigError::at(
            d,
            "setting \"$limit_rate\" is not supported yet and cannot be ignored safely",
        ));
    }
    Ok(())
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Lit(String),
    Var(Var),
}

/// An argument with its variables resolved: evaluated per request without parsing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    pieces: Vec<Piece>,
}

impl Template {
    /// Compiles `text` (argument `i` of `d`, for the error message). nginx's forms: `$name`,
    /// `${name}`; a `$` not followed by a name is an error (`invalid variable name`).
    pub fn compile(text: &str, d: &Directive, names: &Names) -> Result<Template, ConfigError> {
        let mut pieces = Vec::new();
        let mut lit = String::new();
        let bytes = text.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] != b'$' {
                let next = text[i..].find('$').map_or(bytes.len(), |n| i + n);
                lit.push_str(&text[i..next]);
                i = next;
                continue;
            }
            i += 1;
            let name_len = |from: usize| {
                bytes[from..]
                    .iter()
                    .take_while(|b| b.is_ascii_alphanumeric() || **b == b'_')
                    .count()
            };
            let (name, end) = if matches!(bytes.get(i), Some(b'1'..=b'9')) {
                // As nginx, `$1` is one digit: `$1_thumb` and `$12` are `$1` and text.
                (&text[i..i + 1], i + 1)
            } else if bytes.get(i) == Some(&b'{') {
                // The name's characters up to the `}`: anything else there is an error.
                let len = name_len(i + 1);
                let name = &text[i + 1..i + 1 + len];
                if bytes.get(i + 1 + len) != Some(&b'}') {
                    return Err(ConfigError::at(
                        d,
                        format!("the closing bracket in \"{name}\" variable is missing"),
                    ));
                }
                (name, i + len + 2)
            } else {
                let len = name_len(i);
                (&text[i..i + len], i + len)
            };
            if name.is_empty() {
                return Err(ConfigError::at(
                    d,
                    format!("invalid variable name in \"{text}\""),
                ));
            }
            let unknown = || ConfigError::at(d, format!("unknown \"{name}\" variable"));
            // `${1}` names a variable "1", which nginx does not have; only a bare `$1` is a
            // capture.
            let braced_digits = bytes[i] == b'{' && name.bytes().all(|b| b.is_ascii_digit());
            if braced_digits {
                return Err(unknown());
            }
            let var = Var::from_name(name, names).ok_or_else(unknown)?;
            if !lit.is_empty() {
                pieces.push(Piece::Lit(std::mem::take(&mut lit)));
            }
            pieces.push(Piece::Var(var));
            i = end;
        }
        if !lit.is_empty() || pieces.is_empty() {
            pieces.push(Piece::Lit(lit));
        }
        Ok(Template { pieces })
    }

    pub fn literal(text: &str) -> Template {
        Template {
            pieces: vec![Piece::Lit(text.to_string())],
        }
    }

    /// The text when the template has no variables.
    pub fn as_literal(&self) -> Option<&str> {
        match self.pieces.as_slice() {
            [Piece::Lit(s)] => Some(s),
            _ => None,
        }
    }

    /// The variables it reads.
    pub fn variables(&self) -> impl Iterator<Item = &Var> {
        self.pieces.iter().filter_map(|p| match p {
            Piece::Var(v) => Some(v),
            Piece::Lit(_) => None,
        })
    }

    /// Appends the value to `out`, asking `lookup` for each variable.
    pub fn eval_into(&self, out: &mut Vec<u8>, lookup: &mut dyn FnMut(&Var, &mut Vec<u8>)) {
        for p in &self.pieces {
            match p {
                Piece::Lit(s) => out.extend_from_slice(s.as_bytes()),
                Piece::Var(v) => lookup(v, out),
            }
        }
    }
}

/// The hex digits nginx writes escapes with.
const HEX: &[u8; 16] = b"0123456789ABCDEF";

/// Escapes a value for an access log line as nginx does: `"`, `\`, and bytes below 0x20 or
/// above 0x7e become `\xHH`.
pub fn escape_log(value: &[u8], out: &mut Vec<u8>) {
    for &b in value {
        if b == b'"' || b == b'\\' || !(0x20..0x7f).contains(&b) {
            out.extend_from_slice(&[
                b'\\',
                b'x',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 15)],
            ]);
        } else {
            out.push(b);
        }
    }
}

/// Appends `value` as nginx's `ngx_escape_json` writes it (`log_format escape=json`,
/// `autoindex_format json`): `"` and `\` after a backslash, the controls as `\n`, `\r`,
/// `\t`, `\b`, `\f` or `\u00xx`, every other byte as it is.
pub(crate) fn escape_json(value: &[u8], out: &mut Vec<u8>) {
    for &b in value {
        match b {
            b'"' | b'\\' => out.extend_from_slice(&[b'\\', b]),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0c => out.extend_from_slice(b"\\f"),
            0..=0x1f => {
                let lower = |d: u8| HEX[usize::from(d)].to_ascii_lowercase();
                out.extend_from_slice(b"\\u00");
                out.extend_from_slice(&[lower(b >> 4), lower(b & 15)]);
            }
            _ => out.push(b),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use std::sync::Arc;

    fn d() -> Directive {
        Directive {
            name: "return".into(),
            args: vec![],
            span: portcullis_config::Span {
                file: Arc::from(Path::new("/t.conf")),
                line: 3,
            },
            block: None,
        }
    }

    fn eval(t: &Template) -> String {
        let mut out = Vec::new();
        t.eval_into(&mut out, &mut |v, out| {
            out.extend_from_slice(format!("<{v:?}>").as_bytes())
        });
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn compiles_plain_braced_and_header_variables() {
        let t = Template::compile(
            "a $uri-${host}x $http_user_agent $http_x_y $1",
            &d(),
            &Names::default(),
        )
        .unwrap();
        assert_eq!(
            eval(&t),
            "a <Uri>-<Host>x <NamedHeader(\"user-agent\")> <HttpHeader(\"x-y\")> <Capture(1)>"
        );
        assert_eq!(
            Template::compile("plain", &d(), &Names::default())
                .unwrap()
                .as_literal(),
            Some("plain")
        );
        assert_eq!(
            Template::compile("", &d(), &Names::default())
                .unwrap()
                .as_literal(),
            Some("")
        );
    }

    #[test]
    fn rejects_unknown_and_malformed_variables() {
        let e = Template::compile("$nosuch", &d(), &Names::default()).unwrap_err();
        assert_eq!(e.message, "unknown \"nosuch\" variable");
        assert!(Template::compile("a $ b", &d(), &Names::default()).is_err());
        assert!(Template::compile("${host", &d(), &Names::default()).is_err());
        let e = Template::compile("${1}", &d(), &Names::default()).unwrap_err();
        assert_eq!(e.message, "unknown \"1\" variable");
        for digits in ["$0", "$05", "${12}"] {
            assert!(
                Template::compile(digits, &d(), &Names::default()).is_err(),
                "{digits}"
            );
        }
    }

    #[test]
    fn a_capture_is_one_digit_and_names_are_caseless() {
        let t = Template::compile("$1_x $12 $HOST $Http_X_Y", &d(), &Names::default()).unwrap();
        assert_eq!(
            eval(&t),
            "<Capture(1)>_x <Capture(1)>2 <Host> <HttpHeader(\"x-y\")>"
        );
    }

    #[test]
    fn log_escaping_matches_nginx() {
        let mut out = Vec::new();
        escape_log(b"a\"b\\c\x01\xff", &mut out);
        assert_eq!(out, b"a\\x22b\\x5Cc\\x01\\xFF");
    }
}
