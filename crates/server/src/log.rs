//! The error log (nginx's line format, shared by all workers) and access logs (compiled
//! `log_format`s, written through a per-worker buffer so a request costs no lock).

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use portcullis_config::{ConfigError, Directive};

use crate::vars::{Template, Var};
use crate::Level;

pub mod syslog;

impl Level {
    pub fn parse(s: &str) -> Option<Level> {
        Some(match s {
            "emerg" => Level::Emerg,
            "alert" => Level::Alert,
            "crit" => Level::Crit,
            "error" => Level::Error,
            "warn" => Level::Warn,
            "notice" => Level::Notice,
            "info" => Level::Info,
            "debug" => Level::Debug,
            _ => return None,
        })
    }
    pub fn name(self) -> &'static str {
        match self {
            Level::Emerg => "emerg",
            Level::Alert => "alert",
            Level::Crit => "crit",
            Level::Error => "error",
            Level::Warn => "warn",
            Level::Notice => "notice",
            Level::Info => "info",
            Level::Debug => "debug",
        }
    }
}

/// `error_log` as configured: where, and the least severe level written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorLogSpec {
    pub to: LogTarget,
    pub level: Level,
}

/// Where a log writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogTarget {
    File(PathBuf),
    Stderr,
    Syslog(syslog::Syslog),
}

pub(crate) fn open_append(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o644)
        .open(path)
}

/// An OS error as nginx prints it after a failed call: `(2: No such file or directory)`.
pub(crate) fn os_error(e: &io::Error) -> String {
    format!("({}: {})", e.raw_os_error().unwrap_or(0), strerror(e))
}

