//! NGINX Plus's active health checks (`ngx_http_upstream_hc_module`): `health_check` in a
//! location that passes requests to an `upstream` group (`proxy_pass http://group`), and
//! `match` blocks that say what a healthy answer is.
//!
//! `health_check [interval=5s] [jitter=0] [fails=1] [passes=1] [uri=/] [port=N]
//! [match=name] [mandatory] [persistent]`: every `interval` (plus up to `jitter`), each
//! server of the group gets `GET uri HTTP/1.0` (`Host:` the group's name) on its own
//! address, or on `port`. `fails` failed checks in a row make it unhealthy: it takes no new
//! request, from any worker, until `passes` checks in a row succeed. A check fails when the
//! server cannot be reached, does not answer within the interval (a second at least), or
//! answers what `match` refuses; without `match`, a status of 2xx or 3xx passes. With
//! `mandatory` the servers start unhealthy until their first check passes; with
//! `persistent` too, a reload starts each server as the checks last found it (by group name
//! and address), so that a healthy one keeps serving.
//!
//! `match name { status 200-399; status ! 500; header Content-Type = text/html;
//! header ! X-Bad; header X-Id ~ "^[0-9]+$"; body ~ "ok"; body !~ "error"; }`: every
//! condition must hold (a `status` line lists codes and ranges, any of which may match).
//!
//! The checks run once for the whole server, in a thread of their own beside the workers
//! (`Module::start`), with the workers' credentials; each reload starts them anew with the
//! new configuration's groups. A server that becomes unhealthy is logged at `warn` with the
//! reason (`connect() failed (111: Connection refused) while connecting to upstream, health
//! check "" of peer 127.0.0.1:8081 in upstream "backend"`), one that recovers at `notice`.

use std::any::Any;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::BytesMut;
use portcullis_config::{ConfigError, Directive};
use portcullis_http::{parse_response_head, Framing, ResponseHead};
use portcullis_proxy::upstream::{CheckedPeer, PeerId};
use portcullis_proxy::PeerAddr;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::log::ErrorLog;
use crate::module::{self, Finish, Load, Module, Running, Slot, Start};
use crate::request::Handlers;
use crate::upstream::Group;
use crate::Level;

pub(crate) struct HealthCheck;

pub(crate) static MODULE: HealthCheck = HealthCheck;

/// The most of an answer a check reads (NGINX Plus reads up to 256 KB of the body).
const MAX_ANSWER: usize = 256 * 1024;

/// One `health_check` directive.
#[derive(Clone)]
struct Spec {
    interval: Duration,
    jitter: Duration,
    fails: u32,
    passes: u32,
    uri: String,
    port: Option<u16>,
    expect: Option<Arc<Match>>,
    mandatory: bool,
    persistent: bool,
}

/// A `match` block: every condition must hold.
#[derive(Default)]
struct Match {
    /// Each `status` line: the codes and ranges it lists, and whether it is negated.
    status: Vec<(Vec<(u16, u16)>, bool)>,
    headers: Vec<(String, HeaderTest)>,
    /// `body ~ re` (true) and `body !~ re` (false).
    body: Vec<(regex::bytes::Regex, bool)>,
}

enum HeaderTest {
    Present,
    Absent,
    Is(Vec<u8>, bool),
    Matches(regex::bytes::Regex, bool),
}

/// The location's `health_check`s (not inherited by the locations inside).
#[derive(Clone, Default)]
struct Conf(Vec<Spec>);

/// What one load keeps: the `match` blocks by name, and each group with its checks.
#[derive(Default)]
struct State {
    matches: HashMap<String, Arc<Match>>,
    /// Each group with a check, and whether each peer (by ID) starts healthy to it.
    checks: Vec<(Group, Spec, HashMap<u32, bool>)>,
}

