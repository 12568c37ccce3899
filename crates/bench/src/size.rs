//! `size`: measured (or estimated) instances and a catalog in, the seeds' tables out.
//!
//! [`join`] prices measured instances from the catalog; [`report`] lays out the price table
//! (targets down, families across, the cheapest cell of each row marked), the per-instance
//! table, and on request the monthly prices and the optimized fleets.

use crate::data::{DataError, Measured, Priced, HOURS_PER_MONTH};
use crate::model::{self, Instance, Nodes, Policy, PriceTable};
use crate::report::{Cell, Report, Table};

/// The target rows of every price table in the seeds (seed 000 Tables 1, 4 and 6, seed
/// 001 Tables 4 and 7), merged.
pub const SEED_TARGETS: [f64; 25] = [
    250.0, 500.0, 1_000.0, 2_000.0, 4_000.0, 8_000.0, 10_000.0, 15_000.0, 16_000.0, 20_000.0,
    24_000.0, 25_000.0, 32_000.0, 35_000.0, 40_000.0, 50_000.0, 75_000.0, 80_000.0, 100_000.0,
    125_000.0, 150_000.0, 160_000.0, 175_000.0, 200_000.0, 320_000.0,
];

/// A cell of a seed's price table that the seed's own rule and per-instance table do not
/// give (docs/sizing.md, "Exceptions"): shown under the table `size` makes from that
/// per-instance table, so a reader comparing the two knows which one to trust.
pub struct SeedException {
    /// The per-instance table shipped in data/seeds/ that the price table is made from.
    pub file: &'static str,
    pub table: &'static str,
    pub target: f64,
    pub family: &'static str,
    pub seed: &'static str,
    pub rule: &'static str,
    pub why: &'static str,
}

pub const SEED_EXCEPTIONS: [SeedException; 7] = [
    SeedException {
        file: "seed000-table5.csv",
        table: "Seed 000 Table 4",
        target: 25_000.0,
        family: "a1",
        seed: "0.255",
        rule: "0.153",
        why: "3 x a1.large serve 31,856, the seed's own example; Table 1 prints 0.153 for the \
              same cell, and 0.255 is five a1.large, not three nodes of any a1 size",
    },
    SeedException {
        file: "seed000-table5.csv",
        table: "Seed 000 Tables 1 and 4",
        target: 25_000.0,
        family: "c5",
        seed: "0.288",
        rule: "0.255",
        why: "3 x c5.large serve 61,529, the seed's answer at 35,000 and 50,000 too; 0.288 is \
              three m5.large",
    },
    SeedException {
        file: "seed000-table5.csv",
        table: "Seed 000 Tables 1 and 4",
        target: 25_000.0,
        family: "m5a",
        seed: "0.2505",
        rule: "0.258",
        why: "3 x m5a.large serve 49,512; 0.2505 is three times $0.0835, which is no m5a price",
    },
    SeedException {
        file: "seed001-table5.csv",
        table: "Seed 001 Table 4",
        target: 160_000.0,
        family: "m5",
        seed: "2.3",
        rule: "1.15",
        why: "3 x m5.2xlarge serve 173,628; 2.30 is three m5.4xlarge, the next row's answer",
    },
    SeedException {
        file: "seed001-table5.csv",
        table: "Seed 001 Table 4",
        target: 320_000.0,
        family: "m5",
        seed: "23",
        rule: "2.30",
        why: "the seed's text lost the decimal point: three m5.4xlarge cost 2.304",
    },
    SeedException {
        file: "seed001-table8.csv",
        table: "Seed 001 Table 7",
        target: 80_000.0,
        family: "m5",
        seed: "1.15",
        rule: "0.58",
        why: "3 x m5.xlarge serve 84,015; 1.15 is three m5.2xlarge",
    },
    SeedException {
        file: "seed001-table8.csv",
        table: "Seed 001 Table 7",
        target: 320_000.0,
        family: "m5",
        seed: "23",
        rule: "2.30",
        why: "the seed's text lost the decimal point, as in its Table 4",
    },
];

/// The notes that go under a price table made from the seed table `file` (a file name of
/// data/seeds/): the seed's cells among `targets` and `families` that its own rule does not
/// give.
pub fn seed_footnotes(file: &str, targets: &[f64], families: &[String]) -> Vec<String> {
    SEED_EXCEPTIONS
        .iter()
        .filter(|e| e.file == file)
        .filter(|e| targets.contains(&e.target))
        .filter(|e| families.iter().any(|f| f == e.family))
        .map(|e| {
            format!(
                "{}: the seed has {} for {} at {} RPS, which its own rule does not give; this \
                 table's {} is the rule's ({}).",
                e.table,
                e.seed,
                e.family,
                crate::report::Cell::number(e.target, 0).text,
                e.rule,
                e.why
            )
        })
        .collect()
}

/// What a cell says when no size of the family serves the target.
pub const NO_FIT: &str = "none fits";

/// What to show besides the fixed-fleet price table.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    pub policy: Policy,
    pub targets: Vec<f64>,
    /// Monthly prices and RPS per dollar.
    pub tco: bool,
    /// The cheapest fleet at any node count, next to the fixed one.
    pub optimize: bool,
}