pub(crate) fn strerror(e: &io::Error) -> String {
    let s = e.to_string();
    // std appends " (os error N)"; nginx prints the bare text inside its own "(N: text)".
    match s.find(" (os error") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

/// An error log: the files (or stderr) one level's `error_log` directives name, each with its
/// own level, shared by every worker. Lines are written with a single `write` on an O_APPEND
/// descriptor, so lines from different threads never interleave; the lock only guards the
/// swap on reload and reopen.
pub struct ErrorLog {
    targets: RwLock<Vec<Target>>,
    /// The least severe level any target writes, for the check made before a line is built.
    max: AtomicU8,
}

struct Target {
    spec: ErrorLogSpec,
    sink: Sink,
}

enum Sink {
    File(File),
    Stderr,
    Syslog(syslog::Sender),
}

/// Opens each of `specs`, as one error log.
fn open_targets(specs: &[ErrorLogSpec]) -> io::Result<Vec<Target>> {
    specs
        .iter()
        .map(|spec| {
            let sink = match &spec.to {
                LogTarget::File(p) => Sink::File(open_append(p).map_err(|e| {
                    io::Error::new(
                        e.kind(),
                        format!("open() \"{}\" failed {}", p.display(), os_error(&e)),
                    )
                })?),
                LogTarget::Stderr => Sink::Stderr,
                LogTarget::Syslog(s) => Sink::Syslog(s.connect()?),
            };
            Ok(Target {
                spec: spec.clone(),
                sink,
            })
        })
        .collect()
}

fn max_level(specs: &[ErrorLogSpec]) -> u8 {
    specs.iter().map(|s| s.level as u8).max().unwrap_or(0)
}

impl ErrorLog {
    /// Opens every target of `specs`: the error is the first that cannot be opened, in
    /// nginx's words.
    pub fn open(specs: &[ErrorLogSpec]) -> io::Result<ErrorLog> {
        Ok(ErrorLog {
            targets: RwLock::new(open_targets(specs)?),
            max: AtomicU8::new(max_level(specs)),
        })
    }

    /// Switches to other targets (reload): opens the new files first, so a failure keeps
    /// the old ones.
    pub fn replace(&self, specs: &[ErrorLogSpec]) -> io::Result<()> {
        let same = self.targets.read().is_ok_and(|t| {
            t.len() == specs.len() && t.iter().zip(specs).all(|(t, s)| t.spec == *s)
        });
        if same {
            return Ok(());
        }
        let targets = open_targets(specs)?;
        if let Ok(mut t) = self.targets.write() {
            *t = targets;
        }
        self.max.store(max_level(specs), Ordering::Relaxed);
        Ok(())
    }

    /// Opens every file anew (USR1), keeping a target whose file cannot be opened as it was.
    pub fn reopen(&self) -> io::Result<()> {
        let mut targets = self
            .targets
            .write()
            .map_err(|_| io::Error::other("poisoned"))?;
        let mut failed = Ok(());
        for t in targets.iter_mut() {
            if let LogTarget::File(p) = &t.spec.to {
                match open_append(p) {
                    Ok(f) => t.sink = Sink::File(f),
                    Err(e) => failed = Err(e),
                }
            }
        }
        failed
    }

    pub fn enabled(&self, level: Level) -> bool {
        level as u8 <= self.max.load(Ordering::Relaxed)
    }

    /// Writes `YYYY/MM/DD HH:MM:SS [level] PID#TID: *CONN message` (the `*CONN` part only when
    /// `conn` is given) to every target whose level admits it.
    pub fn write(&self, level: Level, conn: Option<u64>, message: &str) {
        if !self.enabled(level) {
            return;
        }
        let mut line = Vec::with_capacity(message.len() + 64);
        let now = local_time(SystemTime::now());
        let _ = write!(
            line,
            "{:04}/{:02}/{:02} {:02}:{:02}:{:02} [{}] {}#{}: ",
            now.year,
            now.month,
            now.day,
            now.hour,
            now.min,
            now.sec,
            level.name(),
            std::process::id(),
            gettid()
        );
        if let Some(c) = conn {
            let _ = write!(line, "*{c} ");
        }
        line.extend_from_slice(message.as_bytes());
        line.push(b'\n');
        let Ok(targets) = self.targets.read() else {
            let _ = io::stderr().write_all(&line);
            return;
        };
        for t in targets.iter().filter(|t| level <= t.spec.level) {
            match &t.sink {
                Sink::File(file) => {
                    let _ = (&*file).write_all(&line);
                }
                Sink::Stderr => {
                    let _ = io::stderr().write_all(&line);
                }
                Sink::Syslog(sender) => {
                    if let LogTarget::Syslog(s) = &t.spec.to {
                        sender.send(&s.message(level as u8, &line));
                    }
                }
            }
        }
    }
}

fn gettid() -> i64 {
    // SAFETY: gettid takes no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) }
}

pub(crate) struct LocalTime {
    pub year: i32,
    pub month: u32,
    pub day: u32,
    pub hour: u32,
    pub min: u32,
    pub sec: u32,
    /// Offset east of UTC in seconds.
    pub gmtoff: i64,
}

pub(crate) fn local_time(t: SystemTime) -> LocalTime {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()) as libc::time_t;
    // SAFETY: `tm` is plain data; localtime_r writes it from a valid time_t and we read it only
    // on success.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let ok = unsafe { !libc::localtime_r(&secs, &mut tm).is_null() };
    if !ok {
        return LocalTime {
            year: 1970,
            month: 1,
            day: 1,
            hour: 0,
            min: 0,
            sec: 0,
            gmtoff: 0,
        };
    }
    LocalTime {
        year: tm.tm_year + 1900,
        month: (tm.tm_mon + 1) as u32,
        day: tm.tm_mday as u32,
        hour: tm.tm_hour as u32,
        min: tm.tm_min as u32,
        sec: tm.tm_sec as u32,
        gmtoff: tm.tm_gmtoff,
    }
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// `$time_local`: `22/Nov/2026:10:00:00 +0000`.
pub(crate) fn fmt_time_local(t: SystemTime, out: &mut Vec<u8>) {
    let lt = local_time(t);
    let off = lt.gmtoff / 60;
    let sign = if off < 0 { '-' } else { '+' };
    let _ = write!(
        out,
        "{:02}/{}/{:04}:{:02}:{:02}:{:02} {}{:02}{:02}",
        lt.day,
        MONTHS[(lt.month as usize).saturating_sub(1) % 12],
        lt.year,
        lt.hour,
        lt.min,
        lt.sec,
        sign,
        off.abs() / 60,
        off.abs() % 60
    );
}

/// `$time_iso8601`: `2026-11-22T10:00:00+00:00`.
pub(crate) fn fmt_time_iso8601(t: SystemTime, out: &mut Vec<u8>) {
    let lt = local_time(t);
    let off = lt.gmtoff / 60;
    let sign = if off < 0 { '-' } else { '+' };
    let _ = write!(
        out,
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}{}{:02}:{:02}",
        lt.year,
        lt.month,
        lt.day,
        lt.hour,
        lt.min,
        lt.sec,
        sign,
        off.abs() / 60,
        off.abs() % 60
    );
}

/// A compiled `log_format`. Variable values are escaped as nginx does (`escape=default`).
#[derive(Debug)]
pub struct LogFormat {
    template: Template,
}

