//! `ngx_http_log_module`: `log_format` (variables escaped as nginx's `escape=default`,
//! `json` or `none`) and `access_log` (a file, `stderr`-less as nginx's, or `syslog:`;
//! `buffer=`, `flush=`, `if=`; `gzip` is warned of and the lines written uncompressed;
//! `off`), with nginx's default: a level of a server that names no `access_log` anywhere
//! above writes `logs/access.log` in the `combined` format. A level's `access_log`s replace the inherited ones.
//!
//! The log phase renders a finished request's line once per log and writes it through a
//! per-worker buffer, so a request costs no lock. The files are opened by the server itself
//! (as nginx's master opens them) on start, reload and USR1: workers may serve as a user that
//! could not open them, and a file that cannot be opened stops a start or a reload instead of
//! losing lines.

use std::any::Any;
use std::cell::RefCell;
use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use portcullis_config::{value, ConfigError, Directive};

use crate::log::{open_append, os_error, syslog};
use crate::module::{self, Finish, Load, Module, Opened, Slot};
use crate::request::Handlers;
use crate::vars::{Template, Var};

pub(crate) struct AccessLogModule;

pub(crate) static MODULE: AccessLogModule = AccessLogModule;

/// A level's access logs, and whether a level (this one or one above it) named any
/// (`access_log off` too): a server where none did gets nginx's default log.
#[derive(Clone, Default)]
struct Conf {
    logs: Vec<LogUse>,
    set: bool,
}

/// What one load of a configuration keeps: its formats by name, and its logs by (path,
/// format name), each shared by every level that names it.
#[derive(Default)]
struct Loader {
    formats: HashMap<String, Arc<LogFormat>>,
    logs: HashMap<(PathBuf, String), Arc<AccessLog>>,
}

impl Loader {
    fn of(loaded: &(dyn Any + Send + Sync)) -> &Loader {
        loaded.downcast_ref().expect("the module's own load state")
    }

    fn of_mut(loaded: &mut (dyn Any + Send + Sync)) -> &mut Loader {
        loaded.downcast_mut().expect("the module's own load state")
    }

    /// The log this load made for `path` in the format named `format`.
    fn kept(&self, path: &Path, format: &str) -> Option<Arc<AccessLog>> {
        let key = (path.to_path_buf(), format.to_string());
        self.logs.get(&key).cloned()
    }

    /// Keeps `log`, in the format named `format`, for every level that names the same
    /// target. Its file is opened now, so that a path that cannot be written is a
    /// configuration error, as in nginx.
    fn keep(&mut self, format: &str, log: AccessLog) -> io::Result<Arc<AccessLog>> {
        if log.syslog.is_none() {
            open_append(&log.path)?;
        }
        let log = Arc::new(log);
        let key = (log.path.clone(), format.to_string());
        self.logs.insert(key, log.clone());
        Ok(log)
    }
}

/// The files the server opened for one configuration, by path.
type Files = HashMap<PathBuf, Arc<File>>;

