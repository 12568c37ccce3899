//! The command line, parsed the way nginx parses its own.
//!
//! nginx reads its flags by hand rather than with getopt, and scripts depend on the quirks
//! that follow: flags group (`-tq`), a value may be attached (`-c/etc/x.conf`) or be the next
//! argument (`-c /etc/x.conf`), a value ends its argument (`-cq` names the file `q`), and the
//! first bad option stops everything with exit code 1. This module reproduces that, error
//! texts included.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;

/// What the command line asked for. Every flag may be given more than once; the last value
/// wins, as in nginx.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Options {
    /// `-?` or `-h`: print the usage after the version line.
    pub help: bool,
    /// `-v`, also implied by `-h` and `-V`: print the version line.
    pub version: bool,
    /// `-V`: print the build's configure arguments after the version line.
    pub configure: bool,
    /// `-t`, also implied by `-T`: test the configuration and exit.
    pub test: bool,
    /// `-T`: after a successful test, print every configuration file to stdout.
    pub dump: bool,
    /// `-q`: during a test, print errors only.
    pub quiet: bool,
    /// `-s signal`: signal the running instance instead of starting one.
    pub signal: Option<Signal>,
    /// `-p prefix`: the directory relative paths resolve against.
    pub prefix: Option<PathBuf>,
    /// `-e filename`: the error log, overriding the configuration's. `stderr` is kept as
    /// written; it names the standard error stream, as in `error_log stderr`.
    pub error_log: Option<PathBuf>,
    /// `-c filename`: the configuration file.
    pub conf_file: Option<PathBuf>,
    /// `-g directives`: main-context directives added before the file's.
    pub global_directives: Option<String>,
}

/// A signal `-s` can send to a running instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// Fast shutdown (SIGTERM).
    Stop,
    /// Graceful shutdown (SIGQUIT).
    Quit,
    /// Reopen log files (SIGUSR1).
    Reopen,
    /// Re-read the configuration (SIGHUP).
    Reload,
}

impl Signal {
    fn from_name(name: &str) -> Option<Signal> {
        match name {
            "stop" => Some(Signal::Stop),
            "quit" => Some(Signal::Quit),
            "reopen" => Some(Signal::Reopen),
            "reload" => Some(Signal::Reload),
            _ => None,
        }
    }

    /// The POSIX signal this name stands for.
    pub fn number(self) -> libc::c_int {
        match self {
            Signal::Stop => libc::SIGTERM,
            Signal::Quit => libc::SIGQUIT,
            Signal::Reopen => libc::SIGUSR1,
            Signal::Reload => libc::SIGHUP,
        }
    }
}

/// Why the command line was refused. `Display` is nginx's message, to be printed after
/// `portcullis: `.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CliError {
    /// An argument not starting with `-`, or an unknown flag letter.
    InvalidOption(String),
    /// A flag that takes a value was the last argument.
    MissingValue {
        flag: char,
        /// nginx's word for the value: "file name", "directory name" or "parameter".
        what: &'static str,
    },
    /// `-s` with a name other than stop, quit, reopen, reload.
    InvalidSignal(String),
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CliError::InvalidOption(option) => write!(f, "invalid option: \"{option}\""),
            CliError::MissingValue { flag, what } => {
                write!(f, "option \"-{flag}\" requires {what}")
            }
            CliError::InvalidSignal(name) => write!(f, "invalid option: \"-s {name}\""),
        }
    }
}

impl std::error::Error for CliError {}

/// Parses the arguments after the program name.
pub fn parse<I>(args: I) -> Result<Options, CliError>
where
    I: IntoIterator<Item = OsString>,
{
    let mut args = args.into_iter();
    let mut opts = Options::default();

    while let Some(arg) = args.next() {
        let bytes = arg.as_bytes();
        let Some(flags) = bytes.strip_prefix(b"-") else {
            return Err(CliError::InvalidOption(lossy(bytes)));
        };

        // A lone `-` has no flags and is accepted, as nginx accepts it.
        for (i, &flag) in flags.iter().enumerate() {
            match flag {
                b'?' | b'h' => {
                    opts.version = true;
                    opts.help = true;
                }
                b'v' => opts.version = true,
                b'V' => {
                    opts.version = true;
                    opts.configure = true;
                }
                b't' => opts.test = true,
                b'T' => {
                    opts.test = true;
                    opts.dump = true;
                }
                b'q' => opts.quiet = true,
                b'p' | b'e' | b'c' | b'g' | b's' => {
                    let value = value(flag, &flags[i + 1..], &mut args)?;
                    apply_value(&mut opts, flag, value)?;
                    // A value always ends its argument: nothing after it is a flag.
                    break;
                }
                other => {
                    return Err(CliError::InvalidOption(lossy(&[other])));
                }
            }
        }
    }

    Ok(opts)
}

