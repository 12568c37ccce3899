//! The measurement record `portcullis-bench run` writes, one JSON object a line, and the
//! estimate `size --from-run` makes from it.
//!
//! A record is one timed load run of one system under test with a given number of worker
//! processes or threads: how many requests the load generator completed, and how much CPU
//! time (user + system, every process and thread of the system) they cost. Several records
//! with different worker counts are a worker sweep.
//!
//! The estimate assumes the server is CPU-bound: an instance with `v` vCPUs serves
//! `v / (CPU seconds per request)` requests per second, where the CPU per request is the
//! sweep's, interpolated at `v` workers between measured counts and held at the nearest
//! measured count outside them. Contention that grows the CPU cost per request with more
//! workers is thus carried over as measured, and nothing beyond the sweep is invented.

use serde::{Deserialize, Serialize};

use crate::data::DataError;

/// One timed run, as a line of JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunRecord {
    /// What was served, as the bench names it (`static-1k`, `reverse-proxy`, ...).
    pub scenario: String,
    /// The system under test (`portcullis`, `nginx`).
    pub system: String,
    /// Worker processes or threads of the system under test.
    pub workers: u32,
    /// Length of the timed run, seconds.
    pub duration_s: f64,
    /// Requests the load generator completed in the run.
    pub requests: u64,
    /// Non-2xx/3xx answers and socket errors in the run.
    #[serde(default)]
    pub errors: u64,
    /// CPU seconds (utime + stime) the system under test spent in the run.
    pub cpu_s: f64,
    /// Of `cpu_s`, the seconds spent in the kernel (stime + cstime).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_system_s: Option<f64>,
    /// The CPU the run was measured on, as /proc/cpuinfo names it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<String>,
    /// Which repetition of the measurement this is, from 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub round: Option<u32>,
    /// CPUs the system under test was pinned to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<u32>,
    /// Requests per second as the load generator measured them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_s: Option<f64>,
    /// Bytes read per second by the load generator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transfer_per_s: Option<f64>,
    /// Latency percentiles and maximum, milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_p50_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_p90_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_p99_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_max_ms: Option<f64>,
    /// Answers that were not 2xx/3xx (part of `errors`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub non_2xx: Option<u64>,
    /// Connect, read, write and timeout errors (part of `errors`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket_errors: Option<u64>,
    /// System calls per request, from a separate run under strace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub syscalls_per_request: Option<f64>,
    /// Why the system could not be measured at all (bad config, no answer); such a record
    /// has no requests and is kept so that reports show the failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
}

impl RunRecord {
    /// CPU seconds one request cost.
    pub fn cpu_per_request(&self) -> f64 {
        self.cpu_s / self.requests as f64
    }

    /// Whether the run's figures count: it completed requests and every one succeeded.
    pub fn succeeded(&self) -> bool {
        self.failure.is_none() && self.errors == 0 && self.requests > 0
    }

    /// A record with the run's identity and nothing measured yet.
    pub fn new(scenario: &str, system: &str, workers: u32) -> RunRecord {
        RunRecord {
            scenario: scenario.to_owned(),
            system: system.to_owned(),
            workers,
            duration_s: 0.0,
            requests: 0,
            errors: 0,
            cpu_s: 0.0,
            cpu_system_s: None,
            machine: None,
            round: None,
            cpus: None,
            requests_per_s: None,
            transfer_per_s: None,
            latency_p50_ms: None,
            latency_p90_ms: None,
            latency_p99_ms: None,
            latency_max_ms: None,
            non_2xx: None,
            socket_errors: None,
            syscalls_per_request: None,
            failure: None,
        }
    }
}

/// Reads JSON lines of [`RunRecord`]; blank lines are skipped. Records of failed runs (a
/// `failure`, or errors) are kept as they are; the figures of the others are checked.
pub fn parse(text: &str, file: &str) -> Result<Vec<RunRecord>, DataError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let error = |message: String| DataError {
            message,
            file: file.to_owned(),
            line: i + 1,
        };
        let record: RunRecord =
            serde_json::from_str(line).map_err(|e| error(format!("invalid run record: {e}")))?;
        if record.workers == 0 {
            return Err(error("workers must be at least 1".to_owned()));
        }
        if record.failure.is_some() || record.errors > 0 {
            out.push(record);
            continue;
        }
        if record.requests == 0 {
            return Err(error("a run with no requests measures nothing".to_owned()));
        }
        if !(record.cpu_s.is_finite() && record.cpu_s > 0.0) {
            return Err(error(format!("invalid cpu_s {}", record.cpu_s)));
        }
        if !(record.duration_s.is_finite() && record.duration_s > 0.0) {
            return Err(error(format!("invalid duration_s {}", record.duration_s)));
        }
        out.push(record);
    }
    if out.is_empty() {
        return Err(DataError {
            message: "no run records".to_owned(),
            file: file.to_owned(),
            line: 0,
        });
    }
    Ok(out)
}

