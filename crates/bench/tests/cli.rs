//! `portcullis-bench size` as a user runs it: the real binary, its output and exit status.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn seeds(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("data/seeds")
        .join(file)
}

fn bench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_portcullis-bench"))
        .args(args)
        .output()
        .unwrap()
}

fn stdout(output: &Output) -> String {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).unwrap()
}

/// A file in a directory of its own, removed when dropped.
struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str, text: &str) -> TempFile {
        let dir =
            std::env::temp_dir().join(format!("portcullis-bench-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        TempFile(path)
    }

    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if let Some(dir) = self.0.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

#[test]
fn seed_table_row_as_text() {
    let measured = seeds("seed000-table5.csv");
    let out = stdout(&bench(&[
        "size",
        "--measured",
        measured.to_str().unwrap(),
        "--targets",
        "25000,35000",
    ]));
    assert!(
        out.contains("Redundancy: 3 nodes, 1 may fail. Max util: 66%."),
        "{out}"
    );
    assert!(
        out.contains("Total RPS  RPS/instance  a1 $/hr  c5 $/hr  m5 $/hr  m5a $/hr\n"),
        "{out}"
    );
    assert!(
        out.contains("  25,000         8,333    0.153*   0.255    0.288     0.258\n"),
        "{out}"
    );
    assert!(
        out.contains("  35,000        11,667    0.306    0.255*   0.288     0.258\n"),
        "{out}"
    );
    assert!(
        out.contains("a1.large        2   16,089   10,618.74   0.051\n"),
        "{out}"
    );

    // Without --targets, every row of the seeds' tables.
    let out = stdout(&bench(&["size", "--measured", measured.to_str().unwrap()]));
    assert!(out.contains("\n     250            83 "), "{out}");
    assert!(out.contains("\n 320,000       106,667 "), "{out}");
}

#[test]
fn tco_optimize_and_formats() {
    let measured = seeds("seed001-table5.csv");
    let m = measured.to_str().unwrap();
    let out = stdout(&bench(&[
        "size",
        "--measured",
        m,
        "--targets",
        "100000",
        "--tco",
        "--optimize",
    ]));
    assert!(out.contains("Price per month (730 h), 3 nodes"), "{out}");
    // 100,000 RPS: three m6g.xlarge (0.462) at 66% give 127,975; five m6g.large (0.385)
    // give 112,292, and four survivors 136,112.
    assert!(
        out.contains(" 100,000        33,333     0.462*   1.152\n"),
        "{out}"
    );
    assert!(
        out.contains(
            " 100,000   5 x m6g.large     0.385*     0.077   4 x m5.xlarge    0.768     0.384\n"
        ),
        "{out}"
    );
    assert!(out.contains("max RPS per $/hr"), "{out}");
    let html = stdout(&bench(&[
        "size",
        "--measured",
        m,
        "--targets",
        "1000",
        "--format",
        "html",
    ]));
    assert!(
        html.starts_with("<!DOCTYPE html>") && html.contains("class=\"n mark\""),
        "{html}"
    );
    let csv = stdout(&bench(&[
        "size",
        "--measured",
        m,
        "--targets",
        "1000",
        "--format",
        "csv",
    ]));
    assert!(csv.contains("Total RPS,RPS/instance,m6g $/hr,m5 $/hr,cheapest in row\n1000,333,0.231,0.288,m6g $/hr\n"), "{csv}");
    let md = stdout(&bench(&[
        "size",
        "--measured",
        m,
        "--targets",
        "1000",
        "--format",
        "markdown",
    ]));
    assert!(md.contains("| 1,000 | 333 | **0.231** | 0.288 |"), "{md}");
}

#[test]
fn from_run_estimates_every_catalog_instance() {
    // Records that name no machine are taken as this one's: the c5 rows below are x86's.
    if std::env::consts::ARCH != "x86_64" {
        return;
    }
    // 10 us of CPU per request at one worker, 12.5 us at two: 2 vCPUs serve 160,000 RPS.
    let run = TempFile::new(
        "run.jsonl",
        concat!(
            r#"{"scenario":"static-1k","system":"portcullis","workers":1,"duration_s":10,"requests":1000000,"cpu_s":10}"#,
            "\n",
            r#"{"scenario":"static-1k","system":"portcullis","workers":2,"duration_s":10,"requests":1000000,"cpu_s":12.5}"#,
            "\n",
        ),
    );
    let out = stdout(&bench(&[
        "size",
        "--from-run",
        run.path(),
        "--families",
        "c5",
        "--targets",
        "300000",
    ]));
    assert!(
        out.contains("Max RPS estimated from portcullis static-1k: CPU-bound"),
        "{out}"
    );
    assert!(
        out.contains("c5.large       2  160,000     105,600   0.085\n"),
        "{out}"
    );
    // Past the sweep's two workers, the shape of seed 003's RPS against CPUs (80,000 at 2,
    // 237,000 at 16), not a line: 160,000 x 237 / 80, where a line would give 1,280,000.
    assert!(
        out.contains("c5.4xlarge    16  474,000     312,840    0.68\n"),
        "{out}"
    );
    assert!(
        out.contains("WARNING: extrapolated past the sweep's 2 workers (see above): c5.xlarge, c5.2xlarge, c5.4xlarge."),
        "{out}"
    );
    assert!(!out.contains("a1.large"), "{out}");
    // 3 x 0.66 x 160,000 = 316,800 >= 300,000.
    assert!(out.contains(" 300,000       100,000    0.255*\n"), "{out}");
}

#[test]
fn from_run_gives_seed_003_ssl_tps_from_a_handshake_scenario() {
    if std::env::consts::ARCH != "x86_64" {
        return;
    }
    // 100 us per handshake with one worker and two: 2 vCPUs make 20,000; past them, the
    // shape of seed 003's SSL TPS (12,600 at 2, 68,500 at 16), not of its RPS.
    let run = TempFile::new(
        "tps-run.jsonl",
        concat!(
            r#"{"scenario":"ingress-1k","system":"portcullis","workers":1,"duration_s":10,"requests":1000000,"cpu_s":10}"#,
            "\n",
            r#"{"scenario":"ingress-tps-rsa","system":"portcullis","workers":1,"duration_s":10,"requests":100000,"cpu_s":10}"#,
            "\n",
            r#"{"scenario":"ingress-tps-rsa","system":"portcullis","workers":2,"duration_s":10,"requests":100000,"cpu_s":10}"#,
            "\n",
        ),
    );
    let out = stdout(&bench(&[
        "size",
        "--from-run",
        run.path(),
        "--scenario",
        "ingress-1k",
        "--tps-scenario",
        "ingress-tps-rsa",
        "--families",
        "c5n",
        "--targets",
        "1000",
        "--tco",
    ]));
    assert!(
        out.contains("SSL TPS: Max RPS estimated from portcullis ingress-tps-rsa"),
        "{out}"
    );
    assert!(
        out.contains("Instance     vCPU     max RPS  SSL TPS"),
        "{out}"
    );
    // RPS: 100,000 at one worker, then seed 003's RPS shape (45,000 at 1, 80,000 at 2).
    assert!(
        out.contains("c5n.large       2  177,777.78   20,000 "),
        "{out}"
    );
    // SSL TPS: 20,000 x 68,500 / 12,600 at 16, where the RPS shape would give 59,250.
    assert!(
        out.contains("c5n.4xlarge    16  526,666.67  108,730 "),
        "{out}"
    );
}

/// A run on x86 cores says nothing of Arm ones: their families are left out, and said so.
#[test]
fn from_run_leaves_out_another_architecture() {
    let run = TempFile::new(
        "arm-run.jsonl",
        r#"{"scenario":"static-1k","system":"portcullis","workers":2,"duration_s":10,"requests":1000000,"cpu_s":12.5}"#,
    );
    let out = stdout(&bench(&[
        "size",
        "--from-run",
        run.path(),
        "--families",
        "c5,m6g,a1",
        "--targets",
        "300000",
    ]));
    if std::env::consts::ARCH == "x86_64" {
        assert!(
            out.contains("Left out: m6g, a1 (Arm)") || out.contains("Left out: a1, m6g (Arm)"),
            "{out}"
        );
        assert!(!out.contains("m6g.large "), "{out}");
        assert!(out.contains("c5.large "), "{out}");
    }
}

/// The cells of a seed's price table that its own rule does not give are named under the
/// table made from the seed's per-instance table, in every format.
#[test]
fn seed_exceptions_are_named_under_the_table() {
    let seed = concat!(env!("CARGO_MANIFEST_DIR"), "/data/seeds/seed000-table5.csv");
    let out = stdout(&bench(&["size", "--measured", seed]));
    let table_end = out.find("* cheapest in row").expect("the price table");
    let note = out
        .find("Seed 000 Table 4: the seed has 0.255 for a1 at 25,000 RPS")
        .unwrap_or_else(|| panic!("{out}"));
    assert!(note > table_end, "{out}");
    assert!(
        out.contains("Seed 000 Tables 1 and 4: the seed has 0.288 for c5"),
        "{out}"
    );
    assert!(out.contains("0.2505 for m5a"), "{out}");
    let md = stdout(&bench(&[
        "size",
        "--measured",
        seed,
        "--format",
        "markdown",
    ]));
    assert!(md.contains("the seed has 0.288 for c5"), "{md}");
    // Another policy makes another table: the seed's cells are not its to explain.
    let other = stdout(&bench(&["size", "--measured", seed, "--nodes", "4"]));
    assert!(!other.contains("the seed has"), "{other}");
    // Without the row, nothing to say.
    let row = stdout(&bench(&["size", "--measured", seed, "--targets", "50000"]));
    assert!(!row.contains("the seed has"), "{row}");
}

#[test]
fn errors_name_the_place() {
    let bad = TempFile::new("bad.csv", "# x\ninstance,vcpus,max_rps\na1.large,2,lots\n");
    let out = bench(&["size", "--measured", bad.path()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        err,
        format!(
            "portcullis-bench: invalid max_rps \"lots\" in {}:3\n",
            bad.path()
        )
    );

    let measured = seeds("seed000-table5.csv");
    let out = bench(&[
        "size",
        "--measured",
        measured.to_str().unwrap(),
        "--nodes",
        "2",
        "--failures",
        "2",
    ]);
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "portcullis-bench: --failures 2 leaves no node of --nodes 2\n"
    );

    let out = bench(&["size"]);
    assert_eq!(out.status.code(), Some(2), "clap reports a missing input");
}

#[test]
fn families_leave_out_unpriced_instances() {
    let measured = TempFile::new(
        "own.csv",
        "instance,vcpus,max_rps\na1.large,2,16089\nx9.large,2,50000\n",
    );
    let out = bench(&["size", "--measured", measured.path(), "--targets", "1000"]);
    let err = String::from_utf8_lossy(&out.stderr);
    let expected = format!(
        "portcullis-bench: instance \"x9.large\" has no price in the catalog in {}:3\n",
        measured.path()
    );
    assert_eq!(err, expected);
    let out = stdout(&bench(&[
        "size",
        "--measured",
        measured.path(),
        "--targets",
        "1000",
        "--families",
        "A1",
    ]));
    assert!(
        out.contains("Total RPS  RPS/instance  a1 $/hr\n   1,000           333    0.153*\n"),
        "{out}"
    );
}

#[test]
fn monthly_prices_come_back_as_the_seed_states_them() {
    // Seed 003 prices c5n by the month: $100 for c5n.large, $1790 for c5n.9xlarge.
    let measured = seeds("seed003-performance-analysis.csv");
    let out = stdout(&bench(&[
        "size",
        "--measured",
        measured.to_str().unwrap(),
        "--targets",
        "100000",
        "--tco",
    ]));
    // Its table whole: instance, CPUs, RPS, SSL TPS, monthly TCO.
    assert!(
        out.contains("Instance     vCPU  max RPS  SSL TPS  RPS at 66%  $/hour   $/month"),
        "{out}"
    );
    assert!(
        out.contains("c5n.large       2   80,000   12,600      52,800   0.137    100.00 "),
        "{out}"
    );
    assert!(
        out.contains("c5n.9xlarge    36  300,000   92,800     198,000  2.4521  1,790.00 "),
        "{out}"
    );
}