/// nginx's predefined `combined` format.
const COMBINED: &str = "$remote_addr - $remote_user [$time_local] \"$request\" $status $body_bytes_sent \"$http_referer\" \"$http_user_agent\"";

impl LogFormat {
    pub(crate) fn compile(
        text: &str,
        d: &Directive,
        names: &crate::vars::Names,
    ) -> Result<LogFormat, ConfigError> {
        Ok(LogFormat {
            template: Template::compile(text, d, names)?,
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
        match LogFormat::compile(COMBINED, &d, &crate::vars::Names::default()) {
            Ok(f) => f,
            Err(_) => unreachable!("the combined format is a constant that compiles"),
        }
    }

    /// Appends one line; `lookup` appends a variable's raw value, which is escaped here.
    pub fn render(&self, out: &mut Vec<u8>, lookup: &mut dyn FnMut(&Var, &mut Vec<u8>)) {
        self.render_with(out, lookup, &|v| v.empty_is_a_value());
    }

    /// [`render`](Self::render), with `has` telling of a variable whose value is empty
    /// whether nginx has it (a header sent empty, say).
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
            if raw.is_empty() {
                // A value nginx has, empty, is written so; one it has not is `-`.
                if !has(v) {
                    out.push(b'-');
                }
            } else {
                crate::vars::escape_log(&raw, out);
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

/// The access log files, opened by the server itself before any worker runs, as nginx's
/// master opens them: workers may serve as a user that could not open them (`user`), and a
/// file that cannot be opened stops a start or a reload instead of losing lines.
pub(crate) type LogFiles = Arc<HashMap<PathBuf, Arc<File>>>;

/// Opens every access log of `logs`, each path once.
pub(crate) fn open_access_logs(logs: &[Arc<AccessLog>]) -> io::Result<LogFiles> {
    let mut files = HashMap::with_capacity(logs.len());
    for log in logs {
        if files.contains_key(&log.path) || log.syslog.is_some() {
            continue;
        }
        let file = open_append(&log.path).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("open() \"{}\" failed {}", log.path.display(), os_error(&e)),
            )
        })?;
        files.insert(log.path.clone(), Arc::new(file));
    }
    Ok(Arc::new(files))
}

/// A worker's buffers for the access logs it writes, on the files the server opened.
#[derive(Default)]
pub struct WorkerLogs {
    open: LogFiles,
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
    pub(crate) fn new(open: LogFiles) -> WorkerLogs {
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
    pub(crate) fn use_files(&mut self, open: LogFiles) {
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
    fn time_local_shape() {
        let mut out = Vec::new();
        fmt_time_local(SystemTime::now(), &mut out);
        let s = String::from_utf8(out).unwrap();
        let re =
            regex::Regex::new(r"^\d{2}/[A-Z][a-z]{2}/\d{4}:\d{2}:\d{2}:\d{2} [+-]\d{4}$").unwrap();
        assert!(re.is_match(&s), "{s}");
    }

    #[test]
    fn combined_renders_dashes_for_empty_values() {
        let f = LogFormat::combined();
        let mut out = Vec::new();
        f.render(&mut out, &mut |v, out| {
            if let Var::Status = v {
                out.extend_from_slice(b"200")
            }
        });
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "- - - [-] \"-\" 200 - \"-\" \"-\"\n"
        );
    }

    #[test]
    fn error_log_line_format() {
        let dir = std::env::temp_dir().join(format!("pc-elog-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("error.log");
        let verbose = dir.join("info.log");
        let log = ErrorLog::open(&[
            ErrorLogSpec {
                to: LogTarget::File(path.clone()),
                level: Level::Warn,
            },
            ErrorLogSpec {
                to: LogTarget::File(verbose.clone()),
                level: Level::Info,
            },
        ])
        .unwrap();
        log.write(Level::Error, Some(7), "boom");
        log.write(Level::Info, None, "hidden");
        log.write(Level::Debug, None, "nowhere");
        let text = std::fs::read_to_string(&path).unwrap();
        let re = regex::Regex::new(
            r"^\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2} \[error\] \d+#\d+: \*7 boom\n$",
        )
        .unwrap();
        assert!(re.is_match(&text), "{text}");
        // Each target writes what its own level admits.
        let text = std::fs::read_to_string(&verbose).unwrap();
        assert_eq!(text.lines().count(), 2, "{text}");
        assert!(text.ends_with(" hidden\n"), "{text}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