/// How a record says that its system does not apply to its scenario (then its `failure`).
pub const NOT_APPLICABLE: &str = "not applicable: ";

/// CPU seconds per request by worker count, for one system and scenario.
#[derive(Debug, Clone, PartialEq)]
pub struct Sweep {
    pub scenario: String,
    pub system: String,
    /// (workers, CPU seconds per request), one point per worker count, ascending; never
    /// empty, which is why it is built only by [`Sweep::from_records`].
    points: Vec<(u32, f64)>,
}

/// Why records do not make one sweep.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SweepError {
    #[error("no run record matches --system/--scenario")]
    NoMatch,
    #[error("every run of {0} failed or had errors; its figures do not count")]
    AllFailed(String),
    #[error("the run records hold several systems or scenarios ({0}); choose one with --system and --scenario")]
    Ambiguous(String),
}

impl Sweep {
    /// The sweep of the records matching `system` and `scenario` (any when `None`). Runs
    /// with the same worker count are pooled: total CPU over total requests. Failed runs
    /// and runs with errors are left out.
    pub fn from_records(
        records: &[RunRecord],
        system: Option<&str>,
        scenario: Option<&str>,
    ) -> Result<Sweep, SweepError> {
        let chosen: Vec<&RunRecord> = records
            .iter()
            .filter(|r| {
                system.is_none_or(|s| r.system == s) && scenario.is_none_or(|s| r.scenario == s)
            })
            .collect();
        if chosen.is_empty() {
            return Err(SweepError::NoMatch);
        }
        let mut kinds: Vec<String> = chosen
            .iter()
            .map(|r| format!("{} {}", r.system, r.scenario))
            .collect();
        kinds.sort();
        kinds.dedup();
        if kinds.len() > 1 {
            return Err(SweepError::Ambiguous(kinds.join(", ")));
        }
        let chosen: Vec<&RunRecord> = chosen.into_iter().filter(|r| r.succeeded()).collect();
        let first = chosen
            .first()
            .ok_or_else(|| SweepError::AllFailed(kinds.join(", ")))?;
        let mut workers: Vec<u32> = chosen.iter().map(|r| r.workers).collect();
        workers.sort_unstable();
        workers.dedup();
        let points = workers
            .into_iter()
            .map(|w| {
                let runs = chosen.iter().filter(|r| r.workers == w);
                let cpu: f64 = runs.clone().map(|r| r.cpu_s).sum();
                let requests: f64 = runs.map(|r| r.requests as f64).sum();
                (w, cpu / requests)
            })
            .collect();
        Ok(Sweep {
            scenario: first.scenario.clone(),
            system: first.system.clone(),
            points,
        })
    }

    /// (workers, CPU seconds per request) as measured, ascending by workers.
    pub fn points(&self) -> &[(u32, f64)] {
        &self.points
    }

    /// CPU seconds per request at `workers`, interpolated between measured counts and held
    /// at the nearest one outside them.
    pub fn cpu_per_request(&self, workers: u32) -> f64 {
        let w = f64::from(workers);
        let mut below = self.points[0];
        for &(count, cpu) in &self.points {
            if count == workers {
                return cpu;
            }
            if count > workers {
                if below.0 > workers {
                    return cpu;
                }
                let share = (w - f64::from(below.0)) / f64::from(count - below.0);
                return below.1 + share * (cpu - below.1);
            }
            below = (count, cpu);
        }
        below.1
    }

    /// Estimated maximum requests per second of an instance with `vcpus` vCPUs: within the
    /// sweep, vCPUs over the CPU per request measured (or interpolated); past its largest
    /// worker count, that count's figure scaled by the shape of seed 003's table
    /// ([`seed_shape`]), never linearly.
    pub fn max_rps(&self, vcpus: u32) -> f64 {
        let top = self.top();
        let measured = |v: u32| f64::from(v) / self.cpu_per_request(v);
        if vcpus <= top {
            return measured(vcpus);
        }
        let handshakes = self.is_handshakes();
        measured(top) * seed_shape(vcpus, handshakes) / seed_shape(top, handshakes)
    }

    /// The largest worker count the sweep measured.
    pub fn top(&self) -> u32 {
        self.points.last().map_or(1, |p| p.0)
    }

    /// Whether the scenario is bound by TLS handshakes (SSL TPS), which seed 003 shows to
    /// scale better than requests.
    fn is_handshakes(&self) -> bool {
        // One request per TLS connection: a handshake each.
        crate::scenario::find(&self.scenario).is_some_and(|s| s.close && s.tls.is_some())
    }

