//! `portcullis-bench run` against the real programs: every generated config is one nginx
//! (and HAProxy) accepts, a short run writes the records `size --from-run` reads, and wrk
//! runs the token cycle script as intended.
//!
//! nginx, HAProxy, wrk and the portcullis binary are found as a user's machine has them; a
//! missing one skips its part with a visible message (a failure when `CI` is set).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

use portcullis_bench::assets;
use portcullis_bench::run;
use portcullis_bench::scenario::{Jwt, Layout, SCENARIOS};

/// Environment variable naming the portcullis binary; by default the one built beside this
/// test in the same target directory.
const PORTCULLIS_ENV: &str = "PORTCULLIS_BIN";

fn skip(message: &str) {
    assert!(std::env::var_os("CI").is_none(), "{message}");
    let _ = writeln!(std::io::stderr(), "SKIPPED: {message}");
}

fn tool(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin")])
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

fn portcullis() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os(PORTCULLIS_ENV) {
        return Some(PathBuf::from(path));
    }
    // target/<profile>/deps/run-<hash> -> target/<profile>/portcullis
    let exe = std::env::current_exe().ok()?;
    let candidate = exe.parent()?.parent()?.join("portcullis");
    candidate.is_file().then_some(candidate)
}

/// A fresh directory, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(label: &str) -> TempDir {
        let dir =
            std::env::temp_dir().join(format!("portcullis-bench-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("logs")).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn check(output: &Output, what: &str) {
    assert!(
        output.status.success(),
        "{what}:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

fn nginx_t(nginx: &Path, layout: &Layout, conf: &str, name: &str) {
    let path = layout.dir.join(name);
    std::fs::write(&path, conf).unwrap();
    let output = Command::new(nginx)
        .arg("-p")
        .arg(format!("{}/", layout.dir.display()))
        .arg("-c")
        .arg(&path)
        .arg("-e")
        .arg(layout.logs().join("t-error.log"))
        .arg("-t")
        .output()
        .unwrap();
    check(&output, &format!("nginx -t on {name}\n{conf}"));
}

#[test]
fn every_scenario_config_passes_nginx_t() {
    let Some(nginx) = tool("nginx") else {
        return skip("nginx not installed");
    };
    let haproxy = tool("haproxy");
    if haproxy.is_none() {
        skip("haproxy not installed: its configs are not checked");
    }
    let dir = TempDir::new("configs");
    let layout = Layout {
        dir: dir.0.clone(),
        port: 18080,
        second_port: 18085,
        upstream_ports: [18081, 18082, 18083, 18084],
    };
    assets::docroot(&layout).unwrap();
    for s in SCENARIOS {
        for cert in s.certs() {
            if !layout.cert(cert).exists() {
                assets::certificate(&layout, cert).unwrap();
            }
        }
        let secret = match s.jwt {
            Some(jwt) => {
                let made = assets::jwt(&layout, jwt).unwrap();
                assert_eq!(made.token.split('.').count(), 3);
                assert_eq!(made.secret.is_empty(), jwt == Jwt::Rs256);
                made.secret
            }
            None => String::new(),
        };
        let mut conf = s.nginx_conf(&layout, 2);
        if s.jwt.is_some() {
            // auth_jwt is NGINX Plus's; nginx open source checks the rest of the config.
            conf = conf
                .lines()
                .filter(|l| !l.contains("auth_jwt"))
                .collect::<Vec<_>>()
                .join("\n");
        }
        nginx_t(&nginx, &layout, &conf, &format!("{}.conf", s.name));
        // An ingress controller's scenario: portcullis on what its controller generates.
        if let Some(own) = s.portcullis_conf(&layout, 2).unwrap() {
            let group = "default_cafe-ingress_coffee-svc_80";
            assert!(
                own.contains(&format!("proxy_pass http://{group};")),
                "{own}"
            );
            assert!(own.contains("server 127.0.0.1:18083;"), "{own}");
            assert!(!own.contains("18084"), "three backends: {own}");
        }
        if let Some(upstream) = s.upstream_conf(&layout, 1) {
            nginx_t(
                &nginx,
                &layout,
                &upstream,
                &format!("{}-upstream.conf", s.name),
            );
        }
        if let (Some(haproxy), Some(cfg)) = (&haproxy, s.haproxy_cfg(&layout, 2, &secret)) {
            let path = layout.dir.join(format!("{}.cfg", s.name));
            std::fs::write(&path, &cfg).unwrap();
            let output = Command::new(haproxy)
                .arg("-c")
                .arg("-f")
                .arg(&path)
                .output()
                .unwrap();
            check(&output, &format!("haproxy -c on {}\n{cfg}", s.name));
        }
    }
}

/// `portcullis-bench run` of `scenarios` on `systems`, one 2-second run each, no warm-up,
/// with `nginx` (also the upstreams'), writing into `out`.
fn short_run(scenarios: &str, systems: &str, nginx: &Path, out: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_portcullis-bench"));
    cmd.args(["run", "--scenarios", scenarios, "--systems", systems])
        .args(["--duration", "2s", "--warmup", "0", "--repeats", "1"])
        .arg("--nginx")
        .arg(nginx)
        .arg("--out")
        .arg(out);
    cmd
}

#[test]
fn web_1k_run_writes_records_size_reads() {
    let (Some(nginx), Some(_wrk)) = (tool("nginx"), tool("wrk")) else {
        return skip("nginx or wrk not installed");
    };
    let Some(portcullis) = portcullis() else {
        return skip(&format!(
            "no portcullis binary: build it (cargo build -p portcullis) or set {PORTCULLIS_ENV}"
        ));
    };
    let cpus = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    if cpus.trim() == "0" {
        return skip("the method needs two CPUs");
    }
    let out = TempDir::new("e2e");
    let output = short_run("web-1k", "portcullis,nginx", &nginx, &out.0)
        .arg("--portcullis")
        .arg(&portcullis)
        .output()
        .unwrap();
    check(&output, "portcullis-bench run");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("web-1k portcullis workers=1 round 1/1"),
        "{stderr}"
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("results.jsonl"), "{stdout}");

    let text = std::fs::read_to_string(out.0.join("results.jsonl")).unwrap();
    let records = run::parse(&text, "results.jsonl").unwrap();
    let systems: Vec<&str> = records.iter().map(|r| r.system.as_str()).collect();
    assert_eq!(systems, ["portcullis", "nginx"], "{text}");
    for r in &records {
        assert_eq!(
            (r.scenario.as_str(), r.workers, r.round),
            ("web-1k", 1, Some(1))
        );
        assert_eq!(r.failure, None, "{text}");
        assert!(r.requests > 0, "{text}");
        assert_eq!(
            (r.errors, r.non_2xx, r.socket_errors),
            (0, Some(0), Some(0)),
            "{text}"
        );
        assert!(r.cpu_s > 0.0 && r.duration_s > 1.0, "{text}");
        assert!(r.requests_per_s.is_some_and(|v| v > 0.0), "{text}");
        assert!(
            r.latency_p99_ms.is_some() && r.latency_max_ms.is_some(),
            "{text}"
        );
    }
    let csv = std::fs::read_to_string(out.0.join("results.csv")).unwrap();
    assert_eq!(csv.lines().count(), 3, "{csv}");
    let html = std::fs::read_to_string(out.0.join("report.html")).unwrap();
    assert!(html.contains("<svg"), "{html}");

    // The records feed the sizing model as they are.
    let sized = Command::new(env!("CARGO_BIN_EXE_portcullis-bench"))
        .args([
            "size",
            "--system",
            "nginx",
            "--scenario",
            "web-1k",
            "--from-run",
        ])
        .arg(out.0.join("results.jsonl"))
        .output()
        .unwrap();
    check(&sized, "portcullis-bench size --from-run");
}

/// The L4 floor proxies rp (TLS both ways) and rp-http (plain) without an error, each
/// answer the size of the file, and is not applicable where the proxy has more to do.
#[test]
fn l4_floor_proxies_rp_and_rp_http_without_errors() {
    let (Some(nginx), Some(_wrk)) = (tool("nginx"), tool("wrk")) else {
        return skip("nginx or wrk not installed");
    };
    let out = TempDir::new("floor");
    let output = short_run("rp,rp-http,apigw", "l4-floor", &nginx, &out.0)
        .output()
        .unwrap();
    check(&output, "portcullis-bench run --systems l4-floor");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("measuring anyway"), "{stderr}");
    let text = std::fs::read_to_string(out.0.join("results.jsonl")).unwrap();
    let records = run::parse(&text, "results.jsonl").unwrap();
    let seen: Vec<(&str, &str)> = records
        .iter()
        .map(|r| (r.scenario.as_str(), r.system.as_str()))
        .collect();
    assert_eq!(
        seen,
        [
            ("rp", "l4-floor"),
            ("rp-http", "l4-floor"),
            ("apigw", "l4-floor")
        ],
        "{text}"
    );
    for r in &records[..2] {
        assert_eq!(r.failure, None, "{text}");
        assert!(r.requests > 1000, "{text}");
        assert_eq!((r.errors, r.socket_errors), (0, Some(0)), "{text}");
    }
    let apigw = records[2].failure.as_deref().unwrap_or_default();
    assert!(apigw.contains("not applicable"), "{text}");
}

/// What a request the token cycle script sent carried: its connection, token and Host.
struct Seen {
    connection: usize,
    authorization: Option<String>,
    host: Option<String>,
}

/// Answers every request on `listener` with an empty 200 and records what it carried.
fn record_requests(listener: std::net::TcpListener, seen: Arc<Mutex<Vec<Seen>>>) {
    for (connection, stream) in listener.incoming().enumerate() {
        let Ok(stream) = stream else { continue };
        let seen = Arc::clone(&seen);
        std::thread::spawn(move || {
            let mut writer = stream.try_clone().unwrap();
            let mut reader = BufReader::new(stream);
            let mut current = Seen {
                connection,
                authorization: None,
                host: None,
            };
            let mut line = String::new();
            loop {
                line.clear();
                if reader.read_line(&mut line).unwrap_or(0) == 0 {
                    return;
                }
                let line = line.trim_end();
                if line.is_empty() {
                    let done = std::mem::replace(
                        &mut current,
                        Seen {
                            connection,
                            authorization: None,
                            host: None,
                        },
                    );
                    seen.lock().unwrap().push(done);
                    if writer
                        .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
                        .is_err()
                    {
                        return;
                    }
                } else if let Some((name, value)) = line.split_once(": ") {
                    match name.to_ascii_lowercase().as_str() {
                        "authorization" => current.authorization = Some(value.to_owned()),
                        "host" => current.host = Some(value.to_owned()),
                        _ => {}
                    }
                }
            }
        });
    }
}

#[test]
fn token_cycle_script_sends_a_different_token_with_every_request() {
    let Some(wrk) = tool("wrk") else {
        return skip("wrk not installed");
    };
    const TOKENS: usize = 64;
    const THREADS: usize = 2;
    const CONNECTIONS: usize = 4;
    let dir = TempDir::new("cycle");
    let tokens: Vec<String> = (0..TOKENS).map(|i| format!("token-{i}")).collect();
    let script = dir.0.join("token.lua");
    assets::wrk_token_cycle_script(&script, &tokens, THREADS as u32).unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let recorder = Arc::clone(&seen);
    std::thread::spawn(move || record_requests(listener, recorder));
    let output = Command::new(wrk)
        .args([
            &format!("-t{THREADS}"),
            &format!("-c{CONNECTIONS}"),
            "-d1s",
            "-s",
        ])
        .arg(&script)
        .arg(format!("http://127.0.0.1:{port}/api_old/1kb"))
        .output()
        .unwrap();
    check(&output, "wrk with the token cycle script");
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    assert!(seen.len() > 4 * TOKENS, "only {} requests", seen.len());

    let mut counts = [0usize; TOKENS];
    let mut thread_of_connection = std::collections::HashMap::new();
    for s in &seen {
        assert_eq!(
            s.host.as_deref(),
            Some(format!("127.0.0.1:{port}").as_str())
        );
        let token = s
            .authorization
            .as_deref()
            .and_then(|a| a.strip_prefix("Bearer token-"))
            .unwrap_or_else(|| panic!("authorization {:?}", s.authorization));
        let i: usize = token.parse().unwrap();
        counts[i] += 1;
        // A wrk thread owns its connections and sends only its share of the tokens.
        let thread = *thread_of_connection
            .entry(s.connection)
            .or_insert(i % THREADS);
        assert_eq!(
            i % THREADS,
            thread,
            "connection {} mixes shares",
            s.connection
        );
    }
    // Each thread cycles through its share: the counts differ by at most one per token, plus
    // the requests in flight when wrk stopped.
    for share in 0..THREADS {
        let share: Vec<usize> = counts
            .iter()
            .copied()
            .skip(share)
            .step_by(THREADS)
            .collect();
        let (min, max) = (share.iter().min().unwrap(), share.iter().max().unwrap());
        assert!(*min > 0 && max - min <= 1 + CONNECTIONS, "{counts:?}");
    }
}
