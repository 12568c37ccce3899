//! The test rig: starts the upstream file servers and each system under test on a
//! scenario's configuration, loads it with wrk and measures it.
//!
//! The method is the seeds', on one machine: the system under test is pinned with
//! `taskset` to its own CPUs, wrk and the upstream file servers to the others. After a
//! warm-up, utime + stime of every process of the system is read from /proc before and
//! after a fixed-length wrk run and divided by the requests wrk completed. Systems
//! alternate within each round, so a slow spell of a shared machine falls on all alike.

use std::fs;
use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::assets;
use crate::procfs;
use crate::run::RunRecord;
use crate::scenario::{Layout, Scenario};
use crate::wrk;

/// How long a system may take from spawn to answering the readiness probe.
const START_DEADLINE: Duration = Duration::from_secs(15);
/// How long a system may take to exit after SIGTERM before its processes are killed.
const STOP_DEADLINE: Duration = Duration::from_secs(5);
/// Pause between readiness probes and exit checks; the deadlines above bound the waits.
const POLL_INTERVAL: Duration = Duration::from_millis(50);
/// Length of the separate run under strace: strace slows the system down, so CPU figures
/// never come from it.
const SYSCALL_RUN: Duration = Duration::from_secs(3);
/// Time given strace to attach to every thread before the load starts; strace prints no
/// signal when it is done attaching.
const STRACE_ATTACH: Duration = Duration::from_secs(1);

/// A kind of system under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Portcullis,
    Nginx,
    Haproxy,
    /// `portcullis-bench floor`: the L4 floor of the proxy scenarios.
    Floor,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Portcullis => "portcullis",
            Kind::Nginx => "nginx",
            Kind::Haproxy => "haproxy",
            Kind::Floor => "l4-floor",
        }
    }

    pub fn parse(name: &str) -> Option<Kind> {
        [Kind::Portcullis, Kind::Nginx, Kind::Haproxy, Kind::Floor]
            .into_iter()
            .find(|k| k.name() == name)
    }
}

/// A system under test and its binary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct System {
    pub kind: Kind,
    pub binary: PathBuf,
}

/// Everything a run needs, as the command line gave it.
#[derive(Debug, Clone)]
pub struct Plan {
    pub scenarios: Vec<&'static Scenario>,
    pub systems: Vec<System>,
    /// Worker counts of the sweep.
    pub workers: Vec<u32>,
    pub threads: u32,
    pub connections: u32,
    /// Tokens a scenario with [`Scenario::distinct_tokens`] cycles through.
    pub jwt_tokens: usize,
    pub duration: Duration,
    pub warmup: Duration,
    pub repeats: u32,
    /// CPUs of the system under test, and of wrk and the upstream servers.
    pub sut_cpus: Vec<usize>,
    pub load_cpus: Vec<usize>,
    pub syscalls: bool,
    pub out: PathBuf,
    /// nginx for the upstream file servers.
    pub upstream_nginx: PathBuf,
    pub wrk: PathBuf,
    pub machine: Option<String>,
}

/// Progress on stderr.
fn note(message: &str) {
    let _ = writeln!(std::io::stderr(), "portcullis-bench: {message}");
}