impl Module for AccessLogModule {
    fn name(&self) -> &'static str {
        "http_log_module"
    }

    fn load(&self) -> Box<dyn Any + Send + Sync> {
        Box::<Loader>::default()
    }

    fn defaults(&self) -> Slot {
        Arc::new(Conf::default())
    }

    fn directive(
        &self,
        conf: &mut Slot,
        d: &Directive,
        cx: &mut Load<'_>,
    ) -> Result<(), ConfigError> {
        match d.name.as_str() {
            "log_format" => {
                let loader = Loader::of_mut(cx.state);
                let name = d.arg(0).to_string();
                if name == "combined" || loader.formats.contains_key(&name) {
                    return Err(ConfigError::at(
                        d,
                        format!("duplicate \"log_format\" name \"{name}\""),
                    ));
                }
                let mut parts = &d.args[1..];
                let escape = match parts.first().and_then(|a| a.value.strip_prefix("escape=")) {
                    Some(how) => {
                        parts = &parts[1..];
                        LogEscape::named(how).ok_or_else(|| {
                            ConfigError::at(d, format!("unknown log format escaping \"{how}\""))
                        })?
                    }
                    None => LogEscape::Default,
                };
                let text: String = parts.iter().map(|a| a.value.as_str()).collect();
                let format = LogFormat::compile(&text, escape, d, cx.names)?;
                loader.formats.insert(name, Arc::new(format));
            }
            _ => {
                let c = module::edit::<Conf>(conf);
                c.set = true;
                if cx.first {
                    c.logs.clear();
                }
                if d.arg(0) != "off" {
                    let path = match d.arg(0) {
                        name if name.starts_with("syslog:") => PathBuf::from(name),
                        name => cx.prefix.join(name),
                    };
                    let format = d.args.get(1).map_or("combined", |a| a.value.as_str());
                    let rest = &d.args[1.min(d.args.len())..];
                    let log = target(cx, &path, format, rest, d)?;
                    module::edit::<Conf>(conf).logs.push(log);
                }
            }
        }
        Ok(())
    }

    /// nginx's default log (`logs/access.log`, combined) for a server where no level named
    /// one: made only then, as nginx's merge makes it, so that a configuration whose servers
    /// all name their own never opens it.
    fn finish(
        &self,
        conf: &mut Slot,
        _block: &[Directive],
        cx: &mut Finish<'_>,
    ) -> Result<(), ConfigError> {
        if module::get::<Conf>(conf).set {
            return Ok(());
        }
        let loader = Loader::of_mut(cx.state);
        let log = default_log(loader, &cx.prefix.join("logs/access.log"))?;
        let c = module::edit::<Conf>(conf);
        c.logs = vec![log];
        c.set = true;
        Ok(())
    }

    fn is_active(&self, conf: &Slot) -> bool {
        !module::get::<Conf>(conf).logs.is_empty()
    }

    fn open(&self, loaded: &(dyn Any + Send + Sync)) -> io::Result<Opened> {
        let logs = Loader::of(loaded).logs.values();
        let mut files = Files::new();
        for log in logs {
            if files.contains_key(&log.path) || log.syslog.is_some() {
                continue;
            }
            let file = open_append(&log.path)
                .map_err(|e| io::Error::new(e.kind(), open_failed(&log.path, &e)))?;
            files.insert(log.path.clone(), Arc::new(file));
        }
        Ok(Arc::new(files))
    }

    fn worker(&self, _loaded: &(dyn Any + Send + Sync), opened: &Opened) -> Box<dyn Any> {
        Box::new(RefCell::new(WorkerLogs::new(files(opened))))
    }

    fn reload(&self, state: &dyn Any, _loaded: &(dyn Any + Send + Sync), opened: &Opened) {
        logs(state).borrow_mut().use_files(files(opened));
    }

    fn reopen(&self, state: &dyn Any, opened: &Opened) {
        logs(state).borrow_mut().use_files(files(opened));
    }

    /// Writes buffered lines whose `flush=` time has passed (an hour without one).
    fn tick(&self, state: &dyn Any, loaded: &(dyn Any + Send + Sync)) {
        let max_age = Loader::of(loaded)
            .logs
            .values()
            .filter(|l| l.buffer > 0)
            .map(|l| {
                if l.flush.is_zero() {
                    Duration::from_secs(3600)
                } else {
                    l.flush
                }
            })
            .min();
        if let Some(age) = max_age {
            logs(state).borrow_mut().flush_due(age);
        }
    }

    fn stop(&self, state: &dyn Any) {
        logs(state).borrow_mut().flush_all();
    }

    fn handlers(&self) -> &'static (dyn Any + Send + Sync) {
        static HANDLERS: Handlers = Handlers {
            log: Some(log),
            ..Handlers::NONE
        };
        &HANDLERS
    }
}

/// The module's state in a worker.
fn logs(state: &dyn Any) -> &RefCell<WorkerLogs> {
    state.downcast_ref().expect("the module's own worker state")
}