/// Prices each measured instance from the catalog. A measured instance missing from the
/// catalog, or listed there with other vCPUs, is an error at its line of the measured file.
pub fn join(
    measured: &[Measured],
    measured_file: &str,
    catalog: &[Priced],
) -> Result<Vec<Instance>, DataError> {
    measured
        .iter()
        .map(|m| {
            let error = |message: String| DataError {
                message,
                file: measured_file.to_owned(),
                line: m.line,
            };
            let priced = catalog
                .iter()
                .find(|p| p.instance == m.instance)
                .ok_or_else(|| {
                    error(format!(
                        "instance \"{}\" has no price in the catalog",
                        m.instance
                    ))
                })?;
            if priced.vcpus != m.vcpus {
                return Err(error(format!(
                    "instance \"{}\" has {} vCPUs here and {} in the catalog",
                    m.instance, m.vcpus, priced.vcpus
                )));
            }
            Ok(Instance {
                name: m.instance.clone(),
                vcpus: m.vcpus,
                max_rps: m.max_rps,
                ssl_tps: m.ssl_tps,
                usd_per_hour: priced.usd_per_hour,
            })
        })
        .collect()
}

/// The report `size` prints: `title` names the input, `notes` come first (the estimate's
/// assumption, when there is one).
pub fn report(
    title: String,
    mut notes: Vec<String>,
    instances: &[Instance],
    options: &Options,
) -> Report {
    let policy = &options.policy;
    let cap_pct = percent(policy.cap());
    notes.insert(
        0,
        format!(
            "Redundancy: {} nodes, {} may fail. Max util: {cap_pct}. A size serves a target when \
             nodes x {cap_pct} x max RPS >= target and (nodes - failures) x max RPS >= target.",
            policy.nodes(),
            policy.failures()
        ),
    );
    let fixed = model::price_table(instances, policy, Nodes::Fixed, &options.targets);
    let mut tables = vec![price_table(
        format!("Price per hour, {} nodes", policy.nodes()),
        &fixed,
        policy,
        1.0,
    )];
    if options.tco {
        tables.push(price_table(
            format!(
                "Price per month ({HOURS_PER_MONTH} h), {} nodes",
                policy.nodes()
            ),
            &fixed,
            policy,
            HOURS_PER_MONTH,
        ));
    }
    if options.optimize {
        let best = model::price_table(instances, policy, Nodes::Optimized, &options.targets);
        tables.push(optimized_table(&fixed, &best, instances, policy));
    }
    tables.push(instance_table(instances, policy, options.tco));
    Report {
        title,
        notes,
        tables,
    }
}

fn percent(cap: f64) -> String {
    let plain = Cell::number(cap * 100.0, 2).plain;
    format!("{plain}%")
}

/// The seeds' table: total RPS, RPS per instance, then the price of each family's fleet,
/// multiplied by `scale` hours.
fn price_table(title: String, table: &PriceTable, policy: &Policy, scale: f64) -> Table {
    let unit = if scale == 1.0 { "$/hr" } else { "$/month" };
    let mut header = vec!["Total RPS".to_owned(), "RPS/instance".to_owned()];
    header.extend(table.families.iter().map(|f| format!("{f} {unit}")));
    let rows = table
        .rows
        .iter()
        .map(|row| {
            let mut cells = vec![
                Cell::number(row.target, 0),
                Cell::number(row.target / f64::from(policy.nodes()), 0),
            ];
            cells.extend(row.fleets.iter().enumerate().map(|(i, fleet)| {
                let cell = match fleet {
                    Some(f) if scale == 1.0 => Cell::usd(f.usd_per_hour),
                    Some(f) => Cell::cents(f.usd_per_hour * scale),
                    None => Cell::text(NO_FIT),
                };
                cell.marked(row.cheapest.contains(&i))
            }));
            cells
        })
        .collect();
    Table {
        title,
        header,
        rows,
        mark: Some("cheapest in row".to_owned()),
        footnotes: Vec::new(),
    }
}

/// Per family: the cheapest fleet at any node count, its price, and what it saves against
/// the fixed fleet.
fn optimized_table(
    fixed: &PriceTable,
    best: &PriceTable,
    instances: &[Instance],
    policy: &Policy,
) -> Table {
    let mut header = vec!["Total RPS".to_owned()];
    for f in &best.families {
        header.push(format!("{f} fleet"));
        header.push(format!("{f} $/hr"));
        header.push(format!("{f} saves"));
    }
    let rows = best
        .rows
        .iter()
        .zip(&fixed.rows)
        .map(|(row, fixed_row)| {
            let mut cells = vec![Cell::number(row.target, 0)];
            for (i, (fleet, fixed_fleet)) in row.fleets.iter().zip(&fixed_row.fleets).enumerate() {
                match fleet {
                    Some(f) => {
                        cells.push(Cell::text(format!(
                            "{} x {}",
                            f.nodes, instances[f.instance].name
                        )));
                        cells.push(Cell::usd(f.usd_per_hour).marked(row.cheapest.contains(&i)));
                        cells.push(match fixed_fleet {
                            // Never below zero: the optimizer tries the fixed node count too, and
                            // only rounding could make the difference negative.
                            Some(x) => Cell::usd((x.usd_per_hour - f.usd_per_hour).max(0.0)),
                            None => Cell::text("-"),
                        });
                    }
                    None => cells.extend([Cell::text(NO_FIT), Cell::text(NO_FIT), Cell::text("-")]),
                }
            }
            cells
        })
        .collect();
    Table {
        title: format!(
            "Cheapest fleet at any node count that survives {} failure(s), against {} nodes",
            policy.failures(),
            policy.nodes()
        ),
        header,
        rows,
        mark: Some("cheapest in row".to_owned()),
        footnotes: Vec::new(),
    }
}

