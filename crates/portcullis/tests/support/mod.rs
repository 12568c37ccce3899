//! Test harness shared by the black-box and differential tests.
//!
//! It starts a server process, portcullis or Debian's nginx, on a configuration written into a
//! fresh temporary prefix, waits until it accepts connections, talks raw HTTP/1.1 to it and stops
//! it when dropped. The same configuration text runs under both programs, which is what lets a
//! test check its expectations against nginx itself before holding portcullis to them.
//!
//! Environment:
//! - `PORTCULLIS_DIFF_ONLY_NGINX=1` runs only the nginx side, to validate test cases against
//!   nginx while portcullis cannot serve them yet.
//! - `CI` set: a missing nginx or wrk is a failure instead of a visible skip.

// Each test file compiles this module on its own and uses a different part of it.
#![allow(dead_code)]

mod ports;

pub use ports::free_ports;

use std::fmt;
use std::fs;
use std::io::{self, ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How long a server may take from spawn to accepting connections.
pub const STARTUP_DEADLINE: Duration = Duration::from_secs(15);
/// How long a server may take to exit after SIGTERM before it is killed.
pub const STOP_DEADLINE: Duration = Duration::from_secs(5);
/// Read and write timeout of the raw client: a server that stalls fails the case, not the run.
pub const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// Pause between two readiness probes; the deadline above bounds the wait.
pub const POLL_INTERVAL: Duration = Duration::from_millis(10);
/// Attempts at starting a server on freshly picked ports when another process took one.
const START_ATTEMPTS: usize = 4;
/// A response head larger than this is a broken server, not a response to parse.
const MAX_RESPONSE_HEAD: usize = 64 * 1024;
/// Where Debian installs nginx when it is not on PATH.
const NGINX_FALLBACK: &str = "/usr/sbin/nginx";
/// Where Debian installs wrk when it is not on PATH.
const WRK_FALLBACK: &str = "/usr/bin/wrk";
/// Environment variable that restricts runs to the nginx side.
pub const ONLY_NGINX_ENV: &str = "PORTCULLIS_DIFF_ONLY_NGINX";

/// Which program serves a configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Nginx,
    Portcullis,
}

impl Kind {
    /// The program's name as it prefixes its own messages (`nginx: [emerg] ...`).
    pub fn name(self) -> &'static str {
        match self {
            Kind::Nginx => "nginx",
            Kind::Portcullis => "portcullis",
        }
    }

    /// Path of the executable, or `None` when nginx is not installed (after saying so).
    pub fn binary(self) -> Option<PathBuf> {
        match self {
            Kind::Nginx => nginx_binary(),
            Kind::Portcullis => Some(PathBuf::from(env!("CARGO_BIN_EXE_portcullis"))),
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Announces a skipped part of a test. It writes to the process's stderr directly, past the
/// test runner's capture of `eprintln!`, so that a skip shows even when the test passes.
pub fn skip(message: &str) {
    let _ = writeln!(io::stderr(), "SKIPPED: {message}");
}

/// True when only the nginx side should run.
pub fn only_nginx() -> bool {
    std::env::var_os(ONLY_NGINX_ENV).is_some_and(|v| !v.is_empty() && v != "0")
}

/// The programs a test should run against: nginx when installed, portcullis unless
/// `PORTCULLIS_DIFF_ONLY_NGINX` is set. Each omission is announced on stderr.
pub fn kinds() -> Vec<Kind> {
    let mut kinds = Vec::new();
    if nginx_binary().is_some() {
        kinds.push(Kind::Nginx);
    }
    if only_nginx() {
        skip(&format!("portcullis side ({ONLY_NGINX_ENV} is set)"));
    } else {
        kinds.push(Kind::Portcullis);
    }
    kinds
}

/// Finds nginx. Missing, it fails the test under CI and is a visible skip elsewhere.
pub fn nginx_binary() -> Option<PathBuf> {
    find_tool(
        "nginx",
        NGINX_FALLBACK,
        "nginx not found: apt-get install nginx",
    )
}

/// Finds wrk, with the same rule as nginx.
pub fn wrk_binary() -> Option<PathBuf> {
    find_tool("wrk", WRK_FALLBACK, "wrk not found: apt-get install wrk")
}

/// Finds Debian's headless Chromium (`chromium-headless-shell`), with the same rule.
pub fn chromium_binary() -> Option<PathBuf> {
    find_tool(
        "chromium-headless-shell",
        "/usr/bin/chromium-headless-shell",
        "chromium-headless-shell not found: apt-get install chromium-headless-shell",
    )
}

fn find_tool(name: &str, fallback: &str, missing: &str) -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|candidate| candidate.is_file())
    });
    let found = on_path.or_else(|| Some(PathBuf::from(fallback)).filter(|p| p.is_file()));
    if found.is_none() {
        if std::env::var_os("CI").is_some() {
            panic!("{missing}");
        }
        skip(missing);
    }
    found
}

