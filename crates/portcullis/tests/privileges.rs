//! `user`: started as root, the server serves every request as the `user` directive's user
//! and group (`nobody` without one), keeps root where nginx's master keeps it (binding, logs,
//! reloads), and says what nginx says about a user it cannot find or cannot become.
//!
//! Each case runs under nginx and portcullis. nginx's workers are processes, portcullis's
//! are threads named `worker-N`; either way their credentials are read from `/proc`. The
//! tests need root: under CI (which runs as root) its absence is a failure, elsewhere a
//! visible skip.

mod support;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use support::{get, kinds, read_lossy, wait_until, Kind, Server};

/// How long the workers get to start after the port accepts.
const STARTUP_DEADLINE: Duration = Duration::from_secs(10);
/// How long a reload gets to replace the workers.
const RELOAD_DEADLINE: Duration = Duration::from_secs(10);

/// The configuration: `{USER}` is the `user` line (or nothing); `html` holds a page anyone
/// may read and one only root may.
const CONFIG: &str = r#"{USER}
daemon off;
worker_processes 2;
pid {PREFIX}/server.pid;
error_log {PREFIX}/error.log info;
events { worker_connections 256; }
http {
    access_log {PREFIX}/access.log;
    server {
        listen 127.0.0.1:{PORT0};
        root {PREFIX}/html;
    }
}
"#;

/// The credentials of one process or thread, as `/proc/.../status` gives them.
#[derive(Debug, PartialEq, Eq)]
struct Ids {
    /// Real, effective, saved and filesystem ids.
    uid: Vec<u32>,
    gid: Vec<u32>,
    /// Supplementary groups, sorted.
    groups: Vec<u32>,
}

impl Ids {
    fn read(status: &Path) -> Option<Ids> {
        let text = fs::read_to_string(status).ok()?;
        let field = |name: &str| -> Vec<u32> {
            let mut ids: Vec<u32> = text
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .unwrap_or("")
                .split_whitespace()
                .filter_map(|n| n.parse().ok())
                .collect();
            if name == "Groups:" {
                ids.sort_unstable();
            }
            ids
        };
        Some(Ids {
            uid: field("Uid:"),
            gid: field("Gid:"),
            groups: field("Groups:"),
        })
    }

    /// What `initgroups` gives `user` with `group` as its group, by `id`.
    fn of(user: &str, group: &str) -> Ids {
        let id = |args: &[&str]| -> Vec<u32> {
            let out = Command::new("id").args(args).output().expect("run id");
            assert!(out.status.success(), "id {args:?}: {out:?}");
            let mut ids: Vec<u32> = String::from_utf8_lossy(&out.stdout)
                .split_whitespace()
                .map(|n| n.parse().expect("numeric id"))
                .collect();
            ids.sort_unstable();
            ids
        };
        let uid = id(&["-u", user])[0];
        let gid = gid_of(group);
        let mut groups = id(&["-G", user]);
        if !groups.contains(&gid) {
            groups.push(gid);
            groups.sort_unstable();
        }
        Ids {
            uid: vec![uid; 4],
            gid: vec![gid; 4],
            groups,
        }
    }
}

/// The id of group `name`, from /etc/group.
fn gid_of(name: &str) -> u32 {
    read_lossy(Path::new("/etc/group"))
        .lines()
        .find_map(|l| {
            let mut f = l.split(':');
            (f.next() == Some(name))
                .then(|| f.nth(1).and_then(|g| g.parse().ok()))
                .flatten()
        })
        .unwrap_or_else(|| panic!("no group {name} in /etc/group"))
}

/// The group nginx takes for `nobody` when none is named: `nobody` where it exists, else
/// Debian's `nogroup`.
fn nobody_group() -> &'static str {
    let groups = read_lossy(Path::new("/etc/group"));
    if groups.lines().any(|l| l.starts_with("nobody:")) {
        "nobody"
    } else {
        "nogroup"
    }
}

/// The credentials of the server's master and of each of its workers.
fn credentials(server: &Server) -> (Ids, Vec<Ids>) {
    let pid = server.pid();
    let master = Ids::read(Path::new(&format!("/proc/{pid}/status"))).expect("master status");
    let mut workers = Vec::new();
    match server.kind {
        // Worker processes: the master's children.
        Kind::Nginx => {
            for entry in fs::read_dir("/proc").expect("read /proc").flatten() {
                let status = entry.path().join("status");
                let parent = format!("PPid:\t{pid}\n");
                if read_lossy(&status).contains(&parent) {
                    workers.extend(Ids::read(&status));
                }
            }
        }
        // Worker threads, by name.
        Kind::Portcullis => {
            let tasks = format!("/proc/{pid}/task");
            for entry in fs::read_dir(tasks).expect("read tasks").flatten() {
                if read_lossy(&entry.path().join("comm")).starts_with("worker-") {
                    workers.extend(Ids::read(&entry.path().join("status")));
                }
            }
        }
    }
    (master, workers)
}