/// A comma-separated CPU list as taskset takes it.
pub fn cpu_list(cpus: &[usize]) -> String {
    cpus.iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// Ports on 127.0.0.1 nothing listens on now, distinct from each other.
fn free_ports<const N: usize>() -> std::io::Result<[u16; N]> {
    let listeners: Vec<TcpListener> = (0..N)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<_, _>>()?;
    let mut ports = [0; N];
    for (port, listener) in ports.iter_mut().zip(&listeners) {
        *port = listener.local_addr()?.port();
    }
    Ok(ports)
}

/// A started process tree, stopped when dropped.
struct Running {
    child: Child,
    name: String,
}

impl Running {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn exited(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGTERM (fast stop in nginx, portcullis and HAProxy), then SIGKILL to whatever of
    /// the tree is left: nginx's workers outlive a killed master. Once the root has been
    /// reaped its PID may belong to another process, so nothing is signalled then.
    fn stop(&mut self) {
        if self.exited() {
            return;
        }
        let tree = procfs::tree(self.pid());
        signal(self.pid(), libc::SIGTERM);
        let deadline = Instant::now() + STOP_DEADLINE;
        while !self.exited() && Instant::now() < deadline {
            thread::sleep(POLL_INTERVAL);
        }
        for pid in tree {
            if procfs::alive(pid) {
                signal(pid, libc::SIGKILL);
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if !self.exited() {
            note(&format!("stopping {}", self.name));
            self.stop();
        }
    }
}

fn signal(pid: u32, signal: libc::c_int) {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return;
    };
    // SAFETY: kill(2) takes plain integers and touches no memory of this process.
    unsafe {
        libc::kill(pid, signal);
    }
}

/// The answer of the readiness probe: status and body length, or why there was none.
fn probe(url: &str, token: Option<&str>, host: Option<&str>) -> Result<(u16, usize), String> {
    let mut cmd = Command::new("curl");
    cmd.args([
        "-sk",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code} %{size_download}",
    ]);
    cmd.args(["--max-time", "5"]);
    if let Some(token) = token {
        cmd.args(["-H", &format!("Authorization: Bearer {token}")]);
    }
    if let Some(host) = host {
        cmd.args(["-H", &format!("Host: {host}")]);
    }
    let output = cmd.arg(url).output().map_err(|e| format!("curl: {e}"))?;
    let text = String::from_utf8_lossy(&output.stdout);
    let mut words = text.split_whitespace();
    match (
        words.next().and_then(|s| s.parse().ok()),
        words.next().and_then(|s| s.parse().ok()),
    ) {
        (Some(status), Some(len)) if status > 0 => Ok((status, len)),
        _ => Err(format!("no answer from {url}")),
    }
}

/// One scenario's files, ports and token.
struct Stage {
    scenario: &'static Scenario,
    layout: Layout,
    /// The token of the readiness probe: the one wrk sends, or the first of those it cycles
    /// through.
    token: Option<String>,
    secret: String,
    script: Option<PathBuf>,
}

impl Stage {
    fn prepare(plan: &Plan, scenario: &'static Scenario, dir: PathBuf) -> anyhow::Result<Stage> {
        if dir.exists() {
            fs::remove_dir_all(&dir)?;
        }
        fs::create_dir_all(dir.join("logs"))?;
        let [port, second_port, a, b, c, d] = free_ports::<6>()?;
        let layout = Layout {
            dir,
            port,
            second_port,
            upstream_ports: [a, b, c, d],
        };
        assets::docroot(&layout)?;
        for cert in scenario.certs() {
            assets::certificate(&layout, cert)?;
        }
        let (mut token, mut secret, mut script) = (None, String::new(), None);
        if let Some(jwt) = scenario.jwt {
            let made = assets::jwt(&layout, jwt)?;
            let path = layout.dir.join("token.lua");
            if scenario.distinct_tokens {
                let started = Instant::now();
                let tokens = assets::rs256_tokens(&layout, plan.jwt_tokens)?;
                note(&format!(
                    "{}: signed {} tokens in {:.1}s",
                    scenario.name,
                    tokens.len(),
                    started.elapsed().as_secs_f64()
                ));
                assets::wrk_token_cycle_script(&path, &tokens, plan.threads)?;
                token = tokens.into_iter().next();
            } else {
                assets::wrk_script(&path, &made.token)?;
                token = Some(made.token);
            }
            secret = made.secret;
            script = Some(path);
        }
        Ok(Stage {
            scenario,
            layout,
            token,
            secret,
            script,
        })
    }

    fn url(&self) -> String {
        self.scenario.url(self.layout.port)
    }
}

/// Runs the plan; each record is handed to `sink` as soon as it is measured.
pub fn run(plan: &Plan, mut sink: impl FnMut(&RunRecord)) -> anyhow::Result<()> {
    let started = Instant::now();
    let total_runs =
        plan.scenarios.len() * plan.systems.len() * plan.workers.len() * plan.repeats as usize;
    let per_run = plan.duration + plan.warmup;
    let mut done = 0usize;
    for scenario in &plan.scenarios {
        let stage = Stage::prepare(plan, scenario, plan.out.join("work").join(scenario.name))?;
        note(&format!("{}: {}", scenario.name, scenario.about));
        let _upstreams = match scenario.upstream_conf(&stage.layout, plan.load_cpus.len() as u32) {
            Some(conf) => Some(start_upstreams(plan, &stage, &conf)?),
            None => None,
        };
        let _php = match scenario.content {
            crate::scenario::Content::Php => Some(start_php_fpm(plan, &stage)?),
            _ => None,
        };
        for round in 1..=plan.repeats {
            for &workers in &plan.workers {
                for system in &plan.systems {
                    let left = per_run * (total_runs - done) as u32;
                    note(&format!(
                        "{} {} workers={workers} round {round}/{}: about {}s left",
                        scenario.name,
                        system.kind.name(),
                        plan.repeats,
                        left.as_secs()
                    ));
                    let mut record = measure(plan, &stage, system, workers, round);
                    record.round = Some(round);
                    record.cpus = Some(plan.sut_cpus.len() as u32);
                    record.machine.clone_from(&plan.machine);
                    report_line(&record);
                    sink(&record);
                    done += 1;
                }
            }
        }
    }
    note(&format!("done in {}s", started.elapsed().as_secs()));
    Ok(())
}

fn report_line(r: &RunRecord) {
    if let Some(failure) = &r.failure {
        note(&format!("  {} failed: {failure}", r.system));
        return;
    }
    let cpu_us = if r.requests > 0 {
        r.cpu_per_request() * 1e6
    } else {
        0.0
    };
    note(&format!(
        "  {} requests, {:.0} req/s, {cpu_us:.1} CPU µs/request, {} errors",
        r.requests,
        r.requests_per_s.unwrap_or(0.0),
        r.errors
    ));
}

fn start_upstreams(plan: &Plan, stage: &Stage, conf: &str) -> anyhow::Result<Running> {
    let path = stage.layout.dir.join("upstream.conf");
    fs::write(&path, conf)?;
    let mut cmd = Command::new("taskset");
    cmd.arg("-c").arg(cpu_list(&plan.load_cpus));
    cmd.arg(&plan.upstream_nginx);
    nginx_args(&mut cmd, &stage.layout, &path, "upstream");
    let mut running = spawn(cmd, &stage.layout, "upstream file servers")?;
    let scheme = if matches!(
        stage.scenario.content,
        crate::scenario::Content::Proxy { tls: true }
    ) {
        "https"
    } else {
        "http"
    };
    let url = format!(
        "{scheme}://127.0.0.1:{}/1kb",
        stage.layout.upstream_ports[0]
    );
    match wait_ready(&mut running, &url, None, None) {
        Ok((200, _)) => Ok(running),
        Ok((status, _)) => anyhow::bail!("the upstream file servers answered {url} with {status}"),
        Err(e) => anyhow::bail!(
            "the upstream file servers did not start: {e}\n{}",
            read_logs(&stage.layout, "upstream")
        ),
    }
}

/// php-fpm's workers for `web-php`: enough that the system under test, not PHP, is what a
/// request waits for.
const PHP_WORKERS: u32 = 8;

/// php-fpm for `web-php` on the load CPUs: one pool of static workers on the scenario's
/// socket, Debian's binary without a php.ini.
fn start_php_fpm(plan: &Plan, stage: &Stage) -> anyhow::Result<Running> {
    let binary = fs::read_dir("/usr/sbin")?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("php-fpm"))
        })
        .ok_or_else(|| anyhow::anyhow!("web-php needs php-fpm: apt-get install php-fpm"))?;
    let layout = &stage.layout;
    let socket = layout.php_socket();
    let _ = fs::remove_file(&socket);
    // SAFETY: geteuid(2) only reads the process's credentials.
    let user = if unsafe { libc::geteuid() } == 0 {
        "user = nobody\ngroup = nogroup\n"
    } else {
        ""
    };
    let logs = layout.logs();
    let conf = layout.dir.join("php-fpm.conf");
    fs::write(
        &conf,
        format!(
            "[global]\npid = {pid}\nerror_log = {log}\ndaemonize = no\n\
             [bench]\n{user}listen = {socket}\nlisten.mode = 0666\nlisten.backlog = 65535\n\
             pm = static\npm.max_children = {PHP_WORKERS}\n",
            pid = logs.join("php-fpm.pid").display(),
            log = logs.join("php-fpm.log").display(),
            socket = socket.display(),
        ),
    )?;
    let mut cmd = Command::new("taskset");
    cmd.arg("-c").arg(cpu_list(&plan.load_cpus));
    cmd.arg(binary).args(["-n", "-F", "-R", "-y"]).arg(&conf);
    let mut running = spawn(cmd, layout, "php-fpm")?;
    let deadline = Instant::now() + START_DEADLINE;
    while !socket.exists() {
        if running.exited() || Instant::now() > deadline {
            anyhow::bail!(
                "php-fpm did not start: {}",
                one_line(&fs::read_to_string(logs.join("php-fpm.log")).unwrap_or_default())
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(running)
}

fn nginx_args(cmd: &mut Command, layout: &Layout, conf: &Path, name: &str) {
    let mut prefix = layout.dir.display().to_string();
    prefix.push('/');
    cmd.arg("-p").arg(prefix).arg("-c").arg(conf);
    cmd.arg("-e")
        .arg(layout.logs().join(format!("{name}-error.log")));
    cmd.args(["-g", "daemon off;"]);
}

fn spawn(mut cmd: Command, layout: &Layout, name: &str) -> anyhow::Result<Running> {
    let out = fs::File::create(
        layout
            .logs()
            .join(format!("{}.out", name.replace(' ', "-"))),
    )?;
    let child = cmd
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .spawn()
        .map_err(|e| anyhow::anyhow!("cannot start {name}: {e}"))?;
    Ok(Running {
        child,
        name: name.to_owned(),
    })
}

/// Longest log excerpt a failure message quotes.
const MAX_EXCERPT: usize = 400;

/// The lines of a system's output and error log that say why it failed, on one line.
fn read_logs(layout: &Layout, name: &str) -> String {
    let mut text = String::new();
    for file in [format!("{name}.out"), format!("{name}-error.log")] {
        if let Ok(t) = fs::read_to_string(layout.logs().join(file)) {
            text.push_str(&t);
            text.push('\n');
        }
    }
    let excerpt = one_line(&text);
    format!("see {}: {excerpt}", layout.logs().display())
}

/// The serious lines of `text` (emerg, alert, error), else its last line, joined on one
/// line and cut at [`MAX_EXCERPT`].
fn one_line(text: &str) -> String {
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let serious: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| {
            let l = l.to_ascii_lowercase();
            l.contains("emerg") || l.contains("alert") || l.contains("error")
        })
        .collect();
    let chosen = if serious.is_empty() {
        lines.last().map(|l| vec![*l]).unwrap_or_default()
    } else {
        serious
    };
    let mut out = chosen.join(" | ");
    if out.len() > MAX_EXCERPT {
        let cut = (0..=MAX_EXCERPT)
            .rev()
            .find(|&i| out.is_char_boundary(i))
            .unwrap_or(0);
        out.truncate(cut);
        out.push_str("...");
    }
    out
}

/// Polls until the system answers `url` (with any status), exits, or the deadline passes.
fn wait_ready(
    running: &mut Running,
    url: &str,
    token: Option<&str>,
    host: Option<&str>,
) -> Result<(u16, usize), String> {
    let deadline = Instant::now() + START_DEADLINE;
    loop {
        if running.exited() {
            return Err(format!("{} exited during startup", running.name));
        }
        match probe(url, token, host) {
            Ok(answer) => return Ok(answer),
            Err(e) if Instant::now() >= deadline => return Err(e),
            Err(_) => thread::sleep(POLL_INTERVAL),
        }
    }
}

/// The command that checks a system's config, and the one that runs it.
/// `conf` is the file written from `text`; the floor takes `text` as its arguments.
fn commands(
    plan: &Plan,
    stage: &Stage,
    system: &System,
    conf: &Path,
    text: &str,
) -> (Command, Command) {
    let mut check = Command::new(&system.binary);
    let mut run = Command::new("taskset");
    run.arg("-c")
        .arg(cpu_list(&plan.sut_cpus))
        .arg(&system.binary);
    match system.kind {
        Kind::Haproxy => {
            check.arg("-c").arg("-f").arg(conf);
            run.arg("-f").arg(conf).arg("-db");
        }
        Kind::Floor => {
            check.arg("floor").args(text.lines()).arg("--check");
            run.arg("floor").args(text.lines());
        }
        Kind::Nginx | Kind::Portcullis => {
            nginx_args(&mut check, &stage.layout, conf, system.kind.name());
            check.arg("-t");
            nginx_args(&mut run, &stage.layout, conf, system.kind.name());
        }
    }
    (check, run)
}

/// Measures one system with `workers` workers: a failed start is a record with a failure.
fn measure(plan: &Plan, stage: &Stage, system: &System, workers: u32, round: u32) -> RunRecord {
    let mut record = RunRecord::new(stage.scenario.name, system.kind.name(), workers);
    if let Err(failure) = measure_into(plan, stage, system, workers, round, &mut record) {
        record.failure = Some(failure);
    }
    record
}

fn measure_into(
    plan: &Plan,
    stage: &Stage,
    system: &System,
    workers: u32,
    round: u32,
    record: &mut RunRecord,
) -> Result<(), String> {
    let layout = &stage.layout;
    let name = system.kind.name();
    let na = crate::run::NOT_APPLICABLE;
    if system.kind == Kind::Nginx && stage.scenario.checked_jwt().is_some() {
        return Err(format!(
            "{na}auth_jwt is NGINX Plus's, not in open source nginx"
        ));
    }
    let (conf, text) = match system.kind {
        Kind::Haproxy => (
            layout.dir.join("haproxy.cfg"),
            stage
                .scenario
                .haproxy_cfg(layout, workers, &stage.secret)
                .ok_or_else(|| {
                    format!("{na}HAProxy has no equivalent (it serves no files, and its cache is of another kind)")
                })?,
        ),
        Kind::Floor => (
            layout.dir.join("floor.args"),
            stage
                .scenario
                .floor_args(layout, workers)
                .ok_or_else(|| {
                    format!("{na}the L4 floor passes requests unchanged: it stands in only for a proxy that does nothing else")
                })?,
        ),
        Kind::Nginx => (
            layout.dir.join("nginx.conf"),
            stage.scenario.nginx_conf(layout, workers),
        ),
        Kind::Portcullis => (
            layout.dir.join("nginx.conf"),
            match stage.scenario.portcullis_conf(layout, workers) {
                Ok(Some(own)) => own,
                Ok(None) => stage.scenario.nginx_conf(layout, workers),
                Err(e) => return Err(format!("{e:#}")),
            },
        ),
    };
    fs::write(&conf, &text).map_err(|e| format!("{}: {e}", conf.display()))?;
    let (mut check, run) = commands(plan, stage, system, &conf, &text);
    let checked = check
        .output()
        .map_err(|e| format!("cannot run {}: {e}", system.binary.display()))?;
    if !checked.status.success() {
        let mut output = String::from_utf8_lossy(&checked.stderr).into_owned();
        output.push_str(&String::from_utf8_lossy(&checked.stdout));
        return Err(format!("config test failed: {}", one_line(&output)));
    }
    let mut running = spawn(run, layout, name).map_err(|e| e.to_string())?;
    let url = stage.url();
    match wait_ready(
        &mut running,
        &url,
        stage.token.as_deref(),
        stage.scenario.host(),
    ) {
        Ok((200, len)) if len == stage.scenario.body_len() => {}
        Ok((status, len)) => note(&format!(
            "  {name} answered {url} with {status} and {len} bytes; measuring anyway, \
             the errors will show"
        )),
        Err(e) => return Err(format!("{e}: {}", read_logs(layout, name))),
    }
    if !plan.warmup.is_zero() {
        let out = layout
            .logs()
            .join(format!("{name}-w{workers}-r{round}.warmup"));
        run_wrk(plan, stage, plan.warmup, &out)?;
    }
    let out = layout
        .logs()
        .join(format!("{name}-w{workers}-r{round}.wrk"));
    let before = procfs::cpu_ticks(running.pid());
    let report = run_wrk(plan, stage, plan.duration, &out)?;
    let after = procfs::cpu_ticks(running.pid());
    if running.exited() {
        return Err(format!(
            "{name} exited during the run: {}",
            read_logs(layout, name)
        ));
    }
    record.duration_s = report.duration_s;
    record.requests = report.requests;
    record.errors = report.errors();
    let spent = after.since(before);
    record.cpu_s = spent.total() as f64 / clock_ticks_per_second();
    record.cpu_system_s = Some(spent.system as f64 / clock_ticks_per_second());
    record.requests_per_s = Some(report.requests_per_s);
    record.transfer_per_s = Some(report.transfer_per_s);
    record.latency_p50_ms = Some(report.latency_ms.p50);
    record.latency_p90_ms = Some(report.latency_ms.p90);
    record.latency_p99_ms = Some(report.latency_ms.p99);
    record.latency_max_ms = Some(report.latency_ms.max);
    record.non_2xx = Some(report.non_2xx);
    record.socket_errors = Some(report.socket_errors);
    if plan.syscalls && round == 1 {
        match count_syscalls(plan, stage, &running, &format!("{name}-w{workers}")) {
            Ok(per_request) => record.syscalls_per_request = Some(per_request),
            Err(e) => note(&format!("  {name}: no syscall count: {e}")),
        }
    }
    running.stop();
    Ok(())
}

fn clock_ticks_per_second() -> f64 {
    // SAFETY: sysconf reads a constant of the system and touches no memory of ours.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 {
        ticks as f64
    } else {
        // Linux's USER_HZ on every architecture it runs on.
        100.0
    }
}

