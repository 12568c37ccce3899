//! The module registry is the record of what portcullis does with every nginx directive, and
//! this walks all of it: each directive it refuses stops `-t` with `[emerg]` at its file and
//! line (and loads with the one value that asks for nothing), each one it ignores loads with
//! `[warn]` at its place, each module `-V` calls built in has its directives working, and the
//! README lists both kinds.

mod support;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use portcullis_config::{directives, Flag, Spec, Support, MODULES};
use support::{free_ports, TempDir};

/// Where a directive goes: every context of nginx's http configuration, one line each.
const SKELETON: &str = "{main}
pid {DIR}/p.pid;
error_log {DIR}/e.log;
events {
    {events}
}
http {
    access_log off;
    {http}
    upstream u {
        server 127.0.0.1:1;
        {upstream}
    }
    server {
        listen 127.0.0.1:{PORT};
        {server}
        location / {
            {location}
            limit_except GET {
                {limit_except}
            }
            if ($uri) {
                {if}
            }
        }
    }
}
";

/// What `-t` said about one configuration.
struct Checked {
    ok: bool,
    /// stderr, with the configuration's path written as `CONF`.
    stderr: String,
    /// The line the directive is on.
    line: usize,
}

/// Runs `portcullis -t` on the skeleton with `line` in `context`.
fn check(context: &str, line: &str) -> Checked {
    let dir = TempDir::new("registry");
    let conf = dir.path().join("nginx.conf");
    let port = free_ports(1)[0];
    let mut text = SKELETON
        .replace("{DIR}", &dir.path().display().to_string())
        .replace("{PORT}", &port.to_string())
        .replace(&format!("{{{context}}}"), line);
    for other in [
        "main",
        "events",
        "http",
        "upstream",
        "server",
        "location",
        "limit_except",
        "if",
    ] {
        text = text.replace(&format!("{{{other}}}"), "");
    }
    let at = text
        .lines()
        .position(|l| l.trim() == line)
        .unwrap_or_else(|| panic!("no context {context}"))
        + 1;
    std::fs::write(&conf, &text).expect("write config");
    let out = support::test_config(
        Command::new(env!("CARGO_BIN_EXE_portcullis")),
        dir.path(),
        &conf,
    );
    Checked {
        ok: out.status.success(),
        stderr: String::from_utf8_lossy(&out.stderr).replace(&conf.display().to_string(), "CONF"),
        line: at,
    }
}

/// `spec` with `args`, as a line of configuration.
fn line(spec: &Spec, args: &[&str]) -> String {
    let mut text = spec.name.to_owned();
    for a in args {
        text.push(' ');
        text.push_str(a);
    }
    if spec.is_block() {
        text.push_str(" { }");
    } else {
        text.push(';');
    }
    text
}

/// Arguments `spec` takes, none of them meaningful: `on` for a flag, else `x`s.
fn dummy_args(spec: &Spec) -> Vec<&'static str> {
    if spec.is_flag() {
        return vec!["on"];
    }
    vec!["x"; spec.sample().1]
}

#[test]
fn every_refused_directive_stops_the_configuration_at_its_line() {
    let mut walked = 0;
    for spec in directives() {
        let Support::Refuse(unless) = spec.support else {
            continue;
        };
        let (context, _) = spec.sample();
        let text = line(spec, &dummy_args(spec));
        let c = check(context, &text);
        let expected = format!(
            "portcullis: [emerg] the \"{}\" directive is not supported yet and cannot be ignored safely in CONF:{}",
            spec.name, c.line
        );
        assert!(!c.ok, "{text} in {context} loads:\n{}", c.stderr);
        assert_eq!(c.stderr.lines().next(), Some(expected.as_str()), "{text}");
        if let Some(value) = unless {
            let text = line(spec, &[value]);
            let c = check(context, &text);
            assert!(c.ok, "{text} asks for nothing and must load:\n{}", c.stderr);
            assert!(!c.stderr.contains("[warn]"), "{text}:\n{}", c.stderr);
        }
        walked += 1;
    }
    // What the fail-closed rule names is implemented or refused, never ignored
    // (`ssl_stapling_verify` guards only a stapled OCSP response, and none is stapled: it is
    // ignored with a warning).
    for name in [
        "auth_basic",
        "auth_basic_user_file",
        "auth_request",
        "limit_req",
        "limit_req_zone",
        "limit_conn",
        "limit_conn_zone",
        "secure_link",
        "valid_referers",
        "ssl_crl",
        "proxy_ssl_crl",
        "ssl_ocsp",
    ] {
        assert!(
            directives()
                .any(|s| s.name == name && matches!(s.support, Support::Yes | Support::Refuse(_))),
            "{name} is implemented or refused"
        );
    }
    assert!(walked >= 11);
}