/// True when running as root; otherwise fails under CI and skips visibly elsewhere.
fn root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    let message = "not root: the privilege tests need to start servers as root";
    assert!(std::env::var_os("CI").is_none(), "{message}");
    support::skip(message);
    false
}

/// Starts `kind` with `user_line`, a public and a root-only page in its `html`.
fn start(kind: Kind, user_line: &str) -> Option<Server> {
    let template = CONFIG.replace("{USER}", user_line);
    let server = Server::start(kind, 1, &template)?;
    let html = server.path("html");
    fs::create_dir_all(&html).expect("mkdir html");
    fs::set_permissions(&html, fs::Permissions::from_mode(0o755)).expect("chmod html");
    for (name, mode) in [("public.html", 0o644), ("secret.html", 0o600)] {
        let path = html.join(name);
        fs::write(&path, format!("{name}\n")).expect("write page");
        fs::set_permissions(&path, fs::Permissions::from_mode(mode)).expect("chmod page");
    }
    Some(server)
}

/// Both servers' workers serve as `expected` and their masters stay root: a page anyone may
/// read is served, one only root may read is 403, and the access log (opened by the master)
/// has both.
fn check_serving_as(kind: Kind, user_line: &str, expected: &Ids) {
    let Some(server) = start(kind, user_line) else {
        return;
    };
    // The port accepts once bound, which may be before every worker has started, and a
    // worker nginx has just forked is root until it calls setuid.
    let settled = wait_until(STARTUP_DEADLINE, || {
        let (_, workers) = credentials(&server);
        workers.len() == 2 && workers.iter().all(|w| w == expected)
    });
    assert!(
        settled || credentials(&server).1.len() == 2,
        "{kind}: two workers\n{}",
        server.logs()
    );
    let (master, workers) = credentials(&server);
    assert_eq!(master.uid, vec![0; 4], "{kind}: the master keeps root");
    for w in &workers {
        assert_eq!(
            w, expected,
            "{kind} with {user_line:?}: a worker's credentials"
        );
    }
    let port = server.port(0);
    let public = get(port, "/public.html").expect("GET public");
    assert_eq!(public.status, 200, "{kind}: a page anyone may read");
    assert_eq!(public.body_text(), "public.html\n");
    let secret = get(port, "/secret.html").expect("GET secret");
    assert_eq!(secret.status, 403, "{kind}: a page only root may read");
    let logged = || {
        let log = read_lossy(&server.access_log_path());
        log.contains("GET /public.html HTTP/1.1\" 200")
            && log.contains("GET /secret.html HTTP/1.1\" 403")
    };
    assert!(
        wait_until(Duration::from_secs(5), logged),
        "{kind}: both requests in the access log\n{}",
        read_lossy(&server.access_log_path())
    );
}

#[test]
fn workers_serve_as_the_user_directive_names() {
    if !root() {
        return;
    }
    let group = nobody_group();
    let expected = Ids::of("nobody", group);
    for kind in kinds() {
        check_serving_as(kind, &format!("user nobody {group};"), &expected);
    }
}

#[test]
fn without_a_user_directive_workers_serve_as_nobody() {
    if !root() {
        return;
    }
    let expected = Ids::of("nobody", nobody_group());
    for kind in kinds() {
        check_serving_as(kind, "", &expected);
    }
}