/// Runs wrk pinned to the load CPUs for `duration` and parses its report.
fn run_wrk(
    plan: &Plan,
    stage: &Stage,
    duration: Duration,
    out: &Path,
) -> Result<wrk::WrkReport, String> {
    let mut cmd = Command::new("taskset");
    cmd.arg("-c").arg(cpu_list(&plan.load_cpus)).arg(&plan.wrk);
    cmd.arg(format!("-t{}", plan.threads))
        .arg(format!("-c{}", plan.connections))
        .arg(format!("-d{}s", duration.as_secs().max(1)))
        .arg("--latency");
    if stage.scenario.close {
        cmd.args(["-H", "Connection: close"]);
    }
    if stage.scenario.gzip.is_some() {
        cmd.args(["-H", "Accept-Encoding: gzip"]);
    }
    if let Some(host) = stage.scenario.host() {
        cmd.args(["-H", &format!("Host: {host}")]);
    }
    if let Some(script) = &stage.script {
        cmd.arg("-s").arg(script);
    }
    cmd.arg(stage.url());
    let output = cmd.output().map_err(|e| format!("cannot run wrk: {e}"))?;
    let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&output.stderr));
    let _ = fs::write(out, &text);
    wrk::parse(&text).map_err(|e| e.to_string())
}