/// The value of a flag: the rest of its argument if there is any, else the next argument.
fn value<I>(flag: u8, attached: &[u8], rest: &mut I) -> Result<OsString, CliError>
where
    I: Iterator<Item = OsString>,
{
    if !attached.is_empty() {
        return Ok(OsStr::from_bytes(attached).to_os_string());
    }
    rest.next().ok_or(CliError::MissingValue {
        flag: char::from(flag),
        what: match flag {
            b'p' => "directory name",
            b'e' | b'c' => "file name",
            _ => "parameter",
        },
    })
}

fn apply_value(opts: &mut Options, flag: u8, value: OsString) -> Result<(), CliError> {
    match flag {
        b'p' => opts.prefix = Some(PathBuf::from(value)),
        b'e' => opts.error_log = Some(PathBuf::from(value)),
        b'c' => opts.conf_file = Some(PathBuf::from(value)),
        // Configuration text is UTF-8 throughout; a stray byte becomes U+FFFD and the
        // parser reports it in context rather than the command line rejecting it blindly.
        b'g' => opts.global_directives = Some(lossy(&value.into_vec())),
        _ => {
            let name = lossy(value.as_bytes());
            match Signal::from_name(&name) {
                Some(signal) => opts.signal = Some(signal),
                None => return Err(CliError::InvalidSignal(name)),
            }
        }
    }
    Ok(())
}

fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_strs(args: &[&str]) -> Result<Options, CliError> {
        parse(args.iter().map(OsString::from))
    }

    fn error_text(args: &[&str]) -> String {
        match parse_strs(args) {
            Ok(opts) => panic!("{args:?} parsed as {opts:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn no_arguments_is_all_defaults() {
        assert_eq!(parse_strs(&[]), Ok(Options::default()));
    }

    #[test]
    fn help_flags_imply_version() {
        for flag in ["-?", "-h"] {
            let opts = parse_strs(&[flag]).expect(flag);
            assert!(opts.help && opts.version && !opts.configure, "{flag}");
        }
    }

    #[test]
    fn version_flags() {
        let v = parse_strs(&["-v"]).expect("-v");
        assert!(v.version && !v.configure && !v.help);
        let big_v = parse_strs(&["-V"]).expect("-V");
        assert!(big_v.version && big_v.configure);
    }

    #[test]
    fn test_dump_and_quiet_flags() {
        let t = parse_strs(&["-t"]).expect("-t");
        assert!(t.test && !t.dump && !t.quiet);
        let dump = parse_strs(&["-T"]).expect("-T");
        assert!(dump.test && dump.dump);
        let q = parse_strs(&["-q"]).expect("-q");
        assert!(q.quiet && !q.test);
    }

    #[test]
    fn grouped_flags() {
        let opts = parse_strs(&["-tqV"]).expect("-tqV");
        assert!(opts.test && opts.quiet && opts.version && opts.configure);
    }

    #[test]
    fn values_as_next_argument() {
        let opts = parse_strs(&[
            "-p",
            "/srv/",
            "-e",
            "/tmp/e.log",
            "-c",
            "x.conf",
            "-g",
            "daemon off;",
            "-s",
            "reload",
        ])
        .expect("values");
        assert_eq!(opts.prefix, Some(PathBuf::from("/srv/")));
        assert_eq!(opts.error_log, Some(PathBuf::from("/tmp/e.log")));
        assert_eq!(opts.conf_file, Some(PathBuf::from("x.conf")));
        assert_eq!(opts.global_directives.as_deref(), Some("daemon off;"));
        assert_eq!(opts.signal, Some(Signal::Reload));
    }

    #[test]
    fn values_attached() {
        let opts = parse_strs(&["-p/srv", "-estderr", "-c/etc/x.conf", "-gpid x;", "-squit"])
            .expect("attached");
        assert_eq!(opts.prefix, Some(PathBuf::from("/srv")));
        assert_eq!(opts.error_log, Some(PathBuf::from("stderr")));
        assert_eq!(opts.conf_file, Some(PathBuf::from("/etc/x.conf")));
        assert_eq!(opts.global_directives.as_deref(), Some("pid x;"));
        assert_eq!(opts.signal, Some(Signal::Quit));
    }

    #[test]
    fn value_after_grouped_flags_ends_the_argument() {
        let opts = parse_strs(&["-tqc/etc/x.conf"]).expect("grouped value");
        assert!(opts.test && opts.quiet);
        assert_eq!(opts.conf_file, Some(PathBuf::from("/etc/x.conf")));
        // `-cq` names a file `q`; it does not turn on quiet mode.
        let cq = parse_strs(&["-cq"]).expect("-cq");
        assert_eq!(cq.conf_file, Some(PathBuf::from("q")));
        assert!(!cq.quiet);
    }

    #[test]
    fn value_may_look_like_a_flag_or_be_empty() {
        let opts = parse_strs(&["-c", "-t"]).expect("-c -t");
        assert_eq!(opts.conf_file, Some(PathBuf::from("-t")));
        assert!(!opts.test);
        let empty = parse_strs(&["-c", ""]).expect("-c ''");
        assert_eq!(empty.conf_file, Some(PathBuf::from("")));
    }

    #[test]
    fn last_value_wins() {
        let opts = parse_strs(&["-c", "a.conf", "-c", "b.conf"]).expect("two -c");
        assert_eq!(opts.conf_file, Some(PathBuf::from("b.conf")));
    }

    #[test]
    fn every_signal_name() {
        for (name, signal, number) in [
            ("stop", Signal::Stop, libc::SIGTERM),
            ("quit", Signal::Quit, libc::SIGQUIT),
            ("reopen", Signal::Reopen, libc::SIGUSR1),
            ("reload", Signal::Reload, libc::SIGHUP),
        ] {
            let opts = parse_strs(&["-s", name]).expect(name);
            assert_eq!(opts.signal, Some(signal));
            assert_eq!(signal.number(), number);
        }
    }

    #[test]
    fn lone_dash_is_accepted() {
        assert_eq!(parse_strs(&["-"]), Ok(Options::default()));
    }

    #[test]
    fn invalid_options_as_nginx_words_them() {
        assert_eq!(error_text(&["-x"]), "invalid option: \"x\"");
        assert_eq!(error_text(&["-vx"]), "invalid option: \"x\"");
        assert_eq!(error_text(&["foo"]), "invalid option: \"foo\"");
        assert_eq!(error_text(&[""]), "invalid option: \"\"");
        assert_eq!(error_text(&["--help"]), "invalid option: \"-\"");
        assert_eq!(error_text(&["-s", "foo"]), "invalid option: \"-s foo\"");
        assert_eq!(error_text(&["-s", ""]), "invalid option: \"-s \"");
    }

    #[test]
    fn missing_values_as_nginx_words_them() {
        assert_eq!(error_text(&["-c"]), "option \"-c\" requires file name");
        assert_eq!(error_text(&["-e"]), "option \"-e\" requires file name");
        assert_eq!(error_text(&["-p"]), "option \"-p\" requires directory name");
        assert_eq!(error_text(&["-g"]), "option \"-g\" requires parameter");
        assert_eq!(error_text(&["-s"]), "option \"-s\" requires parameter");
        assert_eq!(error_text(&["-tc"]), "option \"-c\" requires file name");
    }

    #[test]
    fn first_error_stops_parsing() {
        // nginx reports the first problem only, even when a later one is also wrong.
        assert_eq!(error_text(&["-x", "-c"]), "invalid option: \"x\"");
    }

    #[test]
    fn non_utf8_path_is_kept_as_bytes() {
        let raw = OsString::from_vec(vec![b'/', 0xff, b'.', b'c']);
        let opts = parse([OsString::from("-c"), raw.clone()]).expect("non-UTF-8 path");
        assert_eq!(opts.conf_file, Some(PathBuf::from(raw)));
    }
}