#[test]
fn a_reload_that_changes_the_user_replaces_the_workers() {
    if !root() {
        return;
    }
    let group = nobody_group();
    let nobody = Ids::of("nobody", group);
    let daemon = Ids::of("daemon", "daemon");
    for kind in kinds() {
        let Some(server) = start(kind, &format!("user nobody {group};")) else {
            continue;
        };
        let started = wait_until(STARTUP_DEADLINE, || {
            let (_, workers) = credentials(&server);
            workers.len() == 2 && workers.iter().all(|w| *w == nobody)
        });
        assert!(
            started,
            "{kind}: two workers as nobody: {:?}",
            credentials(&server)
        );
        server.write_config(&CONFIG.replace("{USER}", "user daemon;"));
        server.signal(libc::SIGHUP);
        let replaced = wait_until(RELOAD_DEADLINE, || {
            let (_, workers) = credentials(&server);
            workers.len() == 2 && workers.iter().all(|w| *w == daemon)
        });
        assert!(
            replaced,
            "{kind}: after the reload every worker serves as daemon: {:?}\n{}",
            credentials(&server),
            server.logs()
        );
        assert_eq!(credentials(&server).0.uid, vec![0; 4], "{kind}: master");
        let public = get(server.port(0), "/public.html").expect("GET after reload");
        assert_eq!(public.status, 200, "{kind}: served after the reload");
    }
}

/// Runs `kind -t` on `user_line` as the user `as_user` (root when `None`, else with
/// nobody's group) and returns its
/// exit status and stderr, with the configuration file's path written as `CONF`.
fn test_config(kind: Kind, user_line: &str, as_user: Option<&str>) -> Option<(bool, String)> {
    let binary = kind.binary()?;
    let dir = support::TempDir::new("user-t");
    // Anyone may write here: nginx -t opens its error log, also when run as nobody.
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o777)).expect("chmod");
    let conf = dir.path().join("nginx.conf");
    let ports = support::free_ports(1);
    let text = support::render(&CONFIG.replace("{USER}", user_line), dir.path(), &ports);
    fs::write(&conf, text).expect("write config");
    let command = match as_user {
        Some(user) => {
            let mut c = Command::new("setpriv");
            let ids = Ids::of(user, nobody_group());
            c.arg(format!("--reuid={}", ids.uid[0]))
                .arg(format!("--regid={}", ids.gid[0]))
                .arg("--clear-groups")
                .arg(&binary);
            c
        }
        None => Command::new(&binary),
    };
    let out = support::test_config(command, dir.path(), &conf);
    let stderr = String::from_utf8_lossy(&out.stderr).replace(&conf.display().to_string(), "CONF");
    Some((out.status.success(), stderr))
}

/// The lines of `stderr` about the `user` directive, as `[level] message`: without the
/// program's name (`nginx: `) or the time and pid (`2026/01/01 00:00:00 [emerg] 1#1: `).
fn user_lines(stderr: &str) -> Vec<String> {
    stderr
        .lines()
        .filter(|l| l.contains("user") || l.contains("getpwnam") || l.contains("getgrnam"))
        .map(|l| {
            let from_level = l.find(" [").map_or(l, |i| &l[i + 1..]);
            let (level, rest) = from_level.split_once("] ").unwrap_or(("", from_level));
            let is_pid = |s: &str| s.split('#').all(|n| n.parse::<u32>().is_ok());
            let message = match rest.split_once(": ") {
                Some((pid, message)) if is_pid(pid) => message,
                _ => rest,
            };
            format!("{level}] {message}")
        })
        .collect()
}

#[test]
fn unknown_users_and_groups_are_refused_in_nginx_words() {
    if !root() {
        return;
    }
    let cases = [
        (
            "user no-such-user;",
            "[emerg] getpwnam(\"no-such-user\") failed in CONF:1",
        ),
        (
            "user nobody no-such-group;",
            "[emerg] getgrnam(\"no-such-group\") failed in CONF:1",
        ),
        (
            "user a b c;",
            "[emerg] invalid number of arguments in \"user\" directive in CONF:1",
        ),
    ];
    for kind in kinds() {
        for (line, expected) in cases {
            let Some((ok, stderr)) = test_config(kind, line, None) else {
                continue;
            };
            assert!(!ok, "{kind} -t accepts {line:?}:\n{stderr}");
            assert_eq!(
                user_lines(&stderr),
                vec![expected],
                "{kind} on {line:?}:\n{stderr}"
            );
        }
    }
}

#[test]
fn started_as_another_user_the_user_directive_is_ignored_with_a_warning() {
    if !root() {
        return;
    }
    let expected = "[warn] the \"user\" directive makes sense only if the master process runs with super-user privileges, ignored in CONF:1";
    for kind in kinds() {
        let Some((ok, stderr)) = test_config(kind, "user daemon;", Some("nobody")) else {
            continue;
        };
        assert!(ok, "{kind} -t as nobody:\n{stderr}");
        assert_eq!(user_lines(&stderr), vec![expected], "{kind}:\n{stderr}");
    }
}