/// A directory removed with everything in it when dropped.
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    /// Creates a new, empty directory under the system temp dir; `label` names it for humans.
    pub fn new(label: &str) -> TempDir {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!(
            "portcullis-test-{label}-{}-{n}-{nanos}",
            std::process::id()
        ));
        fs::create_dir_all(&path).expect("create temp dir");
        TempDir { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `contents` to `relative` inside the directory, creating parent directories.
    pub fn write(&self, relative: &str, contents: impl AsRef<[u8]>) -> PathBuf {
        let path = self.path.join(relative);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).expect("create parent dir");
        }
        fs::write(&path, contents).expect("write file");
        path
    }

    /// Writes each of `files` (a relative path and its contents) with `mtime` as its time, so
    /// that ETag and Last-Modified do not change between runs.
    pub fn write_files(&self, files: &[(&str, &[u8])], mtime: std::time::SystemTime) {
        for (name, contents) in files {
            let path = self.write(name, contents);
            fs::File::options()
                .write(true)
                .open(&path)
                .and_then(|f| f.set_modified(mtime))
                .expect("set mtime");
        }
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        // Best effort: a leftover temp dir must not turn a passing test into a failure.
        let _ = fs::remove_dir_all(&self.path);
    }
}

/// Substitutes the harness placeholders in a configuration template: `{PREFIX}` (the temp
/// prefix, no trailing slash) and `{PORT0}`, `{PORT1}`, ... (the picked ports).
pub fn render(template: &str, prefix: &Path, ports: &[u16]) -> String {
    let mut text = template.replace("{PREFIX}", &prefix.display().to_string());
    for (i, port) in ports.iter().enumerate() {
        text = text.replace(&format!("{{PORT{i}}}"), &port.to_string());
    }
    text
}

/// Wraps an `http` block body into a whole configuration with every path inside the prefix:
/// pid file, error log at `info` (so reload and reopen notices show), access log, and
/// `daemon off;` so the spawned process is the server itself.
pub fn main_config(http_body: &str) -> String {
    format!(
        "daemon off;\n\
         worker_processes 1;\n\
         pid {{PREFIX}}/server.pid;\n\
         error_log {{PREFIX}}/error.log info;\n\
         events {{\n    worker_connections 256;\n}}\n\
         http {{\n    access_log {{PREFIX}}/access.log;\n{http_body}\n}}\n"
    )
}

/// Runs `command` (a server binary, or a wrapper around one) with `-t -p prefix -c conf`:
/// the configuration test, as a user runs it.
pub fn test_config(mut command: Command, prefix: &Path, conf: &Path) -> Output {
    command
        .arg("-t")
        .arg("-p")
        .arg(prefix)
        .arg("-c")
        .arg(conf)
        .output()
        .expect("run -t")
}

/// A running server process on its own prefix; stopped (TERM, then KILL) when dropped.
pub struct Server {
    pub kind: Kind,
    dir: TempDir,
    ports: Vec<u16>,
    child: Option<Child>,
    template: String,
    /// Variables set in the server's environment beside the test's own.
    env: Vec<(String, String)>,
}

impl Server {
    /// Starts `kind` on `template` (see [`render`]) with `nports` fresh ports and waits until
    /// every port accepts connections. Panics, showing the server's logs, when it cannot start.
    /// Returns `None` only when the program is not installed (a visible skip).
    pub fn start(kind: Kind, nports: usize, template: &str) -> Option<Server> {
        Server::launch(kind, nports, template, true, &[])
    }

    /// [`Server::start`] with `env` set in the server's environment (nginx keeps `TZ`).
    pub fn start_with_env(
        kind: Kind,
        nports: usize,
        template: &str,
        env: &[(&str, &str)],
    ) -> Option<Server> {
        Server::launch(kind, nports, template, true, env)
    }

