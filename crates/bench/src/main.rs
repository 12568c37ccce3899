//! `portcullis-bench`: the seeds' sizing method as a command.
//!
//! `portcullis-bench size` prints the seeds' price tables from measured maximum RPS per
//! instance type (`--measured`) or from a worker sweep (`--from-run`), priced from an
//! instance catalog (`--catalog`, by default every instance type priced in the seeds).
//!
//! `portcullis-bench run` measures portcullis, nginx and HAProxy on the seeds' scenarios
//! with wrk, CPU per request from /proc, and writes JSON lines (which `size --from-run`
//! reads), CSV and an HTML report.

use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::bail;
use clap::{Args, Parser, Subcommand};

use portcullis_bench::data::{self, Priced};
use portcullis_bench::model::Instance;
use portcullis_bench::rig::{self, Kind, Plan, System};
use portcullis_bench::size::{self, Options, SEED_TARGETS};
use portcullis_bench::{floor, results, run, scenario, Format, Policy, RunRecord, SEEDS_CATALOG};

/// How errors and reports name the built-in catalog.
const SEEDS_CATALOG_NAME: &str = "catalog-seeds.csv (built in)";

#[derive(Parser)]
#[command(
    name = "portcullis-bench",
    version,
    about = "Benchmarks and sizing for portcullis and nginx"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Price tables: the cheapest fleet per instance family for each target load.
    Size(SizeArgs),
    /// Measure the systems on the seeds' scenarios: RPS, latency, CPU per request.
    Run(RunArgs),
    /// Make a run's report.html again from its results.jsonl.
    Report(ReportArgs),
    /// The L4 floor of the proxy scenarios: copies bytes between each client and an
    /// upstream connection of its own, parsing nothing (what `run` measures as `l4-floor`).
    Floor(FloorArgs),
}

#[derive(Args)]
struct FloorArgs {
    /// Address to listen on.
    #[arg(long, value_name = "ADDR")]
    listen: std::net::SocketAddr,
    /// Upstream address, once per upstream; clients are spread round robin.
    #[arg(long = "upstream", value_name = "ADDR", required = true)]
    upstreams: Vec<std::net::SocketAddr>,
    /// Certificate for TLS towards clients (with --key and --cipher).
    #[arg(long, value_name = "FILE", requires_all = ["key", "cipher"])]
    cert: Option<PathBuf>,
    /// The certificate's key.
    #[arg(long, value_name = "FILE", requires = "cert")]
    key: Option<PathBuf>,
    /// The TLS 1.2 cipher towards clients, an OpenSSL name.
    #[arg(long, requires = "cert")]
    cipher: Option<String>,
    /// TLS towards the upstreams, with nginx's proxy_ssl defaults.
    #[arg(long)]
    upstream_tls: bool,
    /// Worker threads, each with its own listener.
    #[arg(long, default_value_t = 1)]
    workers: usize,
    /// Check the settings and exit, as `nginx -t` does.
    #[arg(long)]
    check: bool,
}

#[derive(Args)]
struct ReportArgs {
    /// The run's records (results.jsonl).
    #[arg(value_name = "RESULTS")]
    from_run: PathBuf,
    /// Instance catalog (CSV as for `size`): adds requests/s per dollar and the price per
    /// target.
    #[arg(long, value_name = "FILE")]
    catalog: Option<PathBuf>,
    /// Where the report goes.
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
    /// The method paragraph at the top (the run's own, which `run` wrote there).
    #[arg(long, value_name = "TEXT")]
    method: Option<String>,
}