impl Module for HealthCheck {
    fn name(&self) -> &'static str {
        "http_upstream_hc_module"
    }

    fn load(&self) -> Box<dyn Any + Send + Sync> {
        Box::new(State::default())
    }

    fn defaults(&self) -> Slot {
        Arc::new(Conf::default())
    }

    /// The `match` blocks, which a `health_check` may name above them.
    fn begin_http(&self, http: &[Directive], cx: &mut Load<'_>) -> Result<(), ConfigError> {
        let state = cx
            .state
            .downcast_mut::<State>()
            .expect("the module's state");
        for d in http.iter().filter(|d| d.name == "match") {
            let name = d.arg(0).to_string();
            if state.matches.contains_key(&name) {
                return Err(ConfigError::at(d, format!("duplicate match \"{name}\"")));
            }
            state.matches.insert(name, Arc::new(parse_match(d)?));
        }
        Ok(())
    }

    fn directive(
        &self,
        conf: &mut Slot,
        d: &Directive,
        cx: &mut Load<'_>,
    ) -> Result<(), ConfigError> {
        if d.name == "health_check" {
            let state = cx
                .state
                .downcast_ref::<State>()
                .expect("the module's state");
            let spec = parse_spec(d, &state.matches)?;
            module::edit::<Conf>(conf).0.push(spec);
        }
        Ok(())
    }

    fn enter_location(&self, conf: &mut Slot) {
        if !module::get::<Conf>(conf).0.is_empty() {
            *module::edit::<Conf>(conf) = Conf::default();
        }
    }

    /// A location's checks go to the group its `proxy_pass` names.
    fn finish(
        &self,
        conf: &mut Slot,
        block: &[Directive],
        cx: &mut Finish<'_>,
    ) -> Result<(), ConfigError> {
        let Some(first) = block.iter().find(|d| d.name == "health_check") else {
            return Ok(());
        };
        let pass = block.iter().find(|d| d.name == "proxy_pass");
        if pass.is_some_and(|d| d.arg(0).starts_with("https://")) {
            return Err(ConfigError::at(
                first,
                "health checks over TLS (\"proxy_pass https://\") are not supported",
            ));
        }
        let group = pass
            .and_then(|d| {
                let url = d.arg(0);
                let rest = url.strip_prefix("http://")?;
                let name = rest.split('/').next().unwrap_or(rest);
                (!name.contains('$')).then_some(name)
            })
            .and_then(|name| cx.upstreams.get(name))
            .ok_or_else(|| {
                ConfigError::at(
                    first,
                    "health check requires an upstream group (\"proxy_pass http://group\")",
                )
            })?;
        let state = cx
            .state
            .downcast_mut::<State>()
            .expect("the module's state");
        let upstream = group.upstream();
        let unix = (upstream.peers().iter()).any(|p| matches!(p.addr, PeerAddr::Unix(_)));
        if unix && module::get::<Conf>(conf).0.iter().any(|s| s.port.is_some()) {
            return Err(ConfigError::at(
                first,
                "health check \"port\" cannot be used with a unix-domain socket server",
            ));
        }
        for spec in &module::get::<Conf>(conf).0 {
            // A mandatory check finds each peer unhealthy until it first passes; a
            // persistent one as the checks of the configuration before found it.
            let last = LAST.lock().unwrap_or_else(PoisonError::into_inner);
            let healthy: HashMap<u32, bool> = (upstream.peers().iter())
                .map(|peer| {
                    let known = last.get(&(upstream.name().to_owned(), peer.name.to_string()));
                    let healthy = !spec.mandatory || (spec.persistent && known == Some(&true));
                    if !healthy {
                        peer.check_changed(false);
                    }
                    (peer.id(), healthy)
                })
                .collect();
            if let Some(live) = group.live().filter(|_| spec.mandatory) {
                live.add_mandatory_check();
            }
            state.checks.push((group.clone(), spec.clone(), healthy));
        }
        Ok(())
    }

    fn is_active(&self, _conf: &Slot) -> bool {
        false
    }

    fn handlers(&self) -> &'static (dyn Any + Send + Sync) {
        &Handlers::NONE
    }

    fn start(&self, loaded: &(dyn Any + Send + Sync), cx: &Start<'_>) -> Option<Running> {
        let state = loaded.downcast_ref::<State>().expect("the module's state");
        if state.checks.is_empty() {
            return None;
        }
        let checks = state.checks.clone();
        let credentials = cx.credentials.cloned();
        let error_log = cx.error_log.clone();
        let log = cx.error_log.clone();
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let thread = std::thread::Builder::new()
            .name("health-checks".into())
            .spawn(move || {
                let failed = |e: std::io::Error| {
                    let message = format!("health checks cannot run: {e}");
                    error_log.write(Level::Alert, None, &message);
                };
                // As the workers: a check never runs as root.
                if let Some(Err(e)) = credentials.map(|c| c.apply_to_this_thread()) {
                    return failed(e);
                }
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(e) => return failed(e),
                };
                runtime.block_on(async move {
                    let mut tasks = tokio::task::JoinSet::new();
                    for (group, spec, healthy) in checks {
                        let mut stopped = stopped.clone();
                        let error_log = error_log.clone();
                        tasks.spawn(async move {
                            tokio::select! {
                                () = supervise(&group, &spec, healthy, &error_log) => {}
                                _ = stopped.wait_for(|s| *s) => {}
                            }
                        });
                    }
                    while tasks.join_next().await.is_some() {}
                });
            });
        let thread = match thread {
            Ok(thread) => thread,
            Err(e) => {
                let message = format!("health checks cannot run: {e}");
                log.write(Level::Alert, None, &message);
                return None;
            }
        };
        Some(Box::new(Checks {
            stop,
            thread: Some(thread),
        }))
    }
}