    /// Spawns `kind` like [`Server::start`] but returns at once, for tests that watch the
    /// startup itself (pid file, first bind).
    pub fn spawn_unready(kind: Kind, nports: usize, template: &str) -> Option<Server> {
        Server::launch(kind, nports, template, false, &[])
    }

    fn launch(
        kind: Kind,
        nports: usize,
        template: &str,
        wait: bool,
        env: &[(&str, &str)],
    ) -> Option<Server> {
        let binary = kind.binary()?;
        let mut last_failure = String::new();
        for _ in 0..START_ATTEMPTS {
            let dir = TempDir::new(kind.name());
            let ports = free_ports(nports);
            let mut server = Server {
                kind,
                dir,
                ports,
                child: None,
                template: template.to_owned(),
                env: env
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            };
            server.write_config(template);
            match server.spawn(&binary, wait) {
                Ok(()) => return Some(server),
                Err(failure) => {
                    let clash = failure.contains("Address already in use");
                    last_failure = failure;
                    if !clash {
                        break;
                    }
                }
            }
        }
        panic!("{kind} did not start:\n{last_failure}");
    }

    fn spawn(&mut self, binary: &Path, wait: bool) -> Result<(), String> {
        let stdout = fs::File::create(self.path("stdout.log")).map_err(|e| e.to_string())?;
        let stderr = fs::File::create(self.path("stderr.log")).map_err(|e| e.to_string())?;
        let child = Command::new(binary)
            .arg("-p")
            .arg(self.prefix())
            .arg("-c")
            .arg(self.conf_path())
            .current_dir(self.prefix())
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .map_err(|e| format!("spawn {}: {e}", binary.display()))?;
        self.child = Some(child);
        if !wait {
            return Ok(());
        }
        let deadline = Instant::now() + STARTUP_DEADLINE;
        for &port in &self.ports.clone() {
            loop {
                // A connection whose own port is the one asked for is TCP's self-connect
                // (nothing listens yet, and the kernel picked that port for the client):
                // not the server.
                let accepted = TcpStream::connect(("127.0.0.1", port))
                    .is_ok_and(|s| s.local_addr().is_ok_and(|a| a.port() != port));
                if accepted {
                    break;
                }
                if let Some(status) = self.try_wait() {
                    return Err(format!("exited with {status}\n{}", self.logs()));
                }
                if Instant::now() > deadline {
                    return Err(format!(
                        "port {port} not accepting after {STARTUP_DEADLINE:?}\n{}",
                        self.logs()
                    ));
                }
                thread::sleep(POLL_INTERVAL);
            }
        }
        Ok(())
    }

    /// The prefix directory holding the config, logs and pid file.
    pub fn prefix(&self) -> &Path {
        self.dir.path()
    }

    /// A path inside the prefix.
    pub fn path(&self, relative: &str) -> PathBuf {
        self.dir.path().join(relative)
    }

    /// Writes `contents` to `relative` inside the prefix, creating parent directories.
    pub fn write(&self, relative: &str, contents: impl AsRef<[u8]>) -> PathBuf {
        self.dir.write(relative, contents)
    }

    pub fn conf_path(&self) -> PathBuf {
        self.path("server.conf")
    }

    pub fn pid_path(&self) -> PathBuf {
        self.path("server.pid")
    }

    pub fn error_log_path(&self) -> PathBuf {
        self.path("error.log")
    }

    pub fn access_log_path(&self) -> PathBuf {
        self.path("access.log")
    }

    /// The `i`th port picked for the server, as `{PORTi}` in the template.
    pub fn port(&self, i: usize) -> u16 {
        self.ports[i]
    }

    /// The template the server was started with.
    pub fn template(&self) -> &str {
        &self.template
    }

    /// Writes a new configuration over the old one, with the same prefix and ports; the server
    /// reads it on the next reload.
    pub fn write_config(&self, template: &str) {
        let text = render(template, self.prefix(), &self.ports);
        fs::write(self.conf_path(), text).expect("write config");
    }

    /// The process id of the spawned server.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Sends a signal to the server process.
    pub fn signal(&self, signal: libc::c_int) {
        let pid = self.pid() as libc::pid_t;
        if pid > 0 {
            // SAFETY: kill(2) has no memory-safety preconditions; the pid is our own child,
            // not yet reaped while `child` is held.
            unsafe {
                libc::kill(pid, signal);
            }
        }
    }

