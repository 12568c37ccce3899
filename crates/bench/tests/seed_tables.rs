//! The seeds' price tables, reproduced from their own per-instance tables.
//!
//! Each expected table is typed in from the seed as printed. A cell the seed's own rule
//! does not give is listed as an exception with the value the rule gives instead, and the
//! test checks both that the seed's value is *not* reproduced and that the rule's value is:
//! a change to the model that "fixes" an exception fails here. docs/sizing.md explains each
//! exception.

use std::path::Path;

use portcullis_bench::model::{price_table, Instance, Nodes, Policy};
use portcullis_bench::size::join;
use portcullis_bench::{parse_catalog, parse_measured, SEEDS_CATALOG};

/// A cell as the seed prints it.
#[derive(Clone, Copy)]
enum Seed {
    /// The seed's value, which the rule reproduces.
    Agrees(&'static str),
    /// The seed's value contradicts its rule; `rule` is what the rule gives.
    Exception {
        seed: &'static str,
        rule: &'static str,
    },
    /// The seed's text has lost the cell; `rule` is what the rule gives.
    Illegible { rule: &'static str },
}

use Seed::{Agrees as A, Exception, Illegible};

fn instances(file: &str) -> Vec<Instance> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("data/seeds")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    let measured = parse_measured(&text, file).unwrap();
    let catalog = parse_catalog(SEEDS_CATALOG, "catalog-seeds.csv").unwrap();
    join(&measured, file, &catalog).unwrap()
}

/// The model's price rounded to the decimals the seed printed.
fn as_printed(price: f64, seed: &str) -> String {
    let decimals = seed.split_once('.').map_or(0, |(_, d)| d.len());
    format!("{price:.decimals$}")
}

/// Checks every cell; returns how many exceptions and illegible cells were met, so the
/// caller can assert the list is what docs/sizing.md says.
fn check(measured: &str, families: &[&str], expected: &[(u32, &[Seed])]) -> (usize, usize) {
    let instances = instances(measured);
    let targets: Vec<f64> = expected.iter().map(|(t, _)| f64::from(*t)).collect();
    let table = price_table(&instances, &Policy::SEEDS, Nodes::Fixed, &targets);
    assert_eq!(table.families, families);
    let (mut exceptions, mut illegible) = (0, 0);
    for (row, (target, cells)) in table.rows.iter().zip(expected) {
        assert_eq!(row.fleets.len(), cells.len(), "{measured} at {target}");
        for ((fleet, cell), family) in row.fleets.iter().zip(*cells).zip(families) {
            let fleet = fleet
                .as_ref()
                .unwrap_or_else(|| panic!("{measured}: no {family} fleet for {target}"));
            let at = format!("{measured}, {family} at {target} RPS");
            match *cell {
                A(seed) => assert_eq!(as_printed(fleet.usd_per_hour, seed), seed, "{at}"),
                Exception { seed, rule } => {
                    exceptions += 1;
                    assert_ne!(
                        as_printed(fleet.usd_per_hour, seed),
                        seed,
                        "{at}: exception now reproduced"
                    );
                    assert_eq!(as_printed(fleet.usd_per_hour, rule), rule, "{at}");
                }
                Illegible { rule } => {
                    illegible += 1;
                    assert_eq!(as_printed(fleet.usd_per_hour, rule), rule, "{at}");
                }
            }
        }
    }
    (exceptions, illegible)
}

const A1_LOW: [Seed; 4] = [A("0.153"), A("0.255"), A("0.288"), A("0.258")];

/// Seed 000 Table 4 (reverse proxy), from Table 5.
#[test]
fn seed000_table4_from_table5() {
    let expected: &[(u32, &[Seed])] = &[
        (1_000, &A1_LOW),
        (2_000, &A1_LOW),
        (4_000, &A1_LOW),
        (10_000, &A1_LOW),
        (15_000, &A1_LOW),
        (20_000, &A1_LOW),
        (
            25_000,
            &[
                Exception {
                    seed: "0.255",
                    rule: "0.153",
                },
                Exception {
                    seed: "0.288",
                    rule: "0.255",
                },
                A("0.288"),
                Exception {
                    seed: "0.2505",
                    rule: "0.258",
                },
            ],
        ),
        (35_000, &[A("0.306"), A("0.255"), A("0.288"), A("0.258")]),
        (50_000, &[A("0.306"), A("0.255"), A("0.288"), A("0.516")]),
        (75_000, &[A("0.612"), A("0.51"), A("0.576"), A("0.516")]),
        (100_000, &[A("0.612"), A("0.51"), A("0.576"), A("1.032")]),
        (125_000, &[A("0.612"), A("0.51"), A("0.576"), A("1.032")]),
        (175_000, &[A("1.224"), A("1.02"), A("1.152"), A("1.032")]),
        (200_000, &[A("1.224"), A("1.02"), A("1.152"), A("2.064")]),
    ];
    assert_eq!(
        check("seed000-table5.csv", &["a1", "c5", "m5", "m5a"], expected),
        (3, 0)
    );
}

/// Seed 000 Table 1 (the executive summary's copy of Table 4) differs from Table 4 in one
/// cell, a1 at 25,000, where it agrees with the rule.
#[test]
fn seed000_table1_from_table5() {
    let expected: &[(u32, &[Seed])] = &[
        (20_000, &A1_LOW),
        (
            25_000,
            &[
                A("0.153"),
                Exception {
                    seed: "0.288",
                    rule: "0.255",
                },
                A("0.288"),
                Exception {
                    seed: "0.2505",
                    rule: "0.258",
                },
            ],
        ),
        (35_000, &[A("0.306"), A("0.255"), A("0.288"), A("0.258")]),
    ];
    assert_eq!(
        check("seed000-table5.csv", &["a1", "c5", "m5", "m5a"], expected),
        (2, 0)
    );
}

/// Seed 000 Table 6 (API gateway), from Table 7: every cell follows the rule.
#[test]
fn seed000_table6_from_table7() {
    let expected: &[(u32, &[Seed])] = &[
        (1_000, &A1_LOW),
        (2_000, &A1_LOW),
        (4_000, &A1_LOW),
        (10_000, &A1_LOW),
        (15_000, &A1_LOW),
        (20_000, &A1_LOW),
        (25_000, &A1_LOW),
        (35_000, &[A("0.306"), A("0.255"), A("0.288"), A("0.258")]),
        (50_000, &[A("0.306"), A("0.255"), A("0.288"), A("0.516")]),
        (75_000, &[A("0.612"), A("0.51"), A("0.576"), A("0.516")]),
        (100_000, &[A("0.612"), A("0.51"), A("0.576"), A("1.032")]),
        (125_000, &[A("0.612"), A("1.02"), A("1.152"), A("1.032")]),
        (150_000, &[A("1.224"), A("1.02"), A("1.152"), A("1.032")]),
        (175_000, &[A("1.224"), A("1.02"), A("1.152"), A("2.064")]),
        (200_000, &[A("1.224"), A("1.02"), A("1.152"), A("2.064")]),
    ];
    assert_eq!(
        check("seed000-table7.csv", &["a1", "c5", "m5", "m5a"], expected),
        (0, 0)
    );
}

const M6G_LOW: [Seed; 2] = [A("0.23"), A("0.29")];

/// Seed 001 Table 4 (reverse proxy, HS256 JWT), from Table 5.
#[test]
fn seed001_table4_from_table5() {
    let expected: &[(u32, &[Seed])] = &[
        (250, &M6G_LOW),
        (500, &M6G_LOW),
        (1_000, &M6G_LOW),
        (2_000, &M6G_LOW),
        (4_000, &M6G_LOW),
        (8_000, &M6G_LOW),
        (16_000, &M6G_LOW),
        (24_000, &M6G_LOW),
        (32_000, &M6G_LOW),
        (40_000, &M6G_LOW),
        (80_000, &[A("0.46"), A("0.58")]),
        (
            160_000,
            &[
                A("0.92"),
                Exception {
                    seed: "2.3",
                    rule: "1.15",
                },
            ],
        ),
        (
            320_000,
            &[
                A("1.85"),
                Exception {
                    seed: "23",
                    rule: "2.30",
                },
            ],
        ),
    ];
    assert_eq!(
        check("seed001-table5.csv", &["m6g", "m5"], expected),
        (2, 0)
    );
}

/// Seed 001 Table 7 (API gateway, HS256 JWT), from Table 8.
#[test]
fn seed001_table7_from_table8() {
    let expected: &[(u32, &[Seed])] = &[
        (250, &M6G_LOW),
        (500, &M6G_LOW),
        (1_000, &M6G_LOW),
        (2_000, &M6G_LOW),
        (4_000, &M6G_LOW),
        (8_000, &M6G_LOW),
        (16_000, &M6G_LOW),
        (24_000, &M6G_LOW),
        (32_000, &M6G_LOW),
        (40_000, &M6G_LOW),
        (
            80_000,
            &[
                A("0.46"),
                Exception {
                    seed: "1.15",
                    rule: "0.58",
                },
            ],
        ),
        (
            160_000,
            &[Illegible { rule: "0.92" }, Illegible { rule: "1.15" }],
        ),
        (
            320_000,
            &[
                Illegible { rule: "1.85" },
                Exception {
                    seed: "23",
                    rule: "2.30",
                },
            ],
        ),
    ];
    assert_eq!(
        check("seed001-table8.csv", &["m6g", "m5"], expected),
        (2, 3)
    );
}

/// The seeds' "RPS at 66% utilization" column is max RPS x 0.66, to the cent, except seed
/// 000 Table 5's m5.2xlarge, printed as 123516.36 (0.66 x 187146) for a max of 187147.
#[test]
fn seed000_table5_rps_at_cap() {
    let printed = [
        10618.74, 23863.62, 50162.64, 111564.42, 20509.5, 50130.3, 124664.76, 297203.28, 22290.84,
        48939.66, 123516.36, 288765.18, 16503.96, 31425.9, 64049.7, 150323.58,
    ];
    let instances = instances("seed000-table5.csv");
    for (instance, printed) in instances.iter().zip(printed) {
        let at_cap = instance.max_rps * Policy::SEEDS.cap();
        if instance.name == "m5.2xlarge" {
            assert!((at_cap - 123517.02).abs() < 0.005);
        } else {
            assert!(
                (at_cap - printed).abs() < 0.005,
                "{}: {at_cap} against {printed}",
                instance.name
            );
        }
    }
}