#[derive(Args)]
struct RunArgs {
    /// Scenarios, comma-separated, or `all`; `--scenarios list` prints them.
    #[arg(long, value_delimiter = ',', default_value = "all")]
    scenarios: Vec<String>,
    /// Systems under test, comma-separated: portcullis, nginx, haproxy, l4-floor (a proxy
    /// that parses nothing, see `floor`); one not found is skipped with a message.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "portcullis,nginx,haproxy"
    )]
    systems: Vec<String>,
    /// portcullis binary [default: portcullis on PATH].
    #[arg(long, value_name = "PATH")]
    portcullis: Option<PathBuf>,
    /// nginx binary, also the upstream file servers' [default: nginx on PATH or /usr/sbin].
    #[arg(long, value_name = "PATH")]
    nginx: Option<PathBuf>,
    /// HAProxy binary [default: haproxy on PATH or /usr/sbin].
    #[arg(long, value_name = "PATH")]
    haproxy: Option<PathBuf>,
    /// wrk binary [default: wrk on PATH].
    #[arg(long, value_name = "PATH")]
    wrk: Option<PathBuf>,
    /// wrk threads [default: one per load CPU].
    #[arg(long)]
    threads: Option<u32>,
    /// wrk connections.
    #[arg(long, default_value_t = 50)]
    connections: u32,
    /// Distinct tokens wrk cycles through in the scenarios that send a different token with
    /// every request; above portcullis's verified-token cache (1024 per worker) times the
    /// workers, so that the cache cannot answer.
    #[arg(long, default_value_t = 4096)]
    jwt_tokens: usize,
    /// Length of each measured run (`10s`, `1m`).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    duration: Duration,
    /// Warm-up before each measured run, not counted (`0` for none).
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    warmup: Duration,
    /// Measured runs of each system, scenario and worker count; medians are reported.
    #[arg(long, default_value_t = 3)]
    repeats: u32,
    /// CPUs of the system under test (`1`, `2,3`, `4-7`); wrk and the upstream servers get
    /// the others [default: the upper half of the online CPUs].
    #[arg(long, value_name = "LIST")]
    cpus: Option<String>,
    /// Worker processes (or threads) of the system under test: a sweep, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1")]
    workers: Vec<u32>,
    /// Also count syscalls per request with strace, in a separate short run.
    #[arg(long)]
    syscalls: bool,
    /// Directory for results.jsonl, results.csv, report.html and the work files.
    #[arg(long, value_name = "DIR", default_value = "bench-results")]
    out: PathBuf,
    /// Instance catalog (CSV as for `size`): adds requests/s per dollar to the report.
    #[arg(long, value_name = "FILE")]
    catalog: Option<PathBuf>,
}

