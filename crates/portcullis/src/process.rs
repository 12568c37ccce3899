//! The operating-system side of running as nginx runs: detaching into the background, the
//! pid file, the open-files limit, and sending `-s` signals to a running instance.
//!
//! Failures are returned as [`Failure`], whose text is nginx's for the same failure
//! (`open() "/run/x.pid" failed (2: No such file or directory)`), so that the messages a
//! user or a script sees do not change when nginx is swapped for portcullis.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::Path;

use portcullis_server::Level;

/// At most this many bytes of a pid file are read: nginx's limit, the longest 64-bit number
/// plus a line ending. A longer file is not a pid file.
const PID_FILE_READ_MAX: usize = 22;

/// The byte a daemon's child sends its parent once it serves.
const READY: u8 = b'1';

/// A failure reported as `portcullis: [level] message`, ending the program with code 1.
#[derive(Debug)]
pub struct Failure {
    pub level: Level,
    pub message: String,
}

impl Failure {
    pub fn new(level: Level, message: impl Into<String>) -> Failure {
        Failure {
            level,
            message: message.into(),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] {}", self.level.name(), self.message)
    }
}

impl std::error::Error for Failure {}

/// An OS error as nginx shows it: `2: No such file or directory`.
pub fn os_error_text(err: &io::Error) -> String {
    match err.raw_os_error() {
        Some(code) => {
            // std's text for an OS error is strerror's followed by " (os error N)".
            let text = io::Error::from_raw_os_error(code).to_string();
            let suffix = format!(" (os error {code})");
            let reason = text.strip_suffix(&suffix).unwrap_or(&text);
            format!("{code}: {reason}")
        }
        None => err.to_string(),
    }
}

/// nginx's message for a failed file operation: `open() "/x" failed (13: Permission denied)`.
fn file_failure(level: Level, call: &str, path: &Path, err: &io::Error) -> Failure {
    Failure::new(
        level,
        format!(
            "{call}() \"{}\" failed ({})",
            path.display(),
            os_error_text(err)
        ),
    )
}

/// Prints `portcullis: <message>` to stderr. A closed stderr is no reason to fail, so write
/// errors are ignored.
pub fn say(message: impl fmt::Display) {
    let _ = writeln!(io::stderr(), "{}: {message}", crate::version::NAME);
}

/// Writes this process's id to `path`, as nginx does: the number and a newline.
pub fn write_pid_file(path: &Path) -> Result<(), Failure> {
    let contents = format!("{}\n", std::process::id());
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .map_err(|e| file_failure(Level::Emerg, "open", path, &e))?;
    file.write_all(contents.as_bytes())
        .map_err(|e| file_failure(Level::Emerg, "write", path, &e))
}

/// Removes the pid file on exit. A file that is already gone is fine; anything else is
/// reported but does not change the exit code, as in nginx.
pub fn remove_pid_file(path: &Path) {
    match fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => say(file_failure(Level::Alert, "unlink", path, &e)),
    }
}

/// Reads the pid a running instance wrote, for `-s`.
pub fn read_pid_file(path: &Path) -> Result<libc::pid_t, Failure> {
    let file = File::open(path).map_err(|e| file_failure(Level::Error, "open", path, &e))?;
    let mut buf = Vec::with_capacity(PID_FILE_READ_MAX);
    file.take(PID_FILE_READ_MAX as u64)
        .read_to_end(&mut buf)
        .map_err(|e| file_failure(Level::Alert, "read", path, &e))?;
    parse_pid(&buf).ok_or_else(|| {
        let text = String::from_utf8_lossy(trim_line_end(&buf));
        Failure::new(
            Level::Error,
            format!("invalid PID number \"{text}\" in \"{}\"", path.display()),
        )
    })
}

fn trim_line_end(buf: &[u8]) -> &[u8] {
    let end = buf
        .iter()
        .rposition(|&b| b != b'\r' && b != b'\n')
        .map_or(0, |i| i + 1);
    &buf[..end]
}

/// A pid file's number: decimal digits, optionally followed by line endings. Zero is refused
/// because `kill(0, ...)` would signal our own process group, not a server.
fn parse_pid(buf: &[u8]) -> Option<libc::pid_t> {
    let digits = trim_line_end(buf);
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let pid: libc::pid_t = std::str::from_utf8(digits).ok()?.parse().ok()?;
    (pid > 0).then_some(pid)
}

/// Sends `signal` to `pid`, with nginx's message if it cannot be delivered.
pub fn send_signal(pid: libc::pid_t, signal: libc::c_int) -> Result<(), Failure> {
    // SAFETY: kill has no memory-safety preconditions; a bad pid or signal is an error return.
    if unsafe { libc::kill(pid, signal) } == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    Err(Failure::new(
        Level::Alert,
        format!("kill({pid}, {signal}) failed ({})", os_error_text(&err)),
    ))
}