/// What the checks last found of each server, by group name and address: where a
/// `persistent` check of the next configuration starts.
static LAST: Mutex<BTreeMap<(String, String), bool>> = Mutex::new(BTreeMap::new());

/// The running checks: dropped, they stop.
struct Checks {
    stop: tokio::sync::watch::Sender<bool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Checks {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// How often a check of a group the API may change looks for servers added or removed.
const RESCAN: Duration = Duration::from_millis(250);

/// Runs `spec`'s check of every server of `group`, forever: a task per server, started when
/// the API adds one (or moves one to another address) and stopped when it removes it.
/// `healthy`: what the check finds of the configured servers at first (by ID); a server the
/// API adds starts unhealthy to a `mandatory` check (`Live::change` counted it so), healthy
/// otherwise.
async fn supervise(
    group: &Group,
    spec: &Spec,
    mut healthy: HashMap<u32, bool>,
    error_log: &Arc<ErrorLog>,
) {
    let mut tasks = tokio::task::JoinSet::new();
    // Each server watched, by ID: the peer (its shared state) the task checks.
    let mut watched: HashMap<u32, (CheckedPeer, tokio::task::AbortHandle)> = HashMap::new();
    loop {
        let upstream = group.upstream();
        // A server removed, or moved to another address (a peer of its own), is let go.
        watched.retain(|id, (peer, task)| {
            let kept = upstream.by_id(*id).is_ok_and(|p| p.is_same(peer.peer()));
            if !kept {
                task.abort();
            }
            kept
        });
        for (i, peer) in upstream.peers().iter().enumerate() {
            let new = upstream
                .checked(PeerId(i))
                .filter(|_| !watched.contains_key(&peer.id()));
            let Some(checked) = new else {
                continue;
            };
            let start = healthy.remove(&peer.id()).unwrap_or(!spec.mandatory);
            let (name, spec, log) = (upstream.name().to_owned(), spec.clone(), error_log.clone());
            let peer_of_task = checked.clone();
            let task =
                tasks.spawn(async move { watch(&peer_of_task, &name, &spec, start, &log).await });
            watched.insert(peer.id(), (checked, task));
        }
        if group.live().is_none() {
            // A group no API changes: its checks run until stopped.
            while tasks.join_next().await.is_some() {}
            return;
        }
        tokio::time::sleep(RESCAN).await;
        // Reap the tasks aborted above.
        while tasks.try_join_next().is_some() {}
    }
}

/// Checks the peer `watched` (of the group named `group`) every interval, forever, and tells the peer when this
/// check's conclusion changes (any check finding it unhealthy keeps it out), saying so in
/// the error log, as NGINX Plus does.
/// `healthy`: what the check finds of the peer at first (counted at load).
async fn watch(
    watched: &CheckedPeer,
    group: &str,
    spec: &Spec,
    mut healthy: bool,
    error_log: &ErrorLog,
) {
    let peer = watched.peer();
    let (mut fails, mut passes) = (0, 0);
    // What every check of the peer finds now, for the next configuration's `persistent`.
    let remember = || {
        let key = (group.to_owned(), peer.name.to_string());
        LAST.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key, peer.is_healthy());
    };
    let place = |what: &str| {
        format!(
            "{what}, health check \"\" of peer {} in upstream \"{}\"",
            peer.name, group
        )
    };
    loop {
        let limit = spec.interval.max(Duration::from_secs(1));
        let checked = tokio::time::timeout(limit, check(&peer.addr, group, spec))
            .await
            .unwrap_or_else(|_| Err("upstream timed out (110: Connection timed out)".into()));
        peer.check_done(checked.is_ok());
        match checked {
            Ok(()) => {
                fails = 0;
                passes += 1;
                if passes >= spec.passes && !healthy {
                    healthy = true;
                    watched.check_changed(true);
                    remember();
                    let line = place("peer is healthy while checking status code");
                    error_log.write(Level::Notice, None, &line);
                }
            }
            Err(why) => {
                passes = 0;
                fails += 1;
                if fails >= spec.fails && healthy {
                    healthy = false;
                    watched.check_changed(false);
                    remember();
                    error_log.write(Level::Warn, None, &place(&why));
                }
            }
        }
        let jitter = match spec.jitter.as_millis() {
            0 => Duration::ZERO,
            j => Duration::from_millis(u64::from(rand_below(j))),
        };
        tokio::time::sleep(spec.interval + jitter).await;
    }
}

/// A number below `n` (at most `u32::MAX`), from the clock: enough to spread checks.
fn rand_below(n: u128) -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    u32::try_from(u128::from(nanos) % n).unwrap_or(0)
}