fn files(opened: &Opened) -> Arc<Files> {
    Arc::downcast(opened.clone()).expect("the files the module opened")
}

/// The log phase: a finished request's line to each log of the level (whose `if=` wants it).
/// `lookup` gives the variables' values, `has` whether an empty one is a value.
fn log(
    conf: &Slot,
    state: &dyn Any,
    _logged: Option<&crate::request::Logged<'_, '_>>,
    lookup: &mut dyn FnMut(&Var, &mut Vec<u8>),
    has: &dyn Fn(&Var) -> bool,
) {
    let mut line = Vec::with_capacity(256);
    for u in &module::get::<Conf>(conf).logs {
        if !u.wanted(lookup) {
            continue;
        }
        line.clear();
        u.log.format.render_with(&mut line, lookup, has);
        logs(state).borrow_mut().write(&u.log, &line);
    }
}

/// nginx's default log at `path`, in the combined format, shared by every server that has
/// it. A file that cannot be opened is named without a line, as nginx names it.
fn default_log(loader: &mut Loader, path: &Path) -> Result<LogUse, ConfigError> {
    let log = match loader.kept(path, "combined") {
        Some(log) => log,
        None => {
            let log = AccessLog {
                path: path.to_path_buf(),
                format: Arc::new(LogFormat::combined()),
                buffer: 0,
                flush: Duration::ZERO,
                syslog: None,
            };
            loader.keep("combined", log).map_err(|e| ConfigError {
                message: open_failed(path, &e),
                span: None,
            })?
        }
    };
    Ok(LogUse {
        log,
        condition: None,
    })
}

/// nginx's message for a log file that cannot be opened.
fn open_failed(path: &Path, e: &io::Error) -> String {
    format!("open() \"{}\" failed {}", path.display(), os_error(e))
}

/// An `access_log`'s target: `path` (a file, or `syslog:` and its parameters) written in
/// `format`, with the parameters after the format (`rest`, the format first).
fn target(
    cx: &mut Load<'_>,
    path: &Path,
    format: &str,
    rest: &[portcullis_config::Arg],
    d: &Directive,
) -> Result<LogUse, ConfigError> {
    let loader = Loader::of_mut(cx.state);
    let fmt = if format == "combined" {
        Arc::new(LogFormat::combined())
    } else {
        loader
            .formats
            .get(format)
            .cloned()
            .ok_or_else(|| ConfigError::at(d, format!("unknown log format \"{format}\"")))?
    };
    let mut buffer = 0usize;
    let mut flush = None;
    let mut condition = None;
    for a in rest.iter().skip(1) {
        if let Some(v) = a.value.strip_prefix("buffer=") {
            buffer = value::parse_size(v)
                .and_then(|n| usize::try_from(n).ok())
                .ok_or_else(|| ConfigError::at(d, format!("invalid buffer size \"{v}\"")))?;
        } else if let Some(v) = a.value.strip_prefix("flush=") {
            flush = Some(
                value::parse_time(v)
                    .ok_or_else(|| ConfigError::at(d, format!("invalid flush time \"{v}\"")))?,
            );
        } else if let Some(v) = a.value.strip_prefix("if=") {
            condition = Some(Template::compile(v, d, cx.names)?);
        } else if a.value.starts_with("gzip") {
            cx.warnings.push(format!(
                "access_log parameter \"{}\" is not supported yet and is ignored in {}",
                a.value, d.span
            ));
        } else {
            return Err(ConfigError::at(
                d,
                format!("invalid parameter \"{}\"", a.value),
            ));
        }
    }
    if flush.is_some() && buffer == 0 {
        buffer = 64 * 1024;
    }
    if let Some(log) = loader.kept(path, format) {
        return Ok(LogUse { log, condition });
    }
    let syslog = match path.to_str().and_then(|p| p.strip_prefix("syslog:")) {
        Some(params) => {
            Some(syslog::Syslog::parse(params, cx.hostname).map_err(|m| ConfigError::at(d, m))?)
        }
        None => None,
    };
    let log = AccessLog {
        path: path.to_path_buf(),
        format: fmt,
        buffer: if syslog.is_some() { 0 } else { buffer },
        flush: flush.unwrap_or(Duration::ZERO),
        syslog,
    };
    let log = loader
        .keep(format, log)
        .map_err(|e| ConfigError::at(d, open_failed(path, &e)))?;
    Ok(LogUse { log, condition })
}

