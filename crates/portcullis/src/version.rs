//! `-v`, `-V` and `-h`: the version line, the usage and the build's configure arguments,
//! in nginx's layout, so that tools which read `nginx -V` can read ours.

use std::fmt::Write as _;

use portcullis_config::{Flag, MODULES};

/// The program's name, as it starts every message (`portcullis: [emerg] ...`).
pub const NAME: &str = "portcullis";

/// The version, as the version line and the `Server` header would show it.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The directory relative paths resolve against when `-p` is not given.
pub const DEFAULT_PREFIX: &str = "/usr/share/portcullis/";

/// The configuration file read when `-c` is not given.
pub const DEFAULT_CONF_PATH: &str = "/etc/portcullis/portcullis.conf";

/// Where errors go when neither `-e` nor `error_log` says otherwise.
pub const DEFAULT_ERROR_LOG: &str = "stderr";

/// The pid file when the configuration has no `pid` directive.
pub const DEFAULT_PID_PATH: &str = "logs/portcullis.pid";

/// The TLS library, printed where nginx prints its OpenSSL version.
const TLS_LIBRARY: &str = "rustls 0.23 (aws-lc-rs)";

/// The first line of `-v`, `-V` and `-h`.
pub fn version_line() -> String {
    format!("{NAME} version: {NAME}/{VERSION}\n")
}

/// The usage `-h` prints after the version line.
pub fn usage() -> String {
    format!(
        "Usage: {NAME} [-?hvVtTq] [-s signal] [-p prefix]
             [-e filename] [-c filename] [-g directives]

Options:
  -?,-h         : this help
  -v            : show version and exit
  -V            : show version and configure options then exit
  -t            : test configuration and exit
  -T            : test configuration, dump it and exit
  -q            : suppress non-error messages during configuration testing
  -s signal     : send signal to a master process: stop, quit, reopen, reload
  -p prefix     : set prefix path (default: {DEFAULT_PREFIX})
  -e filename   : set error log file (default: {DEFAULT_ERROR_LOG})
  -c filename   : set configuration file (default: {DEFAULT_CONF_PATH})
  -g directives : set global directives out of configuration file

"
    )
}

/// What `-V` prints after the version line: the TLS library when TLS is built in, then the
/// configure arguments.
pub fn configure() -> String {
    let mut out = String::new();
    if present("http_ssl_module") {
        out.push_str(&format!(
            "built with {TLS_LIBRARY}\nTLS SNI support enabled\n"
        ));
    }
    let prefix = DEFAULT_PREFIX.trim_end_matches('/');
    out.push_str(&format!(
        "configure arguments: --prefix={prefix} --conf-path={DEFAULT_CONF_PATH} \
         --error-log-path={DEFAULT_ERROR_LOG} --pid-path={prefix}/{DEFAULT_PID_PATH}"
    ));
    // From the module registry: nginx prints `--with-X` for an optional module that is
    // built in and `--without-X` for a standard one that is not.
    for m in MODULES {
        match (m.flag, m.present()) {
            (Flag::Optional, true) => {
                let _ = write!(out, " --with-{}", m.name);
            }
            (Flag::Standard, false) => {
                let _ = write!(out, " --without-{}", m.name);
            }
            _ => {}
        }
    }
    out.push('\n');
    out
}

/// Everything the version flags ask for, in nginx's order: version, usage, configure.
pub fn text(help: bool, configure_arguments: bool) -> String {
    let mut out = version_line();
    if help {
        out.push_str(&usage());
    }
    if configure_arguments {
        out.push_str(&configure());
    }
    out
}

/// Whether the registry has module `name` built in.
fn present(name: &str) -> bool {
    MODULES.iter().any(|m| m.name == name && m.present())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_line_names_the_package_version() {
        assert_eq!(
            version_line(),
            format!(
                "portcullis version: portcullis/{}\n",
                env!("CARGO_PKG_VERSION")
            )
        );
    }

    #[test]
    fn usage_lists_every_flag_and_the_defaults() {
        let usage = usage();
        for flag in [
            "-?,-h", "-v ", "-V ", "-t ", "-T ", "-q ", "-s ", "-p ", "-e ", "-c ", "-g ",
        ] {
            assert!(usage.contains(&format!("\n  {flag}")), "missing {flag}");
        }
        assert!(usage.starts_with("Usage: portcullis [-?hvVtTq] [-s signal] [-p prefix]\n"));
        assert!(usage.contains("(default: /etc/portcullis/portcullis.conf)"));
        assert!(usage.ends_with("\n\n"));
    }

    #[test]
    fn configure_arguments_follow_the_module_table() {
        let text = configure();
        let line = text
            .lines()
            .find(|l| l.starts_with("configure arguments: "))
            .expect("configure line");
        assert!(line.contains(" --prefix=/usr/share/portcullis "));
        assert!(line.contains(" --conf-path=/etc/portcullis/portcullis.conf "));
        assert!(line.contains(" --pid-path=/usr/share/portcullis/logs/portcullis.pid"));
        for m in MODULES {
            let with = line.contains(&format!(" --with-{} ", m.name))
                || line.ends_with(&format!(" --with-{}", m.name));
            let without = line.contains(&format!(" --without-{} ", m.name))
                || line.ends_with(&format!(" --without-{}", m.name));
            assert_eq!(with, m.flag == Flag::Optional && m.present(), "{}", m.name);
            assert_eq!(
                without,
                m.flag == Flag::Standard && !m.present(),
                "{}",
                m.name
            );
        }
        // What the seeds' configurations use is built in; what is refused is not.
        for built in [
            "http_proxy_module",
            "http_map_module",
            "http_upstream_least_conn_module",
            "http_auth_basic_module",
            "http_limit_req_module",
            "http_limit_conn_module",
            "http_geo_module",
        ] {
            assert!(!line.contains(&format!("--without-{built}")), "{built}");
        }
        assert!(line.contains(" --with-http_v2_module"));
        assert!(!line.contains("http_auth_basic_module"));
        assert!(line.contains(" --with-http_auth_jwt_module"));
        assert!(!line.contains("http_gzip_module"));
        assert!(line.contains(" --with-http_gzip_static_module"));
        assert!(line.contains(" --with-http_gunzip_module"));
    }

    #[test]
    fn tls_lines_only_with_the_ssl_module() {
        let text = configure();
        assert_eq!(
            text.contains("TLS SNI support enabled"),
            present("http_ssl_module")
        );
        assert_eq!(text.contains(TLS_LIBRARY), present("http_ssl_module"));
    }

    #[test]
    fn module_table_has_no_duplicates() {
        for (i, a) in MODULES.iter().enumerate() {
            assert!(
                MODULES[i + 1..].iter().all(|b| a.name != b.name),
                "{} listed twice",
                a.name
            );
        }
    }

    #[test]
    fn text_orders_version_usage_configure() {
        let all = text(true, true);
        let usage_at = all.find("Usage:").expect("usage");
        let configure_at = all.find("configure arguments:").expect("configure");
        assert!(all.starts_with("portcullis version: "));
        assert!(usage_at < configure_at);
        assert_eq!(text(false, false), version_line());
    }
}