    /// The exit status if the process has exited.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// Waits up to `deadline` for the process to exit.
    pub fn wait_exit(&mut self, deadline: Duration) -> Option<ExitStatus> {
        let until = Instant::now() + deadline;
        loop {
            if let Some(status) = self.try_wait() {
                return Some(status);
            }
            if Instant::now() > until {
                return None;
            }
            thread::sleep(POLL_INTERVAL);
        }
    }

    /// The error log's current contents ("" when absent).
    pub fn error_log(&self) -> String {
        read_lossy(&self.error_log_path())
    }

    /// Error log, stderr and stdout, for a failure message.
    pub fn logs(&self) -> String {
        format!(
            "--- {kind} error.log ({dir}) ---\n{}\n--- {kind} stderr ---\n{}\n--- {kind} stdout ---\n{}",
            self.error_log(),
            read_lossy(&self.path("stderr.log")),
            read_lossy(&self.path("stdout.log")),
            kind = self.kind,
            dir = self.prefix().display(),
        )
    }

    /// Connects a raw client to the `i`th port.
    pub fn client(&self, i: usize) -> Client {
        Client::connect(self.port(i))
    }

    /// Stops the server: TERM, then KILL past [`STOP_DEADLINE`].
    pub fn stop(&mut self) -> Option<ExitStatus> {
        let child = self.child.as_mut()?;
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        self.signal(libc::SIGTERM);
        if let Some(status) = self.wait_exit(STOP_DEADLINE) {
            return Some(status);
        }
        let child = self.child.as_mut()?;
        let _ = child.kill();
        child.wait().ok()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if thread::panicking() {
            eprintln!("{}", self.logs());
        }
        self.stop();
    }
}

/// Reads a file as text, replacing invalid UTF-8; "" when it cannot be read.
pub fn read_lossy(path: &Path) -> String {
    fs::read(path)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

/// Polls `condition` until it holds or `deadline` passes; returns whether it held.
pub fn wait_until(deadline: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + deadline;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() > until {
            return false;
        }
        thread::sleep(POLL_INTERVAL);
    }
}

/// One parsed HTTP response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    /// `HTTP/1.1` or `HTTP/1.0`.
    pub version: String,
    pub status: u16,
    pub reason: String,
    /// Headers in order, names as sent.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// How many times header `name` appears.
    pub fn header_count(&self, name: &str) -> usize {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .count()
    }

    pub fn body_text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// A raw HTTP/1.1 client over one TCP connection, reading responses with a buffer so that
/// pipelined responses can be read one by one.
pub struct Client {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    /// Connects to 127.0.0.1:`port` with [`IO_TIMEOUT`] on reads and writes.
    pub fn connect(port: u16) -> Client {
        Client::try_connect(port).unwrap_or_else(|e| panic!("connect 127.0.0.1:{port}: {e}"))
    }

    /// [`Client::connect`], with a refused connection an error (a server that reloads may
    /// refuse one for a moment).
    pub fn try_connect(port: u16) -> io::Result<Client> {
        let stream = TcpStream::connect(("127.0.0.1", port))?;
        stream.set_read_timeout(Some(IO_TIMEOUT))?;
        stream.set_write_timeout(Some(IO_TIMEOUT))?;
        stream.set_nodelay(true)?;
        Ok(Client {
            stream,
            buf: Vec::new(),
        })
    }

    /// The local port, to find this connection on the server side.
    pub fn local_port(&self) -> u16 {
        self.stream.local_addr().map_or(0, |a| a.port())
    }