/// A compiled `log_format`: its text and how variable values are escaped.
#[derive(Debug)]
pub struct LogFormat {
    template: Template,
    escape: LogEscape,
}

/// `log_format`'s `escape=`: how a variable's value is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogEscape {
    /// `"`, `\`, controls and bytes from 0x7f as `\xHH`; a value nginx has not is `-`.
    Default,
    /// As a JSON string's content; a value nginx has not is empty.
    Json,
    /// As it is; a value nginx has not is empty.
    None,
}

impl LogEscape {
    fn named(how: &str) -> Option<LogEscape> {
        Some(match how {
            "default" => LogEscape::Default,
            "json" => LogEscape::Json,
            "none" => LogEscape::None,
            _ => return None,
        })
    }
}

/// nginx's predefined `combined` format.
const COMBINED: &str = "$remote_addr - $remote_user [$time_local] \"$request\" $status $body_bytes_sent \"$http_referer\" \"$http_user_agent\"";

impl LogFormat {
    pub(crate) fn compile(
        text: &str,
        escape: LogEscape,
        d: &Directive,
        names: &crate::vars::Names,
    ) -> Result<LogFormat, ConfigError> {
        Ok(LogFormat {
            template: Template::compile(text, d, names)?,
            escape,
        })
    }

    pub fn combined() -> LogFormat {
        let d = Directive {
            name: "log_format".into(),
            args: Vec::new(),
            span: portcullis_config::Span {
                file: Arc::from(Path::new("combined")),
                line: 0,
            },
            block: None,
        };
        match LogFormat::compile(
            COMBINED,
            LogEscape::Default,
            &d,
            &crate::vars::Names::default(),
        ) {
            Ok(f) => f,
            Err(_) => unreachable!("the combined format is a constant that compiles"),
        }
    }

    /// Appends one line; `lookup` appends a variable's raw value, which is escaped here, and
    /// `has` tells of a variable whose value is empty whether nginx has it (a header sent
    /// empty, say): one it has not is `-`.
    pub fn render_with(
        &self,
        out: &mut Vec<u8>,
        lookup: &mut dyn FnMut(&Var, &mut Vec<u8>),
        has: &dyn Fn(&Var) -> bool,
    ) {
        let mut raw = Vec::new();
        self.template.eval_into(out, &mut |v, out| {
            raw.clear();
            lookup(v, &mut raw);
            match self.escape {
                // A value nginx has, empty, is written so; one it has not is `-`.
                LogEscape::Default if raw.is_empty() && !has(v) => out.push(b'-'),
                LogEscape::Default => crate::vars::escape_log(&raw, out),
                LogEscape::Json => crate::vars::escape_json(&raw, out),
                LogEscape::None => out.extend_from_slice(&raw),
            }
        });
        out.push(b'\n');
    }
}

/// An `access_log` target as configured.
#[derive(Debug)]
pub struct AccessLog {
    pub path: PathBuf,
    pub format: Arc<LogFormat>,
    /// Bytes to collect before writing; 0 writes each line at once.
    pub buffer: usize,
    /// Longest time a line may wait in the buffer.
    pub flush: Duration,
    /// `syslog:`: each line is a message to a syslog server (`path` is the target as
    /// written, and no file).
    pub syslog: Option<syslog::Syslog>,
}

/// An `access_log` of a level: the log it writes to, and its `if=` condition.
#[derive(Clone, Debug)]
pub(crate) struct LogUse {
    pub log: Arc<AccessLog>,
    pub condition: Option<Template>,
}