/// One check of the server at `addr`: `Err` says why it failed, in NGINX Plus's words.
async fn check(addr: &PeerAddr, host: &str, spec: &Spec) -> Result<(), String> {
    let request = format!(
        "GET {} HTTP/1.0\r\nHost: {host}\r\nUser-Agent: portcullis-health-check\r\nConnection: close\r\n\r\n",
        spec.uri
    );
    let connect_failed = |e: std::io::Error| {
        format!(
            "connect() failed {} while connecting to upstream",
            crate::log::os_error(&e)
        )
    };
    let answer = match addr {
        PeerAddr::Inet(a) => {
            let mut a = *a;
            if let Some(port) = spec.port {
                a.set_port(port);
            }
            let s = tokio::net::TcpStream::connect(a)
                .await
                .map_err(connect_failed)?;
            exchange(s, request.as_bytes()).await
        }
        PeerAddr::Unix(path) => {
            let s = tokio::net::UnixStream::connect(path)
                .await
                .map_err(connect_failed)?;
            exchange(s, request.as_bytes()).await
        }
    };
    let (head, body) = answer?;
    match passes(&head, &body, spec.expect.as_deref()) {
        true => Ok(()),
        false => Err("peer is unhealthy while checking status code of upstream".into()),
    }
}

/// Sends `request` and reads the answer: its head (as the proxy reads an upstream's), then
/// the body its `Content-Length` announces, or else what comes until the server closes (at
/// most `MAX_ANSWER`).
async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    mut s: S,
    request: &[u8],
) -> Result<(ResponseHead, BytesMut), String> {
    let closed = || "upstream prematurely closed connection".to_string();
    s.write_all(request).await.map_err(|_| closed())?;
    let mut buf = BytesMut::new();
    let mut chunk = [0u8; 16 * 1024];
    let head = loop {
        match parse_response_head(&mut buf, MAX_ANSWER) {
            Ok(Some(head)) => break head,
            Ok(None) => {}
            Err(_) => return Err("upstream sent invalid header".into()),
        }
        match s.read(&mut chunk).await {
            Ok(0) | Err(_) => return Err(closed()),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let want = match head.framing() {
        Framing::Length(n) => usize::try_from(n).unwrap_or(MAX_ANSWER).min(MAX_ANSWER),
        _ => MAX_ANSWER,
    };
    while buf.len() < want {
        match s.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    Ok((head, buf))
}

/// Whether an answer passes: its status, fields and body as `expect` asks, else a status
/// of 2xx or 3xx.
fn passes(head: &ResponseHead, body: &[u8], expect: Option<&Match>) -> bool {
    let status = head.status();
    let Some(m) = expect else {
        return (200..400).contains(&status);
    };
    let status_ok = m.status.iter().all(|(ranges, negated)| {
        ranges.iter().any(|(lo, hi)| (*lo..=*hi).contains(&status)) != *negated
    });
    let headers_ok = m.headers.iter().all(|(name, test)| {
        let value = head.header(name);
        match test {
            HeaderTest::Present => value.is_some(),
            HeaderTest::Absent => value.is_none(),
            HeaderTest::Is(want, equal) => value.is_some_and(|v| (v == &want[..]) == *equal),
            HeaderTest::Matches(re, matches) => value.is_some_and(|v| re.is_match(v) == *matches),
        }
    });
    let body_ok = m
        .body
        .iter()
        .all(|(re, matches)| re.is_match(body) == *matches);
    status_ok && headers_ok && body_ok
}

/// A `health_check` directive's parameters.
fn parse_spec(d: &Directive, matches: &HashMap<String, Arc<Match>>) -> Result<Spec, ConfigError> {
    let mut spec = Spec {
        interval: Duration::from_secs(5),
        jitter: Duration::ZERO,
        fails: 1,
        passes: 1,
        uri: "/".into(),
        port: None,
        expect: None,
        mandatory: false,
        persistent: false,
    };
    let invalid = |v: &str| ConfigError::at(d, format!("invalid parameter \"{v}\""));
    for a in &d.args {
        let v = a.value.as_str();
        let (key, value) = v.split_once('=').unwrap_or((v, ""));
        let time = || {
            portcullis_config::value::parse_time(value)
                .filter(|t| !t.is_zero() || key == "jitter")
                .ok_or_else(|| invalid(v))
        };
        let count = || {
            value
                .parse::<u32>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| invalid(v))
        };
        match key {
            "interval" => spec.interval = time()?,
            "jitter" => spec.jitter = time()?,
            "fails" => spec.fails = count()?,
            "passes" => spec.passes = count()?,
            "uri" if value.starts_with('/') => spec.uri = value.to_string(),
            "port" => {
                spec.port = Some(
                    value
                        .parse()
                        .ok()
                        .filter(|p| *p > 0)
                        .ok_or_else(|| invalid(v))?,
                )
            }
            "match" => {
                let m = matches
                    .get(value)
                    .ok_or_else(|| ConfigError::at(d, format!("match \"{value}\" not found")))?;
                spec.expect = Some(m.clone());
            }
            "mandatory" if value.is_empty() => spec.mandatory = true,
            "persistent" if value.is_empty() => spec.persistent = true,
            _ => return Err(invalid(v)),
        }
    }
    Ok(spec)
}

/// A `match` block's conditions.
fn parse_match(d: &Directive) -> Result<Match, ConfigError> {
    let mut m = Match::default();
    for c in d.children() {
        let args: Vec<&str> = c.args.iter().map(|a| a.value.as_str()).collect();
        let invalid = || ConfigError::at(c, format!("invalid condition \"{}\" in match", c.name));
        let regex = |p: &str| {
            crate::location::bytes_regex(p, false)
                .map_err(|e| ConfigError::at(c, format!("invalid regex \"{p}\": {e}")))
        };
        match c.name.as_str() {
            "status" => {
                let (negated, codes) = match args.split_first() {
                    Some((&"!", rest)) => (true, rest),
                    _ => (false, &args[..]),
                };
                let ranges = codes
                    .iter()
                    .map(|code| {
                        let (lo, hi) = code.split_once('-').unwrap_or((code, code));
                        match (lo.parse::<u16>(), hi.parse::<u16>()) {
                            (Ok(lo), Ok(hi)) if (100..=599).contains(&lo) && lo <= hi => {
                                Ok((lo, hi))
                            }
                            _ => Err(invalid()),
                        }
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                if ranges.is_empty() {
                    return Err(invalid());
                }
                m.status.push((ranges, negated));
            }
            "header" => {
                let test = match args[..] {
                    ["!", name] => (name, HeaderTest::Absent),
                    [name] => (name, HeaderTest::Present),
                    [name, "=", v] => (name, HeaderTest::Is(v.as_bytes().to_vec(), true)),
                    [name, "!=", v] => (name, HeaderTest::Is(v.as_bytes().to_vec(), false)),
                    [name, "~", re] => (name, HeaderTest::Matches(regex(re)?, true)),
                    [name, "!~", re] => (name, HeaderTest::Matches(regex(re)?, false)),
                    _ => return Err(invalid()),
                };
                m.headers.push((test.0.to_ascii_lowercase(), test.1));
            }
            "body" => match args[..] {
                ["~", re] => m.body.push((regex(re)?, true)),
                ["!~", re] => m.body.push((regex(re)?, false)),
                _ => return Err(invalid()),
            },
            _ => return Err(invalid()),
        }
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(text: &str) -> Directive {
        let conf = format!("events {{}} http {{ {text} }}");
        let loaded = portcullis_config::load_str(
            &conf,
            std::path::Path::new("/t.conf"),
            &Default::default(),
        )
        .expect("loads");
        let http = loaded
            .directives
            .iter()
            .find(|d| d.name == "http")
            .expect("http");
        http.children()[0].clone()
    }

    #[test]
    fn a_match_block_decides_as_written() {
        let m = parse_match(&block(
            r#"match m { status 200-299 304; status ! 204; header Content-Type ~ "^text/";
               header ! X-Bad; body ~ "ok"; body !~ "error"; }"#,
        ))
        .expect("a match");
        let answer = |status: u16, fields: &str, body: &str| {
            format!("HTTP/1.1 {status} X\r\n{fields}\r\n{body}").into_bytes()
        };
        // The answer as a check reads it, then judged.
        let passes = |raw: Vec<u8>, m: Option<&Match>| {
            let mut buf = BytesMut::from(&raw[..]);
            match parse_response_head(&mut buf, MAX_ANSWER) {
                Ok(Some(head)) => passes(&head, &buf, m),
                _ => false,
            }
        };
        let html = "Content-Type: text/html\r\n";
        assert!(passes(answer(200, html, "all ok"), Some(&m)));
        assert!(!passes(answer(204, html, "all ok"), Some(&m)));
        assert!(!passes(answer(500, html, "all ok"), Some(&m)));
        assert!(!passes(
            answer(200, "Content-Type: image/png\r\n", "ok"),
            Some(&m)
        ));
        assert!(!passes(
            answer(200, "Content-Type: text/x\r\nX-Bad: 1\r\n", "ok"),
            Some(&m)
        ));
        assert!(!passes(answer(200, html, "ok, then an error"), Some(&m)));
        // Without a match: 2xx and 3xx pass.
        assert!(passes(answer(302, "", ""), None));
        assert!(!passes(answer(404, "", ""), None));
        assert!(!passes(b"garbage\r\n\r\n".to_vec(), None));
    }

    #[test]
    fn bad_conditions_and_parameters_are_refused() {
        for text in [
            "match m { status 99; }",
            "match m { status; }",
            "match m { header A B C D; }",
            "match m { body = x; }",
            "match m { colour red; }",
            r#"match m { body ~ "("; }"#,
        ] {
            assert!(parse_match(&block(text)).is_err(), "{text}");
        }
        let matches = HashMap::new();
        for args in [
            "interval=0",
            "fails=0",
            "uri=x",
            "port=70000",
            "match=none",
            "soon",
        ] {
            let d = block(&format!(
                "server {{ location / {{ health_check {args}; }} }}"
            ));
            let d = &d.children()[0].children()[0];
            assert!(parse_spec(d, &matches).is_err(), "{args}");
        }
    }
}