#[test]
fn every_ignored_directive_loads_with_a_warning_at_its_line() {
    for spec in directives() {
        let args = match spec.support {
            Support::Warn => dummy_args(spec),
            // Any other value than the one portcullis always has.
            Support::DefaultOnly("on") => vec!["off"],
            Support::DefaultOnly("off") => vec!["on"],
            Support::DefaultOnly(_) => vec!["x"],
            Support::Yes | Support::Inert | Support::Refuse(_) => continue,
        };
        let (context, _) = spec.sample();
        let text = line(spec, &args);
        let c = check(context, &text);
        let expected = format!(
            "portcullis: [warn] the \"{}\" directive is not supported yet and is ignored in CONF:{}",
            spec.name, c.line
        );
        assert!(c.ok, "{text} in {context} must load:\n{}", c.stderr);
        assert!(
            c.stderr.lines().any(|l| l == expected),
            "{text} in {context}: no warning\n{}",
            c.stderr
        );
        if let Support::DefaultOnly(value) = spec.support {
            let text = line(spec, &[value]);
            let c = check(context, &text);
            assert!(
                c.ok && !c.stderr.contains("[warn]"),
                "{text}:\n{}",
                c.stderr
            );
        }
    }
}

/// For each module `-V` names as built in, a line that uses it, in its context.
const BUILT_IN: &[(&str, &str, &str)] = &[
    ("http_rewrite_module", "location", "return 200;"),
    ("http_access_module", "location", "deny all;"),
    (
        "http_auth_basic_module",
        "location",
        "auth_basic \"realm\"; auth_basic_user_file htpasswd;",
    ),
    (
        "http_geo_module",
        "http",
        "geo $g { default 0; 10.0.0.0/8 1; }",
    ),
    (
        "http_split_clients_module",
        "http",
        "split_clients \"$remote_addr\" $variant { 50% a; * b; }",
    ),
    (
        "http_secure_link_module",
        "location",
        "secure_link $arg_md5,$arg_e; secure_link_md5 \"$secure_link_expires$uri k\";",
    ),
    ("http_stub_status_module", "location", "stub_status;"),
    ("http_empty_gif_module", "location", "empty_gif;"),
    (
        "http_mirror_module",
        "location",
        "mirror /copy; mirror_request_body off;",
    ),
    (
        "http_autoindex_module",
        "location",
        "autoindex on; autoindex_format json; autoindex_exact_size off; autoindex_localtime on;",
    ),
    (
        "http_gzip_module",
        "location",
        "gzip on; gzip_types text/css; gzip_comp_level 5; gzip_min_length 1k;",
    ),
    ("http_gzip_static_module", "location", "gzip_static on;"),
    ("http_gunzip_module", "location", "gunzip on;"),
    (
        "http_sub_module",
        "location",
        "sub_filter a b; sub_filter_once off; sub_filter_types text/css; sub_filter_last_modified on;",
    ),
    (
        "http_referer_module",
        "location",
        "valid_referers none blocked server_names *.example.com;",
    ),
    (
        "http_realip_module",
        "server",
        "set_real_ip_from 10.0.0.0/8; real_ip_header X-Forwarded-For; real_ip_recursive on;",
    ),
    (
        "http_limit_conn_module",
        "http",
        "limit_conn_zone $binary_remote_addr zone=c:1m; limit_conn c 10;",
    ),
    (
        "http_limit_req_module",
        "http",
        "limit_req_zone $binary_remote_addr zone=z:1m rate=5r/s; limit_req zone=z burst=5;",
    ),
    (
        "http_auth_request_module",
        "location",
        "auth_request /auth; auth_request_set $u $upstream_status;",
    ),
    ("http_auth_jwt_module", "location", "auth_jwt off;"),
    ("http_map_module", "http", "map $uri $m { default 1; }"),
    ("http_charset_module", "location", "charset utf-8;"),
    (
        "http_ssi_module",
        "location",
        "ssi on; ssi_types text/plain; ssi_silent_errors on;",
    ),
    ("http_upstream_least_conn_module", "upstream", "least_conn;"),
    (
        "http_upstream_hash_module",
        "upstream",
        "hash $request_uri consistent;",
    ),
    ("http_upstream_ip_hash_module", "upstream", "ip_hash;"),
    ("http_upstream_random_module", "upstream", "random two;"),
    ("http_upstream_keepalive_module", "upstream", "keepalive 8;"),
    ("http_upstream_zone_module", "upstream", "zone u 64k;"),
    ("http_proxy_module", "location", "proxy_pass http://u;"),
    (
        "http_fastcgi_module",
        "location",
        "fastcgi_pass u; fastcgi_param A $uri; fastcgi_index index.php;",
    ),
    (
        "http_uwsgi_module",
        "location",
        "uwsgi_pass u; uwsgi_param A $uri; uwsgi_modifier1 30;",
    ),
    ("http_scgi_module", "location", "scgi_pass u; scgi_param A $uri;"),
    (
        "http_grpc_module",
        "location",
        "grpc_pass grpc://u; grpc_set_header X-A $uri; grpc_read_timeout 5s;",
    ),
    (
        "http_ssl_module",
        "server",
        "ssl_protocols TLSv1.2 TLSv1.3;",
    ),
    ("http_v2_module", "server", "http2 on;"),
];

