//! Which configuration to read and how: the file (`-c`, resolved against `-p`) or the
//! built-in default, with the `-g` directives and the `-e` error log, read the same way at
//! startup, for `-t`, for `-s` and on every reload, so that they all see the same errors.

use std::fmt;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use portcullis_config::{ConfigError, LoadOptions, Loaded};
use portcullis_server::Compiled;

use crate::cli::Options;
use crate::default_config;
use crate::process::say;
use crate::version::{DEFAULT_CONF_PATH, DEFAULT_PREFIX};

/// Where the configuration text comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    File(PathBuf),
    /// [`default_config::TEXT`]: no `-c` was given and the default file does not exist.
    BuiltIn,
}

/// Everything needed to read the configuration again, fixed at startup.
#[derive(Debug, Clone)]
pub struct Setup {
    pub source: Source,
    pub prefix: PathBuf,
    pub error_log: Option<PathBuf>,
    pub load_options: LoadOptions,
}

impl Setup {
    /// Resolves the command line: the prefix, then the configuration file against it, as
    /// nginx does (`-c x.conf` is `<prefix>/x.conf`).
    pub fn new(opts: &Options) -> Setup {
        let prefix = opts
            .prefix
            .clone()
            .unwrap_or_else(|| PathBuf::from(DEFAULT_PREFIX));
        let source = match &opts.conf_file {
            Some(file) => Source::File(prefix.join(file)),
            None if Path::new(DEFAULT_CONF_PATH).exists() => {
                Source::File(PathBuf::from(DEFAULT_CONF_PATH))
            }
            None => Source::BuiltIn,
        };
        Setup {
            source,
            prefix,
            error_log: opts.error_log.clone(),
            load_options: LoadOptions {
                global_directives: opts.global_directives.clone(),
            },
        }
    }

    pub fn is_built_in(&self) -> bool {
        self.source == Source::BuiltIn
    }

    /// The configuration's name in messages: its path, or the built-in default's name.
    pub fn name(&self) -> &Path {
        match &self.source {
            Source::File(path) => path,
            Source::BuiltIn => default_config::name(),
        }
    }

    /// Loads and compiles the configuration. Warnings go to `warn` as nginx words them
    /// (`<message> in <file>:<line>`), whether or not an error follows.
    pub fn read(&self, mut warn: impl FnMut(&str)) -> Result<(Loaded, Compiled), ConfigError> {
        let loaded = match &self.source {
            Source::File(path) => portcullis_config::load(path, &self.load_options)?,
            Source::BuiltIn => portcullis_config::load_str(
                &default_config::text(&mut warn),
                default_config::name(),
                &self.load_options,
            )?,
        };
        for warning in &loaded.warnings {
            warn(&warning.to_string());
        }
        let compiled =
            portcullis_server::compile(&loaded, &self.prefix, self.error_log.as_deref())?;
        for warning in compiled.warnings() {
            warn(warning);
        }
        Ok((loaded, compiled))
    }

    /// `configuration file <name> test failed`, printed after the error when `-t` fails.
    pub fn test_failed(&self) -> impl fmt::Display + '_ {
        TestLine("configuration file ", self.name(), " test failed")
    }
}

/// The end of a successful `-t`: the two lines nginx prints unless `-q`, then for `-T` every
/// file read, to stdout.
pub fn report_test(setup: &Setup, loaded: &Loaded, quiet: bool, dump: bool) -> ExitCode {
    if !quiet {
        say(TestLine(
            "the configuration file ",
            setup.name(),
            " syntax is ok",
        ));
        say(TestLine(
            "configuration file ",
            setup.name(),
            " test is successful",
        ));
    }
    if dump {
        let mut stdout = io::stdout().lock();
        if stdout
            .write_all(loaded.dump().as_bytes())
            .and_then(|()| stdout.flush())
            .is_err()
        {
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}

/// One of nginx's `-t` lines, with the configuration's name in the middle.
struct TestLine<'a>(&'static str, &'a Path, &'static str);

impl fmt::Display for TestLine<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}{}", self.0, self.1.display(), self.2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(conf: Option<&str>, prefix: Option<&str>) -> Options {
        Options {
            conf_file: conf.map(PathBuf::from),
            prefix: prefix.map(PathBuf::from),
            error_log: Some(PathBuf::from("/tmp/e.log")),
            global_directives: Some("daemon off;".to_owned()),
            ..Options::default()
        }
    }

    #[test]
    fn relative_conf_resolves_against_the_prefix() {
        let setup = Setup::new(&options(Some("x.conf"), Some("/srv/p")));
        assert_eq!(setup.source, Source::File(PathBuf::from("/srv/p/x.conf")));
        assert_eq!(setup.prefix, PathBuf::from("/srv/p"));
    }

    #[test]
    fn relative_conf_without_prefix_uses_the_default_prefix() {
        let setup = Setup::new(&options(Some("x.conf"), None));
        assert_eq!(
            setup.source,
            Source::File(Path::new(DEFAULT_PREFIX).join("x.conf"))
        );
    }

    #[test]
    fn absolute_conf_ignores_the_prefix() {
        let setup = Setup::new(&options(Some("/etc/x.conf"), Some("/srv/p")));
        assert_eq!(setup.source, Source::File(PathBuf::from("/etc/x.conf")));
        assert_eq!(setup.name(), Path::new("/etc/x.conf"));
        assert!(!setup.is_built_in());
    }

    #[test]
    fn no_conf_falls_back_to_default_file_or_built_in() {
        let setup = Setup::new(&options(None, None));
        if Path::new(DEFAULT_CONF_PATH).exists() {
            assert_eq!(setup.source, Source::File(PathBuf::from(DEFAULT_CONF_PATH)));
        } else {
            assert!(setup.is_built_in());
            assert_eq!(setup.name(), Path::new(default_config::NAME));
        }
    }

    #[test]
    fn command_line_overrides_are_kept_for_reloads() {
        let setup = Setup::new(&options(Some("/etc/x.conf"), None));
        assert_eq!(setup.error_log, Some(PathBuf::from("/tmp/e.log")));
        assert_eq!(
            setup.load_options.global_directives.as_deref(),
            Some("daemon off;")
        );
    }

    #[test]
    fn test_failed_line_names_the_file() {
        let setup = Setup::new(&options(Some("/etc/x.conf"), None));
        assert_eq!(
            setup.test_failed().to_string(),
            "configuration file /etc/x.conf test failed"
        );
    }
}