/// The seeds' per-instance table: vCPU, max RPS, RPS at the cap, $/hour; with `tco` also
/// $/month and max RPS per $/hour.
fn instance_table(instances: &[Instance], policy: &Policy, tco: bool) -> Table {
    let mut header: Vec<String> = ["Instance", "vCPU", "max RPS"].map(str::to_owned).to_vec();
    // Seed 003's table has the SSL TPS of each instance beside its RPS.
    let tps = instances.iter().any(|i| i.ssl_tps.is_some());
    if tps {
        header.push("SSL TPS".to_owned());
    }
    header.push(format!("RPS at {}", percent(policy.cap())));
    header.push("$/hour".to_owned());
    if tco {
        header.push("$/month".to_owned());
        header.push("max RPS per $/hr".to_owned());
    }
    let rows = instances
        .iter()
        .map(|i| {
            let mut cells = vec![
                Cell::text(&i.name),
                Cell::number(f64::from(i.vcpus), 0),
                Cell::number(i.max_rps, 2),
            ];
            if tps {
                cells.push(
                    i.ssl_tps
                        .map_or_else(|| Cell::text("-"), |t| Cell::number(t, 0)),
                );
            }
            cells.extend([
                Cell::number(i.max_rps * policy.cap(), 2),
                Cell::usd(i.usd_per_hour),
            ]);
            if tco {
                cells.push(Cell::cents(i.usd_per_hour * HOURS_PER_MONTH));
                cells.push(Cell::number(i.max_rps / i.usd_per_hour, 0));
            }
            cells
        })
        .collect();
    Table {
        title: "Per instance".to_owned(),
        header,
        rows,
        mark: None,
        footnotes: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::{parse_catalog, parse_measured};

    const CATALOG: &str =
        "instance,vcpus,usd,per,source\na.large,2,0.05,hour,x\na.xlarge,4,0.1,hour,x\n";

    #[test]
    fn join_prices_and_checks_vcpus() {
        let catalog = parse_catalog(CATALOG, "c").unwrap();
        let measured = parse_measured("instance,vcpus,max_rps\na.large,2,1000\n", "m").unwrap();
        let joined = join(&measured, "m", &catalog).unwrap();
        assert_eq!(joined[0].usd_per_hour, 0.05);
        let wrong = parse_measured("instance,vcpus,max_rps\n\na.xlarge,8,1000\n", "m").unwrap();
        assert_eq!(
            join(&wrong, "m", &catalog).unwrap_err().to_string(),
            "instance \"a.xlarge\" has 8 vCPUs here and 4 in the catalog in m:3"
        );
        let missing = parse_measured("instance,vcpus,max_rps\nz.large,2,1000\n", "m").unwrap();
        assert_eq!(
            join(&missing, "m", &catalog).unwrap_err().to_string(),
            "instance \"z.large\" has no price in the catalog in m:2"
        );
    }

    #[test]
    fn report_tables() {
        let catalog = parse_catalog(CATALOG, "c").unwrap();
        let measured = parse_measured(
            "instance,vcpus,max_rps\na.large,2,10000\na.xlarge,4,20000\n",
            "m",
        )
        .unwrap();
        let instances = join(&measured, "m", &catalog).unwrap();
        let options = Options {
            policy: Policy::SEEDS,
            targets: vec![1000.0, 30_000.0, 90_000.0],
            tco: true,
            optimize: true,
        };
        let r = report("t".into(), vec![], &instances, &options);
        let titles: Vec<&str> = r.tables.iter().map(|t| t.title.as_str()).collect();
        assert_eq!(titles.len(), 4, "{titles:?}");
        let hourly = &r.tables[0];
        assert_eq!(hourly.rows[0][2].text, "0.15");
        assert!(hourly.rows[0][2].marked);
        assert_eq!(hourly.rows[1][2].text, "0.30");
        assert_eq!(hourly.rows[2][2].text, NO_FIT);
        assert_eq!(r.tables[1].rows[0][2].text, "109.50");
        let optimized = &r.tables[2];
        assert_eq!(optimized.rows[2][1].text, "7 x a.xlarge");
        assert_eq!(optimized.rows[2][3].text, "-");
        let per_instance = &r.tables[3];
        assert_eq!(per_instance.header[3], "RPS at 66%");
        assert_eq!(per_instance.rows[0][3].text, "6,600");
        assert_eq!(per_instance.rows[0][6].text, "200,000");
    }
}
