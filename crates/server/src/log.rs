//! The error log (nginx's line format, shared by all workers), the times of the logs
//! (`$time_local`, `$time_iso8601`) and files opened to append to. The access log is a
//! module (`access_log.rs`).

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::RwLock;
use std::time::{SystemTime, UNIX_EPOCH};

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

/// `$time_local`: `22/Nov/2026:10:00:00 +0000`.
pub(crate) fn fmt_time_local(t: SystemTime, out: &mut Vec<u8>) {
    cached(&TIME_LOCAL, t, out, write_time_local);
}

/// `$time_iso8601`: `2026-11-22T10:00:00+00:00`.
pub(crate) fn fmt_time_iso8601(t: SystemTime, out: &mut Vec<u8>) {
    cached(&TIME_ISO8601, t, out, write_time_iso8601);
}

/// A time's text, made once a second in each thread, as nginx keeps its cached time
/// strings: `localtime_r` and the formatting cost more than the rest of an access log line.
type TimeCache = std::cell::RefCell<(u64, Vec<u8>)>;

thread_local! {
    static TIME_LOCAL: TimeCache = const { std::cell::RefCell::new((u64::MAX, Vec::new())) };
    static TIME_ISO8601: TimeCache = const { std::cell::RefCell::new((u64::MAX, Vec::new())) };
}

fn cached(
    cache: &'static std::thread::LocalKey<TimeCache>,
    t: SystemTime,
    out: &mut Vec<u8>,
    write: fn(SystemTime, &mut Vec<u8>),
) {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    cache.with_borrow_mut(|(at, text)| {
        if *at != secs {
            text.clear();
            write(t, text);
            *at = secs;
        }
        out.extend_from_slice(text);
    });
}

fn write_time_local(t: SystemTime, out: &mut Vec<u8>) {
    let lt = local_time(t);
    let off = lt.gmtoff / 60;
    let sign = if off < 0 { '-' } else { '+' };
    let _ = write!(
        out,
        "{:02}/{}/{:04}:{:02}:{:02}:{:02} {}{:02}{:02}",
        lt.day,
        crate::files::month_name(lt.month),
        lt.year,
        lt.hour,
        lt.min,
        lt.sec,
        sign,
        off.abs() / 60,
        off.abs() % 60
    );
}

fn write_time_iso8601(t: SystemTime, out: &mut Vec<u8>) {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The text kept for a second is the one of that second, whichever second came before.
    #[test]
    fn cached_times_follow_the_second() {
        let t0 = UNIX_EPOCH + std::time::Duration::from_secs(1_800_000_000);
        let t1 = t0 + std::time::Duration::from_millis(1500);
        let mut seen = Vec::new();
        for t in [t0, t0, t1, t0] {
            let (mut cached, mut direct) = (Vec::new(), Vec::new());
            fmt_time_local(t, &mut cached);
            write_time_local(t, &mut direct);
            assert_eq!(cached, direct);
            let (mut cached, mut direct) = (Vec::new(), Vec::new());
            fmt_time_iso8601(t, &mut cached);
            write_time_iso8601(t, &mut direct);
            assert_eq!(cached, direct);
            seen.push(cached);
        }
        assert_eq!(seen[0], seen[3]);
        assert_ne!(seen[0], seen[2]);
    }

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