#[derive(Args)]
#[command(group = clap::ArgGroup::new("input").required(true).args(["measured", "from_run"]))]
struct SizeArgs {
    /// Measured maximum RPS per instance type: CSV `instance,vcpus,max_rps`.
    #[arg(long, value_name = "FILE")]
    measured: Option<PathBuf>,
    /// Run records (JSON lines) of a worker sweep; every catalog instance is estimated.
    #[arg(long, value_name = "FILE")]
    from_run: Option<PathBuf>,
    /// Instance catalog: CSV `instance,vcpus,usd,per,source` [default: the seeds' prices].
    #[arg(long, value_name = "FILE")]
    catalog: Option<PathBuf>,
    /// Nodes in the fleet.
    #[arg(long, default_value_t = 3)]
    nodes: u32,
    /// Nodes that may fail while the rest still serve the target (N+k).
    #[arg(long, default_value_t = 1)]
    failures: u32,
    /// Highest utilization of a node in normal operation, as a fraction of its max RPS.
    #[arg(long, default_value_t = 0.66)]
    cap: f64,
    /// Target total RPS, comma-separated [default: the seeds' rows].
    #[arg(long, value_delimiter = ',', value_name = "RPS")]
    targets: Vec<u64>,
    /// Only these instance families, comma-separated.
    #[arg(long, value_delimiter = ',', value_name = "FAMILY")]
    families: Vec<String>,
    /// With --from-run: the system under test to size.
    #[arg(long, requires = "from_run")]
    system: Option<String>,
    /// With --from-run: the scenario to size.
    #[arg(long, requires = "from_run")]
    scenario: Option<String>,
    /// With --from-run: the scenario of one request per TLS connection whose rate is each
    /// instance's SSL TPS (seed 003's column), estimated as the RPS are
    #[arg(long, requires = "from_run")]
    tps_scenario: Option<String>,
    /// Add monthly prices (730 h) and max RPS per $/hour.
    #[arg(long)]
    tco: bool,
    /// Also search node count and size per family for the cheapest fleet.
    #[arg(long)]
    optimize: bool,
    /// Output format; html is one self-contained page.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Size(args) => size(args),
        Command::Run(args) => run_command(args),
        Command::Report(args) => report_command(args),
        Command::Floor(args) => floor_command(args),
    };
    match result {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("portcullis-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn floor_command(args: FloorArgs) -> anyhow::Result<String> {
    let floor = floor::Floor {
        listen: args.listen,
        upstreams: args.upstreams,
        server_tls: match (args.cert, args.key, args.cipher) {
            (Some(cert), Some(key), Some(cipher)) => Some((cert, key, cipher)),
            _ => None,
        },
        upstream_tls: args.upstream_tls,
        workers: args.workers,
    };
    if args.check {
        floor::check(&floor)?;
        return Ok("the floor's settings are good\n".to_owned());
    }
    floor::run(&floor)?;
    Ok(String::new())
}

fn size(args: SizeArgs) -> anyhow::Result<String> {
    let policy = Policy::new(args.nodes, args.failures, args.cap)?;
    if args.targets.contains(&0) {
        bail!("--targets must be above 0");
    }
    let targets = if args.targets.is_empty() {
        SEED_TARGETS.to_vec()
    } else {
        args.targets.iter().map(|&t| t as f64).collect()
    };
    // Families are chosen before instances are priced, so that a family left out needs
    // no price in the catalog.
    let families: Vec<String> = args
        .families
        .iter()
        .map(|f| f.to_ascii_lowercase())
        .collect();
    let wanted = |instance: &str| {
        families.is_empty() || families.iter().any(|f| f == data::family(instance))
    };
    let catalog_name = args
        .catalog
        .as_deref()
        .map_or_else(|| SEEDS_CATALOG_NAME.to_owned(), name);
    let catalog_text = match &args.catalog {
        Some(path) => data::read(path)?,
        None => SEEDS_CATALOG.to_owned(),
    };
    let mut catalog = data::parse_catalog(&catalog_text, &catalog_name)?;
    catalog.retain(|p| wanted(&p.instance));
    let mut notes = vec![format!("Prices from {catalog_name}.")];
    let (title, instances) = match (&args.measured, &args.from_run) {
        (Some(path), _) => {
            let mut measured = data::parse_measured(&data::read(path)?, &name(path))?;
            measured.retain(|m| wanted(&m.instance));
            let title = format!("Sizing from {}", name(path));
            (title, size::join(&measured, &name(path), &catalog)?)
        }
        (None, Some(path)) => {
            let records = run::parse(&data::read(path)?, &name(path))?;
            let sweep = run::Sweep::from_records(
                &records,
                args.system.as_deref(),
                args.scenario.as_deref(),
            )?;
            notes.push(sweep.assumption());
            let title = format!(
                "Sizing from {} ({} {})",
                name(path),
                sweep.system,
                sweep.scenario
            );
            let (mut instances, said) = estimate(&sweep, &catalog, run::architecture(&records));
            notes.extend(said);
            if let Some(tps) = &args.tps_scenario {
                let handshakes =
                    run::Sweep::from_records(&records, args.system.as_deref(), Some(tps))?;
                notes.push(format!("SSL TPS: {}", handshakes.assumption()));
                for i in &mut instances {
                    i.ssl_tps = Some(handshakes.max_rps(i.vcpus));
                }
            }
            (title, instances)
        }
        (None, None) => bail!("one of --measured or --from-run is required"),
    };
    if instances.is_empty() {
        bail!(
            "no instance of families {} in the input",
            args.families.join(",")
        );
    }
    let options = Options {
        policy,
        targets,
        tco: args.tco,
        optimize: args.optimize,
    };
    let mut report = size::report(title, notes, &instances, &options);
    // A seed's own per-instance table: the cells of its price table that its rule does not
    // give are named under the table made from it.
    let seed_file = args
        .measured
        .as_deref()
        .and_then(Path::file_name)
        .and_then(|f| f.to_str());
    if let (Some(file), true) = (seed_file, options.policy == Policy::SEEDS) {
        let families = portcullis_bench::model::families(&instances);
        let footnotes = size::seed_footnotes(file, &options.targets, &families);
        if let Some(table) = report.tables.first_mut() {
            table.footnotes = footnotes;
        }
    }
    Ok(report.render(args.format))
}

/// The catalog's instances of the architecture the sweep ran on (`arch`, this machine's),
/// their max RPS estimated from it, and the notes that say what was left out and which
/// estimates lie past what the sweep measured.
fn estimate(sweep: &run::Sweep, catalog: &[Priced], arch: &str) -> (Vec<Instance>, Vec<String>) {
    let (kept, families) = run::of_architecture(catalog, arch);
    let mut notes = Vec::new();
    if !families.is_empty() {
        let arm = matches!(arch, "aarch64" | "arm");
        notes.push(format!(
            "Left out: {} ({}), whose CPUs are of another architecture than the {arch} cores \
             the run measured.",
            families.join(", "),
            if arm { "x86" } else { "Arm" },
        ));
    }
    let past: Vec<&str> = kept
        .iter()
        .filter(|p| p.vcpus > sweep.top())
        .map(|p| p.instance.as_str())
        .collect();
    if !past.is_empty() {
        notes.push(format!(
            "WARNING: extrapolated past the sweep's {} workers (see above): {}.",
            sweep.top(),
            past.join(", ")
        ));
    }
    let instances = kept
        .iter()
        .map(|p| Instance {
            name: p.instance.clone(),
            vcpus: p.vcpus,
            max_rps: sweep.max_rps(p.vcpus),
            ssl_tps: None,
            usd_per_hour: p.usd_per_hour,
        })
        .collect();
    (instances, notes)
}

/// Limits of the run options: beyond them a run is a mistake rather than a benchmark.
const MAX_WORKERS: u32 = 1024;
const MAX_REPEATS: u32 = 100;
/// Most tokens `--jwt-tokens` may ask for: each wrk thread holds its share as formatted
/// requests of about a kilobyte.
const MAX_JWT_TOKENS: usize = 1 << 16;
/// Verified tokens portcullis caches per worker when `auth_jwt_verified_cache` does not
/// say, which the generated configs do not.
const PORTCULLIS_VERIFIED_CACHE: usize = 1024;

fn report_command(args: ReportArgs) -> anyhow::Result<String> {
    let records = run::parse(&data::read(&args.from_run)?, &name(&args.from_run))?;
    let catalog = match &args.catalog {
        Some(path) => Some(data::parse_catalog(&data::read(path)?, &name(path))?),
        None => None,
    };
    let method = args.method.clone().unwrap_or_else(|| {
        format!(
            "Made from {} by portcullis-bench report; the run's command and machine are in \
             the README beside it.",
            name(&args.from_run)
        )
    });
    fs::write(
        &args.out,
        results::html(&records, catalog.as_deref(), &method),
    )?;
    Ok(format!("{}\n", args.out.display()))
}

fn run_command(args: RunArgs) -> anyhow::Result<String> {
    if args.scenarios.iter().any(|s| s == "list") {
        let mut out = String::new();
        for s in scenario::SCENARIOS {
            out.push_str(&format!("{:<22} {}\n", s.name, s.about));
        }
        return Ok(out);
    }
    let scenarios = if args.scenarios.iter().any(|s| s == "all") {
        scenario::SCENARIOS.iter().collect()
    } else {
        args.scenarios
            .iter()
            .map(|name| {
                scenario::find(name).ok_or_else(|| {
                    anyhow::anyhow!("unknown scenario {name:?} (--scenarios list shows them)")
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()?
    };
    if args.workers.iter().any(|&w| w == 0 || w > MAX_WORKERS) {
        bail!("--workers must be between 1 and {MAX_WORKERS}");
    }
    if args.repeats == 0 || args.repeats > MAX_REPEATS {
        bail!("--repeats must be between 1 and {MAX_REPEATS}");
    }
    if args.duration.is_zero() {
        bail!("--duration must be at least 1s");
    }
    let online = online_cpus();
    let sut_cpus = match &args.cpus {
        Some(list) => parse_cpus(list)?,
        None => online[online.len() / 2..].to_vec(),
    };
    if let Some(cpu) = sut_cpus.iter().find(|c| !online.contains(c)) {
        bail!(
            "--cpus: CPU {cpu} is not online (online: {})",
            rig::cpu_list(&online)
        );
    }
    let load_cpus: Vec<usize> = online
        .iter()
        .copied()
        .filter(|c| !sut_cpus.contains(c))
        .collect();
    if load_cpus.is_empty() || sut_cpus.is_empty() {
        bail!(
            "the method needs CPUs for the system under test and others for the load; \
             online: {}, --cpus {}",
            rig::cpu_list(&online),
            rig::cpu_list(&sut_cpus)
        );
    }
    let threads = args.threads.unwrap_or(load_cpus.len() as u32).max(1);
    if args.connections < threads {
        bail!(
            "--connections ({}) must be at least --threads ({threads})",
            args.connections
        );
    }
    let distinct_tokens = scenarios
        .iter()
        .any(|s: &&scenario::Scenario| s.distinct_tokens);
    if distinct_tokens {
        if args.jwt_tokens < threads as usize || args.jwt_tokens > MAX_JWT_TOKENS {
            bail!("--jwt-tokens must be between --threads ({threads}) and {MAX_JWT_TOKENS}");
        }
        let most_workers = args.workers.iter().copied().max().unwrap_or(1) as usize;
        if args.jwt_tokens <= PORTCULLIS_VERIFIED_CACHE * most_workers {
            eprintln!(
                "portcullis-bench: warning: with {most_workers} workers, each sees about {} \
                 of the {} tokens before one comes back, which its verified-token cache of \
                 {PORTCULLIS_VERIFIED_CACHE} may still hold; raise --jwt-tokens",
                args.jwt_tokens / most_workers,
                args.jwt_tokens
            );
        }
    }
    let wrk = args
        .wrk
        .clone()
        .or_else(|| find_binary("wrk"))
        .ok_or_else(|| {
            anyhow::anyhow!("wrk not found; install it (apt-get install wrk) or give --wrk")
        })?;
    let nginx = args.nginx.clone().or_else(|| find_binary("nginx"));
    let mut systems = Vec::new();
    for name in &args.systems {
        let kind = Kind::parse(name).ok_or_else(|| {
            anyhow::anyhow!("unknown system {name:?} (portcullis, nginx, haproxy or l4-floor)")
        })?;
        let binary = match kind {
            Kind::Portcullis => args
                .portcullis
                .clone()
                .or_else(|| find_binary("portcullis")),
            Kind::Nginx => nginx.clone(),
            Kind::Haproxy => args.haproxy.clone().or_else(|| find_binary("haproxy")),
            Kind::Floor => std::env::current_exe().ok(),
        };
        match binary {
            Some(binary) if binary.is_file() => systems.push(System { kind, binary }),
            _ => eprintln!("portcullis-bench: {name} not found (give --{name} PATH); skipping it"),
        }
    }
    if systems.is_empty() {
        bail!("no system under test found");
    }
    let needs_upstreams = scenarios
        .iter()
        .any(|s: &&scenario::Scenario| s.needs_upstreams());
    let upstream_nginx = match nginx {
        Some(path) => path,
        None if needs_upstreams => {
            bail!("the upstream file servers are nginx, which was not found (give --nginx)")
        }
        None => PathBuf::from("nginx"),
    };
    let catalog = match &args.catalog {
        Some(path) => Some(data::parse_catalog(&data::read(path)?, &name(path))?),
        None => None,
    };
    fs::create_dir_all(&args.out)?;
    let out = fs::canonicalize(&args.out)?;
    let plan = Plan {
        scenarios,
        systems,
        workers: args.workers.clone(),
        threads,
        connections: args.connections,
        jwt_tokens: args.jwt_tokens,
        duration: args.duration,
        warmup: args.warmup,
        repeats: args.repeats,
        sut_cpus,
        load_cpus,
        syscalls: args.syscalls,
        out: out.clone(),
        upstream_nginx,
        wrk,
        machine: machine(),
    };
    let method =
        format!(
        "System under test pinned to CPUs {}, wrk ({} threads, {} connections) and the upstream \
         file servers to CPUs {}; {}s warm-up, then {}s measured, {} repeats; CPU per request is \
         utime+stime of the system's processes over the requests wrk completed.{}",
        rig::cpu_list(&plan.sut_cpus),
        plan.threads,
        plan.connections,
        rig::cpu_list(&plan.load_cpus),
        plan.warmup.as_secs(),
        plan.duration.as_secs(),
        plan.repeats,
        plan.machine.as_deref().map(|m| format!(" CPU: {m}.")).unwrap_or_default()
    );
    let jsonl_path = out.join("results.jsonl");
    let mut jsonl = fs::File::create(&jsonl_path)?;
    let mut records: Vec<RunRecord> = Vec::new();
    let mut write_error = None;
    rig::run(&plan, |record| {
        let line = serde_json::to_string(record).map_err(std::io::Error::from);
        if let Err(e) = line.and_then(|l| writeln!(jsonl, "{l}")) {
            write_error.get_or_insert(e);
        }
        records.push(record.clone());
    })?;
    if let Some(e) = write_error {
        bail!("{}: {e}", jsonl_path.display());
    }
    fs::write(out.join("results.csv"), results::csv(&records))?;
    fs::write(
        out.join("report.html"),
        results::html(&records, catalog.as_deref(), &method),
    )?;
    let summaries = results::summarize(&records);
    Ok(format!(
        "{}\nResults in {}: results.jsonl, results.csv, report.html\n",
        results::text_table(&summaries),
        out.display()
    ))
}

/// `10`, `10s`, `2m`, `1h` as a duration.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let (number, scale) = match text.char_indices().last() {
        Some((i, 's')) => (&text[..i], 1),
        Some((i, 'm')) => (&text[..i], 60),
        Some((i, 'h')) => (&text[..i], 3600),
        _ => (text, 1),
    };
    let value: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration like 10s, 2m or 1h"))?;
    Ok(Duration::from_secs(value.saturating_mul(scale)))
}

/// `1`, `2,3`, `4-7` as CPU numbers.
fn parse_cpus(text: &str) -> anyhow::Result<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let bad = || anyhow::anyhow!("--cpus: {part:?} is not a CPU number or range");
        match part.split_once('-') {
            Some((low, high)) => {
                let (low, high): (usize, usize) = (
                    low.parse().map_err(|_| bad())?,
                    high.parse().map_err(|_| bad())?,
                );
                if low > high {
                    return Err(bad());
                }
                cpus.extend(low..=high);
            }
            None => cpus.push(part.parse().map_err(|_| bad())?),
        }
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// The online CPUs, from sysfs; all of `available_parallelism` when it cannot be read.
fn online_cpus() -> Vec<usize> {
    fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|t| parse_cpus(t.trim()).ok())
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| {
            let n = std::thread::available_parallelism().map_or(1, |n| n.get());
            (0..n).collect()
        })
}

/// The CPU model, as /proc/cpuinfo names it.
fn machine() -> Option<String> {
    let info = fs::read_to_string("/proc/cpuinfo").ok()?;
    info.lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_owned())
}

/// `name` on PATH, else in /usr/sbin (where Debian installs nginx and HAProxy).
fn find_binary(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin")])
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

fn name(path: &Path) -> String {
    path.display().to_string()
}