/// Syscalls per request of the whole system, counted by strace in a separate short run.
fn count_syscalls(
    plan: &Plan,
    stage: &Stage,
    running: &Running,
    label: &str,
) -> Result<f64, String> {
    let logs = stage.layout.logs();
    let summary = logs.join(format!("{label}.strace"));
    let mut cmd = Command::new("strace");
    cmd.arg("-c").arg("-f").arg("-o").arg(&summary);
    for pid in procfs::tree(running.pid()) {
        cmd.arg("-p").arg(pid.to_string());
    }
    let err =
        fs::File::create(logs.join(format!("{label}.strace.err"))).map_err(|e| e.to_string())?;
    let mut strace = Running {
        child: cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .map_err(|e| format!("cannot run strace: {e}"))?,
        name: "strace".to_owned(),
    };
    thread::sleep(STRACE_ATTACH);
    let report = run_wrk(
        plan,
        stage,
        SYSCALL_RUN,
        &logs.join(format!("{label}.wrk-syscalls")),
    );
    signal(strace.pid(), libc::SIGINT);
    let deadline = Instant::now() + STOP_DEADLINE;
    while !strace.exited() && Instant::now() < deadline {
        thread::sleep(POLL_INTERVAL);
    }
    drop(strace);
    let report = report?;
    let text = fs::read_to_string(&summary).map_err(|e| format!("{}: {e}", summary.display()))?;
    let calls = strace_total(&text).ok_or("strace wrote no summary (is ptrace allowed?)")?;
    if report.requests == 0 {
        return Err("no requests completed under strace".to_owned());
    }
    Ok(calls as f64 / report.requests as f64)
}