    /// Sends raw bytes.
    pub fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes)
    }

    /// Half-closes the sending side.
    pub fn shutdown_write(&mut self) {
        let _ = self.stream.shutdown(Shutdown::Write);
    }

    /// Reads one response. `head` says the request was HEAD, whose response has no body.
    pub fn read_response(&mut self, head: bool) -> io::Result<Response> {
        let head_end = loop {
            if let Some(pos) = find(&self.buf, b"\r\n\r\n") {
                break pos + 4;
            }
            if self.buf.len() > MAX_RESPONSE_HEAD {
                return Err(invalid("response head too large"));
            }
            if self.fill()? == 0 {
                return Err(io::Error::new(
                    ErrorKind::UnexpectedEof,
                    format!(
                        "connection closed before a full response head (got {:?})",
                        String::from_utf8_lossy(&self.buf)
                    ),
                ));
            }
        };
        let head_bytes: Vec<u8> = self.buf.drain(..head_end).collect();
        let mut response = parse_head(&head_bytes)?;
        let bodiless = head || response.status < 200 || matches!(response.status, 204 | 304);
        if bodiless {
            return Ok(response);
        }
        let chunked = response
            .header("transfer-encoding")
            .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
        response.body = if chunked {
            self.read_chunked()?
        } else if let Some(len) = response.header("content-length") {
            let len: usize = len
                .trim()
                .parse()
                .map_err(|_| invalid("bad Content-Length in response"))?;
            self.read_exact_body(len)?
        } else {
            self.read_to_close()?
        };
        Ok(response)
    }

    /// True when the server closes the connection (EOF or reset) within `wait`, false when it
    /// stays open or sends more bytes.
    pub fn is_closed(&mut self, wait: Duration) -> bool {
        if !self.buf.is_empty() {
            return false;
        }
        if self.stream.set_read_timeout(Some(wait)).is_err() {
            return true;
        }
        let mut chunk = [0u8; 4096];
        let closed = match self.stream.read(&mut chunk) {
            Ok(0) => true,
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                false
            }
            Err(e) => !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
        };
        let _ = self.stream.set_read_timeout(Some(IO_TIMEOUT));
        closed
    }

    fn fill(&mut self) -> io::Result<usize> {
        let mut chunk = [0u8; 16 * 1024];
        let n = self.stream.read(&mut chunk)?;
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(n)
    }

    fn read_exact_body(&mut self, len: usize) -> io::Result<Vec<u8>> {
        while self.buf.len() < len {
            if self.fill()? == 0 {
                return Err(io::Error::new(
                    ErrorKind::UnexpectedEof,
                    format!("body cut at {} of {len} bytes", self.buf.len()),
                ));
            }
        }
        Ok(self.buf.drain(..len).collect())
    }

    fn read_line(&mut self) -> io::Result<Vec<u8>> {
        loop {
            if let Some(pos) = find(&self.buf, b"\r\n") {
                let line: Vec<u8> = self.buf.drain(..pos + 2).collect();
                return Ok(line[..pos].to_vec());
            }
            if self.fill()? == 0 {
                return Err(io::Error::new(ErrorKind::UnexpectedEof, "chunked body cut"));
            }
        }
    }

    fn read_chunked(&mut self) -> io::Result<Vec<u8>> {
        let mut body = Vec::new();
        loop {
            let line = self.read_line()?;
            let size_text = String::from_utf8_lossy(&line);
            let size_text = size_text.split(';').next().unwrap_or("").trim();
            let size = usize::from_str_radix(size_text, 16)
                .map_err(|_| invalid("bad chunk size in response"))?;
            if size == 0 {
                // Trailers, if any, end with an empty line.
                while !self.read_line()?.is_empty() {}
                return Ok(body);
            }
            body.extend(self.read_exact_body(size)?);
            if !self.read_line()?.is_empty() {
                return Err(invalid("chunk not followed by CRLF"));
            }
        }
    }

    fn read_to_close(&mut self) -> io::Result<Vec<u8>> {
        while self.fill()? > 0 {}
        Ok(std::mem::take(&mut self.buf))
    }
}

fn invalid(message: &str) -> io::Error {
    io::Error::new(ErrorKind::InvalidData, message.to_owned())
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Parses a status line and headers (the bytes up to and including the blank line).
fn parse_head(head: &[u8]) -> io::Result<Response> {
    let text = String::from_utf8_lossy(head);
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or("").to_owned();
    let status = parts
        .next()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| invalid(&format!("bad status line {status_line:?}")))?;
    if !version.starts_with("HTTP/") {
        return Err(invalid(&format!("bad status line {status_line:?}")));
    }
    let reason = parts.next().unwrap_or("").to_owned();
    let mut headers = Vec::new();
    for line in lines.filter(|l| !l.is_empty()) {
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| invalid(&format!("bad header line {line:?}")))?;
        headers.push((name.to_owned(), value.trim().to_owned()));
    }
    Ok(Response {
        version,
        status,
        reason,
        headers,
        body: Vec::new(),
    })
}