#[test]
fn minus_v_names_built_in_exactly_the_modules_that_work() {
    let out = Command::new(env!("CARGO_BIN_EXE_portcullis"))
        .arg("-V")
        .output()
        .expect("run portcullis -V");
    let text =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    let flags: BTreeSet<&str> = text
        .lines()
        .find_map(|l| l.strip_prefix("configure arguments: "))
        .expect("configure line")
        .split_whitespace()
        .collect();
    let samples: BTreeSet<&str> = BUILT_IN.iter().map(|(m, _, _)| *m).collect();
    for m in MODULES {
        let with = flags.contains(format!("--with-{}", m.name).as_str());
        let without = flags.contains(format!("--without-{}", m.name).as_str());
        match m.flag {
            Flag::None => assert!(!with && !without, "{}", m.name),
            Flag::Optional => assert_eq!(with, m.present(), "{}", m.name),
            Flag::Standard => assert_eq!(without, !m.present(), "{}", m.name),
        }
        if m.flag == Flag::None {
            continue;
        }
        // Built in: it has a sample here, and the sample works. Not built in: each of its
        // directives is refused or warned (walked by the tests above), none is silent.
        assert_eq!(
            samples.contains(m.name),
            m.present(),
            "{}: a module -V calls built in needs a sample in BUILT_IN, and only then",
            m.name
        );
        if !m.present() {
            for d in m.directives {
                assert!(
                    matches!(
                        d.support,
                        Support::Warn | Support::DefaultOnly(_) | Support::Refuse(_)
                    ),
                    "{} of {} is silently ignored",
                    d.name,
                    m.name
                );
            }
        }
    }
    for (module, context, line) in BUILT_IN {
        let c = check(context, line);
        assert!(c.ok, "{module}: {line}\n{}", c.stderr);
        assert!(
            !c.stderr.contains("[warn]"),
            "{module}: {line}\n{}",
            c.stderr
        );
    }
}

/// The README's two lists, between their headings.
fn readme_section(readme: &str, heading: &str) -> String {
    let start = readme
        .find(heading)
        .unwrap_or_else(|| panic!("README has no {heading:?}"));
    let rest = &readme[start + heading.len()..];
    let end = rest.find("\n#").unwrap_or(rest.len());
    rest[..end].to_owned()
}

#[test]
fn the_readme_lists_what_is_refused_and_what_is_ignored() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"))
            .expect("read README.md");
    let refused = readme_section(&readme, "### Refused");
    let ignored = readme_section(&readme, "### Ignored with a warning");
    for spec in directives() {
        let quoted = format!("`{}`", spec.name);
        match spec.support {
            Support::Refuse(_) => assert!(refused.contains(&quoted), "README: {quoted} refused"),
            Support::Warn | Support::DefaultOnly(_) => {
                assert!(ignored.contains(&quoted), "README: {quoted} ignored")
            }
            Support::Yes | Support::Inert => {}
        }
    }
}

/// `set $limit_rate` limits the response as nginx's; a `map` onto `$limit_rate` replaces how
/// nginx reads the variable without limiting anything, which is not done: it is refused.
#[test]
fn limit_rate_by_set_loads_and_by_map_is_refused() {
    let c = check("location", "set $limit_rate 10k;");
    assert!(c.ok, "set $limit_rate:\n{}", c.stderr);
    let c = check("http", "map $uri $limit_rate { default 10k; }");
    assert!(!c.ok, "map onto $limit_rate loads:\n{}", c.stderr);
    let expected = format!(
        "portcullis: [emerg] setting \"$limit_rate\" is not supported yet and cannot be ignored safely in CONF:{}",
        c.line
    );
    assert_eq!(c.stderr.lines().next(), Some(expected.as_str()));
}

/// `charset` with a different `source_charset` makes nginx recode the body through the
/// `charset_map` between them: a level with no such map is refused, with nginx's words.
#[test]
fn recoding_without_a_map_is_refused() {
    let line = "charset utf-8; source_charset koi8-r;";
    let c = check("location", line);
    assert!(!c.ok, "{line} loads:\n{}", c.stderr);
    assert_eq!(
        c.stderr.lines().next(),
        Some(
            "portcullis: [emerg] no \"charset_map\" between the charsets \"koi8-r\" and \"utf-8\""
        ),
        "{}",
        c.stderr
    );
    assert!(check("location", "charset utf-8; source_charset utf-8;").ok);
}