    /// The assumption behind [`Sweep::max_rps`], in a sentence for the report.
    pub fn assumption(&self) -> String {
        let head = format!(
            "Max RPS estimated from {} {}: CPU-bound, max RPS = vCPUs / CPU seconds per request",
            self.system, self.scenario
        );
        let scaling = match self.points.as_slice() {
            [(w, _)] => format!("CPU per request as measured with {w} worker(s) up to {w} vCPUs"),
            [(low, _), .., _] => {
                let counts: Vec<String> = self.points.iter().map(|(w, _)| w.to_string()).collect();
                format!(
                    "CPU per request as measured with {} workers, interpolated between them and \
                     held at its {low}-worker value below",
                    counts.join(", ")
                )
            }
            [] => "no measurement".to_owned(),
        };
        let column = if self.is_handshakes() {
            "SSL TPS"
        } else {
            "RPS"
        };
        format!(
            "{head}; {scaling}; each catalog vCPU taken as fast as one measured core. \
             WARNING: past {top} vCPUs nothing was measured: those estimates are extrapolated \
             by the shape of seed 003's {column} against CPUs (1 to 36 CPUs of one c5n \
             instance, held flat past 36), not linearly; a sweep to more workers replaces \
             them.",
            top = self.top()
        )
    }
}

/// Seed 003's figures against CPUs (NGINX Plus Ingress Controller on c5n.9xlarge, 1 KB
/// file): RPS and SSL TPS with RSA-2048. Their shape is how capacity grows with CPUs on the
/// seeds' hardware: far below linear for requests (45,000 at 1 CPU, 300,000 at 36), nearer
/// linear for handshakes.
const SEED_003: [(u32, f64, f64); 7] = [
    (1, 45_000.0, 6_700.0),
    (2, 80_000.0, 12_600.0),
    (4, 135_000.0, 23_000.0),
    (8, 175_000.0, 40_000.0),
    (16, 237_000.0, 68_500.0),
    (32, 290_000.0, 88_800.0),
    (36, 300_000.0, 92_800.0),
];

/// Seed 003's capacity at `cpus` (RPS, or SSL TPS with `handshakes`), interpolated
/// log-linearly between its rows and held at its last past them.
pub fn seed_shape(cpus: u32, handshakes: bool) -> f64 {
    let value = |row: &(u32, f64, f64)| if handshakes { row.2 } else { row.1 };
    let c = f64::from(cpus.max(1));
    for pair in SEED_003.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        if c <= f64::from(b.0) {
            let (la, lb) = (f64::from(a.0).ln(), f64::from(b.0).ln());
            let share = (c.ln() - la) / (lb - la);
            return (value(a).ln() + share * (value(b).ln() - value(a).ln())).exp();
        }
    }
    value(&SEED_003[SEED_003.len() - 1])
}

/// The CPU architecture the records were measured on, from the machine they name (Arm
/// cores name themselves Neoverse, Graviton or ARM), else this machine's.
pub fn architecture(records: &[RunRecord]) -> &'static str {
    let named = records.iter().find_map(|r| r.machine.as_deref());
    match named {
        Some(m)
            if ["Neoverse", "Graviton", "ARM", "aarch64"]
                .iter()
                .any(|a| m.contains(a)) =>
        {
            "aarch64"
        }
        Some(_) => "x86_64",
        None => std::env::consts::ARCH,
    }
}

/// The catalog's instances of architecture `arch` (`std::env::consts::ARCH`'s names), and
/// the families of the others, each once, in catalog order.
pub fn of_architecture<'a>(
    catalog: &'a [crate::data::Priced],
    arch: &str,
) -> (Vec<&'a crate::data::Priced>, Vec<&'a str>) {
    let arm = matches!(arch, "aarch64" | "arm");
    let (kept, other): (Vec<_>, Vec<_>) = catalog
        .iter()
        .partition(|p| is_arm_family(crate::data::family(&p.instance)) == arm);
    (kept, crate::data::families_of(other))
}