/// The call count of the `total` line of `strace -c`: `100.00 0.5 2 200000 12 total`.
fn strace_total(text: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.last() == Some(&"total") {
            words.get(3)?.parse().ok()
        } else {
            None
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strace_summary_total() {
        let text = "% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 60.00    0.300000           3    100000           writev
 40.00    0.200000           2    100000      5000 read
------ ----------- ----------- --------- --------- ----------------
100.00    0.500000           2    200000      5000 total
";
        assert_eq!(strace_total(text), Some(200_000));
        assert_eq!(strace_total("nothing"), None);
    }

    #[test]
    fn failures_fit_on_one_line() {
        let log = "[NOTICE] version 2.6\n[ALERT] cannot bind\n\n[ALERT] no FD\n";
        assert_eq!(one_line(log), "[ALERT] cannot bind | [ALERT] no FD");
        assert_eq!(one_line("a\nlast words\n"), "last words");
        assert_eq!(one_line(""), "");
        let long = format!("error {}", "é".repeat(MAX_EXCERPT));
        assert!(one_line(&long).ends_with("..."));
        assert!(one_line(&long).len() <= MAX_EXCERPT + 3);
    }

    #[test]
    fn kinds_and_cpus() {
        assert_eq!(Kind::parse("haproxy"), Some(Kind::Haproxy));
        assert_eq!(Kind::parse("l4-floor"), Some(Kind::Floor));
        assert_eq!(Kind::parse("apache"), None);
        assert_eq!(cpu_list(&[1, 3]), "1,3");
        let [a, b] = free_ports::<2>().unwrap();
        assert_ne!(a, b);
    }
}