/// Sets the open-files limit (`worker_rlimit_nofile`), soft and hard, as nginx does.
pub fn set_nofile_limit(limit: u64) -> Result<(), Failure> {
    let rlim = libc::rlimit {
        rlim_cur: limit as libc::rlim_t,
        rlim_max: limit as libc::rlim_t,
    };
    // SAFETY: rlim is a valid, initialised rlimit that outlives the call.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &rlim) } == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    Err(Failure::new(
        Level::Alert,
        format!(
            "setrlimit(RLIMIT_NOFILE, {limit}) failed ({})",
            os_error_text(&err)
        ),
    ))
}

/// Which side of the fork [`daemonize`] returned in.
pub enum Forked {
    /// The original process: it has waited for the child to start serving or to fail.
    Parent { started: bool },
    /// The detached child, which goes on to start the server.
    Child(Startup),
}

/// The child's side of the startup pipe. Dropping it without [`Startup::ready`] tells the
/// parent that startup failed.
pub struct Startup {
    pipe: File,
}

impl Startup {
    /// Tells the parent that every listener is bound, letting it exit with code 0, and
    /// detaches stderr from the terminal the parent was started from: from here on the
    /// error log is where messages go, and a caller waiting for the parent's output to end
    /// is not kept waiting by the daemon.
    pub fn ready(mut self) {
        let _ = self.pipe.write_all(&[READY]);
        if let Err(e) = redirect_to_dev_null(&[libc::STDERR_FILENO]) {
            say(Failure::new(
                Level::Alert,
                format!("dup2(STDERR) failed ({})", os_error_text(&e)),
            ));
        }
    }
}

/// Detaches into the background as nginx's `daemon on` does: fork, and the child starts a
/// new session without a controlling terminal. Unlike nginx, whose listeners are bound
/// before it forks, the parent here waits on a pipe until the child reports that it serves,
/// so that `portcullis` returns only after startup, with startup's exit code.
///
/// Refuses (an error, nothing forked) when the process has more than one thread: after
/// fork, only the calling thread exists in the child, and locks other threads held would
/// stay locked forever.
pub fn daemonize() -> io::Result<Forked> {
    let threads = std::fs::read_dir("/proc/self/task")?.count();
    if threads != 1 {
        return Err(io::Error::other(format!(
            "cannot fork into the background with {threads} threads running"
        )));
    }
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: fds has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded, so both descriptors are open and owned by nothing else.
    let (mut read_end, write_end) =
        unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) };

    // SAFETY: the process is single-threaded (checked above, and this thread starts no
    // other), so the child starts in a consistent state.
    match unsafe { libc::fork() } {
        -1 => Err(io::Error::last_os_error()),
        0 => {
            drop(read_end);
            // SAFETY: setsid has no memory-safety preconditions.
            if unsafe { libc::setsid() } == -1 {
                return Err(io::Error::last_os_error());
            }
            redirect_to_dev_null(&[libc::STDIN_FILENO, libc::STDOUT_FILENO])?;
            Ok(Forked::Child(Startup { pipe: write_end }))
        }
        _ => {
            drop(write_end);
            Ok(Forked::Parent {
                started: wait_ready(&mut read_end),
            })
        }
    }
}

/// Waits for the child's ready byte; end of file means the child exited without serving.
fn wait_ready(pipe: &mut File) -> bool {
    let mut byte = [0u8; 1];
    loop {
        match pipe.read(&mut byte) {
            Ok(1) => return byte[0] == READY,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            _ => return false,
        }
    }
}