/// Sends `raw` on a new connection to `port` and reads one response.
pub fn request(port: u16, raw: &str) -> io::Result<Response> {
    let mut client = Client::try_connect(port)?;
    client.send(raw.as_bytes())?;
    client.read_response(raw.starts_with("HEAD "))
}

/// Sends `raw` on a new connection to `port` (then shuts the sending side when `shut`) and
/// returns every byte that came back until the server closed, or [`IO_TIMEOUT`] passed.
pub fn send_and_read_all(port: u16, raw: &[u8], shut: bool) -> Vec<u8> {
    let mut client = Client::connect(port);
    client.send(raw).expect("send");
    if shut {
        client.shutdown_write();
    }
    let mut got = Vec::new();
    let _ = client.stream.read_to_end(&mut got);
    got
}

/// A plain `GET path` with `Host: localhost` and `Connection: close`.
pub fn get(port: u16, path: &str) -> io::Result<Response> {
    request(
        port,
        &format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"),
    )
}

/// The receive queue of the server side of the connection from client port `client_port` to
/// `server_port`, from /proc/net/tcp: `Some(0)` once the server has read everything sent.
pub fn server_recv_queue(server_port: u16, client_port: u16) -> Option<u64> {
    let table = fs::read_to_string("/proc/net/tcp").ok()?;
    let local = format!("0100007F:{server_port:04X}");
    let remote = format!("0100007F:{client_port:04X}");
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() > 4 && fields[1] == local && fields[2] == remote {
            let (_, rx) = fields[4].split_once(':')?;
            u64::from_str_radix(rx, 16).ok()
        } else {
            None
        }
    })
}

/// A plain HTTP/1.1 upstream on 127.0.0.1, a thread per connection: `answer` gets the
/// connection's number (from 1) and each request head as it arrives (a body is not read) and
/// returns the whole response to write. Returns the port; the threads end with the test.
pub fn head_upstream(answer: impl Fn(usize, &[u8]) -> Vec<u8> + Send + Sync + 'static) -> u16 {
    head_upstream_at(std::net::Ipv4Addr::LOCALHOST, 0, answer)
}

/// [`head_upstream`] on `ip:port` (0 for any free port).
pub fn head_upstream_at(
    ip: std::net::Ipv4Addr,
    port: u16,
    answer: impl Fn(usize, &[u8]) -> Vec<u8> + Send + Sync + 'static,
) -> u16 {
    let listener = TcpListener::bind((ip, port)).expect("bind upstream");
    let port = listener.local_addr().expect("addr").port();
    let answer = std::sync::Arc::new(answer);
    std::thread::spawn(move || {
        for (n, stream) in listener.incoming().enumerate() {
            let Ok(mut s) = stream else { continue };
            let answer = answer.clone();
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                        match s.read(&mut chunk) {
                            Ok(0) | Err(_) => return,
                            Ok(k) => buf.extend_from_slice(&chunk[..k]),
                        }
                        continue;
                    };
                    let head: Vec<u8> = buf.drain(..end + 4).collect();
                    if s.write_all(&answer(n + 1, &head)).is_err() {
                        return;
                    }
                }
            });
        }
    });
    port
}

/// Compares the transcripts of one test under each kind (nginx first, then portcullis):
/// fails on every line where portcullis's differs from nginx's. With `SHOW` set, prints
/// both.
pub fn compare(seen: &[(Kind, Vec<String>)]) {
    if std::env::var_os("SHOW").is_some() {
        for (kind, lines) in seen {
            eprintln!("{kind}:\n{}", lines.join("\n"));
        }
    }
    if let [(_, nginx), (_, ours)] = seen {
        let diffs: Vec<String> = nginx
            .iter()
            .zip(ours)
            .filter(|(n, o)| n != o)
            .map(|(n, o)| format!("nginx:      {n}\nportcullis: {o}"))
            .collect();
        assert!(diffs.is_empty(), "{}", diffs.join("\n"));
        assert_eq!(nginx.len(), ours.len());
    }
}

/// Fails unless each of `wants` is in a transcript's `lines`: what a test checks of
/// portcullis alone, so that it fails without nginx too.
pub fn expect_lines(lines: &[String], wants: &[&str]) {
    let text = lines.join("\n");
    for want in wants {
        assert!(text.contains(want), "no {want:?} in\n{text}");
    }
}