/// Whether an instance family's CPUs are Arm (AWS Graviton: `a1`, and families whose
/// generation digit is followed by `g`, such as `m6g`, `c7gn`, `im4gn`).
pub fn is_arm_family(family: &str) -> bool {
    if family == "a1" {
        return true;
    }
    let rest = family.trim_start_matches(|c: char| c.is_ascii_alphabetic());
    let after = rest.trim_start_matches(|c: char| c.is_ascii_digit());
    after.len() < rest.len() && after.starts_with('g')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(system: &str, workers: u32, requests: u64, cpu_s: f64) -> String {
        format!(
            r#"{{"scenario":"static-1k","system":"{system}","workers":{workers},"duration_s":10,"requests":{requests},"cpu_s":{cpu_s}}}"#
        )
    }

    #[test]
    fn record_round_trips_through_json() {
        let text = line("portcullis", 1, 100_000, 2.5);
        let records = parse(&text, "run.jsonl").unwrap();
        assert_eq!(records[0].cpu_per_request(), 2.5e-5);
        let again = serde_json::to_string(&records[0]).unwrap();
        assert_eq!(parse(&again, "run.jsonl").unwrap(), records);
    }

    #[test]
    fn bad_records_name_the_line() {
        let text = format!("{}\n\n{{\"scenario\":1}}\n", line("nginx", 1, 10, 1.0));
        let err = parse(&text, "run.jsonl").unwrap_err();
        assert_eq!((err.file.as_str(), err.line), ("run.jsonl", 3));
        assert!(err.message.starts_with("invalid run record"), "{err}");
        let zero = line("nginx", 1, 0, 1.0);
        assert_eq!(
            parse(&zero, "r").unwrap_err().to_string(),
            "a run with no requests measures nothing in r:1"
        );
        let errors = zero.replace("\"requests\":0", "\"requests\":5,\"errors\":2");
        let kept = parse(&errors, "r").unwrap();
        assert!(!kept[0].succeeded());
        assert_eq!(
            Sweep::from_records(&kept, None, None),
            Err(SweepError::AllFailed("nginx static-1k".into()))
        );
        assert_eq!(
            parse("\n", "r").unwrap_err().to_string(),
            "no run records in r"
        );
    }

    #[test]
    fn sweep_pools_interpolates_and_holds() {
        let text = [
            line("portcullis", 1, 100_000, 1.0),
            line("portcullis", 1, 100_000, 1.0),
            line("portcullis", 2, 100_000, 1.2),
            line("portcullis", 4, 100_000, 1.6),
        ]
        .join("\n");
        let sweep = Sweep::from_records(&parse(&text, "r").unwrap(), None, None).unwrap();
        assert_eq!(sweep.points().len(), 3);
        assert!((sweep.cpu_per_request(1) - 1e-5).abs() < 1e-15);
        assert!((sweep.cpu_per_request(3) - 1.4e-5).abs() < 1e-15);
        assert!((sweep.cpu_per_request(16) - 1.6e-5).abs() < 1e-15);
        assert!((sweep.max_rps(2) - 2.0 / 1.2e-5).abs() < 1e-6);
        assert!(sweep
            .assumption()
            .contains("with 1, 2, 4 workers, interpolated"));
    }

    #[test]
    fn sweep_below_the_first_count_holds_it() {
        let sweep = Sweep {
            scenario: "s".into(),
            system: "x".into(),
            points: vec![(2, 2e-5), (4, 3e-5)],
        };
        assert_eq!(sweep.cpu_per_request(1), 2e-5);
    }

    #[test]
    fn seed_shape_follows_seed_003() {
        let near = |a: f64, b: f64| (a - b).abs() < 1e-6 * b;
        assert!(near(seed_shape(2, false), 80_000.0));
        assert!(near(seed_shape(36, false), 300_000.0));
        assert!(near(seed_shape(72, false), 300_000.0));
        assert!(near(seed_shape(16, true), 68_500.0));
        // Between rows, log-linear: 3 CPUs lie between 80,000 and 135,000.
        let three = seed_shape(3, false);
        assert!(three > 80_000.0 && three < 135_000.0, "{three}");
    }

    #[test]
    fn arm_families() {
        for arm in ["a1", "m6g", "c6gn", "c7gd", "t4g", "im4gn", "x2gd", "r8g"] {
            assert!(is_arm_family(arm), "{arm}");
        }
        for x86 in ["c5", "m5a", "c5n", "g4dn", "m7i", "r6i", "i3en"] {
            assert!(!is_arm_family(x86), "{x86}");
        }
    }

    #[test]
    fn sweep_needs_one_system() {
        let text = [line("portcullis", 1, 10, 1.0), line("nginx", 1, 10, 1.0)].join("\n");
        let records = parse(&text, "r").unwrap();
        assert_eq!(
            Sweep::from_records(&records, None, None),
            Err(SweepError::Ambiguous(
                "nginx static-1k, portcullis static-1k".into()
            ))
        );
        assert_eq!(
            Sweep::from_records(&records, Some("nginx"), None)
                .unwrap()
                .system,
            "nginx"
        );
        assert_eq!(
            Sweep::from_records(&records, Some("haproxy"), None),
            Err(SweepError::NoMatch)
        );
    }
}
