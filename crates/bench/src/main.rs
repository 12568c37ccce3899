//! `portcullis-bench`: the seeds' sizing method as a command.
//!
//! `portcullis-bench size` prints the seeds' price tables from measured maximum RPS per
//! instance type (`--measured`) or from a worker sweep (`--from-run`), priced from an
//! instance catalog (`--catalog`, by default every instance type priced in the seeds).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::bail;
use clap::{Args, Parser, Subcommand};

use portcullis_bench::data::{self, Priced};
use portcullis_bench::model::Instance;
use portcullis_bench::size::{self, Options, SEED_TARGETS};
use portcullis_bench::{run, Format, Policy, SEEDS_CATALOG};

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
            (title, estimate(&sweep, &catalog))
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
    Ok(size::report(title, notes, &instances, &options).render(args.format))
}

/// Every catalog instance, its max RPS estimated from the sweep.
fn estimate(sweep: &run::Sweep, catalog: &[Priced]) -> Vec<Instance> {
    catalog
        .iter()
        .map(|p| Instance {
            name: p.instance.clone(),
            vcpus: p.vcpus,
            max_rps: sweep.max_rps(p.vcpus),
            usd_per_hour: p.usd_per_hour,
        })
        .collect()
}

fn name(path: &Path) -> String {
    path.display().to_string()
}