/// Points the given standard descriptors at /dev/null.
fn redirect_to_dev_null(targets: &[libc::c_int]) -> io::Result<()> {
    let null = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")?;
    for &target in targets {
        // SAFETY: both descriptors are open; dup2 replaces target atomically.
        if unsafe { libc::dup2(null.as_raw_fd(), target) } == -1 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> std::path::PathBuf {
        let dir =
            std::env::temp_dir().join(format!("portcullis-process-{name}-{}", std::process::id()));
        fs::create_dir_all(&dir).expect("temp dir");
        dir
    }

    #[test]
    fn daemonize_refuses_a_process_with_threads() {
        // The test runner's own threads are running: nothing may be forked.
        let err = daemonize().err().expect("refused");
        assert!(err.to_string().contains("threads running"), "{err}");
    }

    #[test]
    fn os_error_reads_like_nginx() {
        let err = io::Error::from_raw_os_error(libc::ENOENT);
        assert_eq!(os_error_text(&err), "2: No such file or directory");
        let plain = io::Error::other("bad");
        assert_eq!(os_error_text(&plain), "bad");
    }

    #[test]
    fn pid_numbers() {
        assert_eq!(parse_pid(b"1234\n"), Some(1234));
        assert_eq!(parse_pid(b"1234"), Some(1234));
        assert_eq!(parse_pid(b"1234\r\n\n"), Some(1234));
        assert_eq!(parse_pid(b""), None);
        assert_eq!(parse_pid(b"\n"), None);
        assert_eq!(parse_pid(b"abc"), None);
        assert_eq!(parse_pid(b"-5"), None);
        assert_eq!(parse_pid(b"+5"), None);
        assert_eq!(parse_pid(b" 5"), None);
        assert_eq!(parse_pid(b"0"), None);
        assert_eq!(parse_pid(b"99999999999999999999"), None);
    }

    #[test]
    fn pid_file_round_trip_and_removal() {
        let dir = temp_dir("roundtrip");
        let path = dir.join("x.pid");
        write_pid_file(&path).expect("write");
        let expected = libc::pid_t::try_from(std::process::id()).expect("pid fits");
        assert_eq!(read_pid_file(&path).expect("read"), expected);
        remove_pid_file(&path);
        assert!(!path.exists());
        // Removing again is quiet and harmless.
        remove_pid_file(&path);
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn pid_file_errors_read_like_nginx() {
        let dir = temp_dir("errors");
        let missing = dir.join("missing.pid");
        let err = read_pid_file(&missing).expect_err("missing file");
        assert_eq!(err.level, Level::Error);
        assert_eq!(
            err.to_string(),
            format!(
                "[error] open() \"{}\" failed (2: No such file or directory)",
                missing.display()
            )
        );

        let empty = dir.join("empty.pid");
        fs::write(&empty, "").expect("write empty");
        assert_eq!(
            read_pid_file(&empty).expect_err("empty").message,
            format!("invalid PID number \"\" in \"{}\"", empty.display())
        );

        let junk = dir.join("junk.pid");
        fs::write(&junk, "abc\n").expect("write junk");
        assert_eq!(
            read_pid_file(&junk).expect_err("junk").message,
            format!("invalid PID number \"abc\" in \"{}\"", junk.display())
        );
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn long_pid_file_is_cut_at_the_read_limit() {
        let dir = temp_dir("long");
        let long = dir.join("long.pid");
        fs::write(&long, "1".repeat(100)).expect("write long");
        let err = read_pid_file(&long).expect_err("too long");
        assert!(err
            .message
            .contains(&format!("\"{}\"", "1".repeat(PID_FILE_READ_MAX))));
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn pid_file_in_missing_directory_fails_with_open() {
        let path = Path::new("/nonexistent-portcullis-dir/x.pid");
        let err = write_pid_file(path).expect_err("no directory");
        assert_eq!(err.level, Level::Emerg);
        assert!(err
            .message
            .starts_with("open() \"/nonexistent-portcullis-dir/x.pid\" failed (2: "));
    }

    #[test]
    fn signal_to_missing_process_reads_like_nginx() {
        // pid_t's maximum is above the kernel's pid limit, so no such process exists.
        let err = send_signal(libc::pid_t::MAX, 0).expect_err("no such process");
        assert_eq!(
            err.to_string(),
            format!(
                "[alert] kill({}, 0) failed (3: No such process)",
                libc::pid_t::MAX
            )
        );
    }

    #[test]
    fn signal_zero_to_self_succeeds() {
        let me = libc::pid_t::try_from(std::process::id()).expect("pid fits");
        assert!(send_signal(me, 0).is_ok());
    }

    #[test]
    fn nofile_limit_at_the_current_value_succeeds() {
        let mut current = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: current is a valid rlimit for getrlimit to fill.
        assert_eq!(
            unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut current) },
            0
        );
        // Lowering the hard limit is irreversible for the test process, so keep both as
        // they are unless they already agree.
        if current.rlim_cur == current.rlim_max {
            set_nofile_limit(current.rlim_max).expect("same limit");
        }
        let err = set_nofile_limit(u64::MAX).expect_err("above any hard limit");
        assert!(err.message.starts_with("setrlimit(RLIMIT_NOFILE, "));
    }

    #[test]
    fn failure_prints_level_then_message() {
        let f = Failure::new(Level::Warn, "the \"ssl\" directive is deprecated");
        assert_eq!(f.to_string(), "[warn] the \"ssl\" directive is deprecated");
    }
}