impl LogUse {
    /// Whether a request's line goes to the log: no `if=`, or its value is neither empty
    /// nor `0`. `lookup` gives the variables' values, as for the line.
    pub fn wanted(&self, lookup: &mut dyn FnMut(&Var, &mut Vec<u8>)) -> bool {
        let Some(t) = &self.condition else {
            return true;
        };
        let mut v = Vec::new();
        t.eval_into(&mut v, lookup);
        !(v.is_empty() || v == b"0")
    }
}

/// A worker's buffers for the access logs it writes, on the files the server opened.
pub struct WorkerLogs {
    open: Arc<Files>,
    files: HashMap<PathBuf, WorkerLogFile>,
}

struct WorkerLogFile {
    file: Option<Arc<File>>,
    /// The socket of a `syslog:` target, made on its first line.
    syslog: Option<syslog::Sender>,
    buf: Vec<u8>,
    oldest: Option<Instant>,
}

impl WorkerLogs {
    pub(crate) fn new(open: Arc<Files>) -> WorkerLogs {
        WorkerLogs {
            open,
            files: HashMap::new(),
        }
    }

    /// Appends a rendered line for `log`, writing when its buffer is full or old.
    pub fn write(&mut self, log: &AccessLog, line: &[u8]) {
        let open = &self.open;
        let f = self
            .files
            .entry(log.path.clone())
            .or_insert_with(|| WorkerLogFile {
                file: open.get(&log.path).cloned(),
                syslog: None,
                buf: Vec::new(),
                oldest: None,
            });
        if let Some(s) = &log.syslog {
            if f.syslog.is_none() {
                f.syslog = s.connect().ok();
            }
            if let Some(sender) = &f.syslog {
                sender.send(&s.message(s.severity, line));
            }
            return;
        }
        if log.buffer == 0 {
            if let Some(file) = f.file.as_deref() {
                let _ = (&*file).write_all(line);
            }
            return;
        }
        if f.buf.len() + line.len() > log.buffer {
            f.flush();
        }
        f.buf.extend_from_slice(line);
        let oldest = *f.oldest.get_or_insert_with(Instant::now);
        if !log.flush.is_zero() && oldest.elapsed() >= log.flush {
            f.flush();
        }
    }

    pub fn flush_all(&mut self) {
        for f in self.files.values_mut() {
            f.flush();
        }
    }

    /// Lines older than their `flush=` time are written (called from a per-worker timer).
    pub fn flush_due(&mut self, max_age: Duration) {
        for f in self.files.values_mut() {
            if f.oldest.is_some_and(|t| t.elapsed() >= max_age) {
                f.flush();
            }
        }
    }

    /// Takes the files the server opened for a new configuration or after USR1 (logrotate
    /// moved the old ones): what is buffered goes to the old file first. A path the new set
    /// lacks keeps its file for the connections of the old configuration.
    pub(crate) fn use_files(&mut self, open: Arc<Files>) {
        for (path, f) in self.files.iter_mut() {
            if let Some(file) = open.get(path) {
                f.flush();
                f.file = Some(file.clone());
            }
        }
        self.open = open;
    }
}

impl WorkerLogFile {
    fn flush(&mut self) {
        if !self.buf.is_empty() {
            if let Some(file) = self.file.as_deref() {
                let _ = (&*file).write_all(&self.buf);
            }
            self.buf.clear();
        }
        self.oldest = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combined_renders_dashes_for_empty_values() {
        let f = LogFormat::combined();
        let mut out = Vec::new();
        let mut lookup = |v: &Var, out: &mut Vec<u8>| {
            if let Var::Status = v {
                out.extend_from_slice(b"200")
            }
        };
        f.render_with(&mut out, &mut lookup, &|v| v.empty_is_a_value());
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "- - - [-] \"-\" 200 - \"-\" \"-\"\n"
        );
    }
}
