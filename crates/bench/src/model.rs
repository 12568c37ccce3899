//! The sizing model: which fleet of one instance family serves a target load, and at what
//! price.
//!
//! The seeds run a fixed fleet of `nodes` identical instances, each loaded at most to `cap`
//! of the maximum RPS measured on one instance, and choose, per family, the cheapest size
//! for which that is enough. The cap is there so that the fleet survives `failures` lost
//! instances: the seeds' 66% on three nodes leaves the two survivors at 99% of their
//! maximum. Both conditions are checked, so the rule stays safe when nodes, failures or cap
//! change. docs/sizing.md derives the rule from the seeds' tables.

/// The most nodes the optimizer tries per fleet; a target needing more is "no fleet".
pub const MAX_NODES: u32 = 1000;

/// Relative slack when a capacity is compared with a target: `0.66 * x` is not exact in
/// binary, and a capacity equal to the target up to rounding meets it.
const ROUNDING: f64 = 1e-9;

/// One instance type that can be sized: measured (or estimated) capacity and price.
#[derive(Debug, Clone, PartialEq)]
pub struct Instance {
    pub name: String,
    pub vcpus: u32,
    pub max_rps: f64,
    /// New TLS connections per second, where measured or estimated (the seeds' SSL TPS).
    pub ssl_tps: Option<f64>,
    pub usd_per_hour: f64,
}

impl Instance {
    pub fn family(&self) -> &str {
        crate::data::family(&self.name)
    }
}

/// How a fleet is run: how many nodes, how many may fail, and the utilization cap of each
/// node in normal operation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Policy {
    nodes: u32,
    failures: u32,
    cap: f64,
}

/// A [`Policy`] that cannot serve anything.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("--failures {failures} leaves no node of --nodes {nodes}")]
    NoSurvivor { nodes: u32, failures: u32 },
    #[error("--nodes must be 1 to {MAX_NODES}")]
    Nodes,
    #[error("--cap must be above 0 and at most 1")]
    Cap,
}

impl Policy {
    /// The seeds' policy: three nodes, one may fail, each at most at 66%.
    pub const SEEDS: Policy = Policy {
        nodes: 3,
        failures: 1,
        cap: 0.66,
    };

    pub fn new(nodes: u32, failures: u32, cap: f64) -> Result<Policy, PolicyError> {
        if nodes == 0 || nodes > MAX_NODES {
            return Err(PolicyError::Nodes);
        }
        if failures >= nodes {
            return Err(PolicyError::NoSurvivor { nodes, failures });
        }
        if !(cap > 0.0 && cap <= 1.0) {
            return Err(PolicyError::Cap);
        }
        Ok(Policy {
            nodes,
            failures,
            cap,
        })
    }

    pub fn nodes(&self) -> u32 {
        self.nodes
    }

    pub fn failures(&self) -> u32 {
        self.failures
    }

    pub fn cap(&self) -> f64 {
        self.cap
    }

    /// Whether `nodes` instances of `max_rps` each serve `target` under this policy's cap
    /// and failures: `nodes * cap * max_rps >= target` (the seeds' rule) and
    /// `(nodes - failures) * max_rps >= target` (the survivors at most at their maximum).
    pub fn serves(&self, nodes: u32, max_rps: f64, target: f64) -> bool {
        if nodes <= self.failures {
            return false;
        }
        let normal = f64::from(nodes) * self.cap * max_rps;
        let degraded = f64::from(nodes - self.failures) * max_rps;
        meets(normal, target) && meets(degraded, target)
    }
}

fn meets(capacity: f64, target: f64) -> bool {
    capacity >= target * (1.0 - ROUNDING)
}

/// A fleet: `nodes` instances of one type.
#[derive(Debug, Clone, PartialEq)]
pub struct Fleet {
    /// Index into the instances the fleet was chosen from.
    pub instance: usize,
    pub nodes: u32,
    pub usd_per_hour: f64,
}

/// One row of a price table: a target and, per family, its cheapest fleet.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub target: f64,
    /// `None` where no size of the family serves the target.
    pub fleets: Vec<Option<Fleet>>,
    /// Families (indices into [`PriceTable::families`]) whose fleet is the row's cheapest;
    /// more than one on a tie.
    pub cheapest: Vec<usize>,
}

/// The seeds' price table: targets down, families across.
#[derive(Debug, Clone, PartialEq)]
pub struct PriceTable {
    /// Families in the order their first instance appears.
    pub families: Vec<String>,
    pub rows: Vec<Row>,
}

/// Which node counts a price table may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nodes {
    /// The policy's node count, as the seeds do.
    Fixed,
    /// Any count the policy allows; the cheapest wins.
    Optimized,
}

/// Families of `instances`, in order of first appearance.
pub fn families(instances: &[Instance]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for i in instances {
        if !out.iter().any(|f| f == i.family()) {
            out.push(i.family().to_owned());
        }
    }
    out
}

/// The cheapest fleet of `family` for `target`. With [`Nodes::Fixed`] every size is tried
/// at the policy's node count; with [`Nodes::Optimized`] each size at the fewest nodes that
/// serve the target. On equal price the fleet with fewer nodes wins, then the one with more
/// capacity (the same money buys more headroom), then the first listed.
pub fn cheapest(
    instances: &[Instance],
    family: &str,
    policy: &Policy,
    nodes: Nodes,
    target: f64,
) -> Option<Fleet> {
    let mut best: Option<(Fleet, f64)> = None;
    for (index, instance) in instances
        .iter()
        .enumerate()
        .filter(|(_, i)| i.family() == family)
    {
        let count = match nodes {
            Nodes::Fixed => {
                Some(policy.nodes).filter(|&n| policy.serves(n, instance.max_rps, target))
            }
            Nodes::Optimized => (policy.failures + 1..=MAX_NODES)
                .find(|&n| policy.serves(n, instance.max_rps, target)),
        };
        let Some(count) = count else { continue };
        let fleet = Fleet {
            instance: index,
            nodes: count,
            usd_per_hour: f64::from(count) * instance.usd_per_hour,
        };
        let capacity = f64::from(count) * instance.max_rps;
        let better = match &best {
            None => true,
            Some((b, b_capacity)) => {
                if !same_price(fleet.usd_per_hour, b.usd_per_hour) {
                    fleet.usd_per_hour < b.usd_per_hour
                } else if fleet.nodes != b.nodes {
                    fleet.nodes < b.nodes
                } else {
                    capacity > *b_capacity
                }
            }
        };
        if better {
            best = Some((fleet, capacity));
        }
    }
    best.map(|(fleet, _)| fleet)
}

/// The price table for `targets`: per target and family, the cheapest fleet.
pub fn price_table(
    instances: &[Instance],
    policy: &Policy,
    nodes: Nodes,
    targets: &[f64],
) -> PriceTable {
    let families = families(instances);
    let rows = targets
        .iter()
        .map(|&target| {
            let fleets: Vec<Option<Fleet>> = families
                .iter()
                .map(|f| cheapest(instances, f, policy, nodes, target))
                .collect();
            let low = fleets
                .iter()
                .flatten()
                .map(|f| f.usd_per_hour)
                .fold(f64::INFINITY, f64::min);
            let cheapest = fleets
                .iter()
                .enumerate()
                .filter(|(_, f)| f.as_ref().is_some_and(|f| same_price(f.usd_per_hour, low)))
                .map(|(i, _)| i)
                .collect();
            Row {
                target,
                fleets,
                cheapest,
            }
        })
        .collect();
    PriceTable { families, rows }
}

/// Prices equal to a hundredth of a cent: sums of catalog prices carry binary rounding.
fn same_price(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-6
}

#[cfg(test)]
mod tests {
    use super::*;

    fn instance(name: &str, max_rps: f64, usd: f64) -> Instance {
        Instance {
            name: name.to_owned(),
            vcpus: 2,
            max_rps,
            ssl_tps: None,
            usd_per_hour: usd,
        }
    }

    fn sample() -> Vec<Instance> {
        vec![
            instance("a.large", 10_000.0, 0.05),
            instance("a.xlarge", 20_000.0, 0.10),
            instance("b.large", 30_000.0, 0.09),
            instance("b.xlarge", 60_000.0, 0.18),
        ]
    }

    #[test]
    fn seeds_rule_is_nodes_times_cap() {
        let p = Policy::SEEDS;
        // 3 * 0.66 * 10_000 = 19_800.
        assert!(p.serves(3, 10_000.0, 19_800.0));
        assert!(!p.serves(3, 10_000.0, 19_801.0));
        // The rounding of 0.66 does not lose an exact fit.
        assert!(p.serves(3, 16_089.0, 3.0 * 0.66 * 16_089.0));
    }

    #[test]
    fn failures_bind_when_the_cap_is_loose() {
        // Cap 100%: three nodes carry 3x in normal operation, but two survivors only 2x.
        let p = Policy::new(3, 1, 1.0).unwrap();
        assert!(p.serves(3, 10_000.0, 20_000.0));
        assert!(!p.serves(3, 10_000.0, 20_001.0));
        let p = Policy::new(4, 2, 1.0).unwrap();
        assert!(!p.serves(4, 10_000.0, 20_001.0));
        assert!(!p.serves(2, 10_000.0, 1.0));
    }

    #[test]
    fn invalid_policies() {
        assert_eq!(
            Policy::new(2, 2, 0.5),
            Err(PolicyError::NoSurvivor {
                nodes: 2,
                failures: 2
            })
        );
        assert_eq!(Policy::new(0, 0, 0.5), Err(PolicyError::Nodes));
        assert_eq!(Policy::new(3, 1, 0.0), Err(PolicyError::Cap));
        assert_eq!(Policy::new(3, 1, 1.5), Err(PolicyError::Cap));
        assert_eq!(Policy::new(3, 1, f64::NAN), Err(PolicyError::Cap));
    }

    #[test]
    fn cheapest_size_per_family_and_row() {
        let t = price_table(
            &sample(),
            &Policy::SEEDS,
            Nodes::Fixed,
            &[10_000.0, 30_000.0],
        );
        assert_eq!(t.families, ["a", "b"]);
        let row = &t.rows[0];
        assert_eq!(row.fleets[0].as_ref().unwrap().instance, 0);
        assert!((row.fleets[0].as_ref().unwrap().usd_per_hour - 0.15).abs() < 1e-12);
        assert_eq!(row.cheapest, [0]);
        // 30_000 needs a.xlarge (39_600) at 0.30 against b.large (59_400) at 0.27.
        let row = &t.rows[1];
        assert_eq!(row.fleets[0].as_ref().unwrap().instance, 1);
        assert_eq!(row.cheapest, [1]);
    }

    #[test]
    fn no_size_fits() {
        let t = price_table(&sample(), &Policy::SEEDS, Nodes::Fixed, &[50_000.0, 1e9]);
        assert_eq!(t.rows[0].fleets[0], None);
        assert!(t.rows[0].fleets[1].is_some());
        assert_eq!(t.rows[0].cheapest, [1]);
        assert_eq!(t.rows[1].fleets, [None, None]);
        assert!(t.rows[1].cheapest.is_empty());
    }

    #[test]
    fn ties_mark_every_cheapest_family_and_prefer_headroom() {
        let same = vec![
            instance("a.large", 10_000.0, 0.1),
            instance("b.large", 12_000.0, 0.1),
        ];
        let t = price_table(&same, &Policy::SEEDS, Nodes::Fixed, &[1_000.0]);
        assert_eq!(t.rows[0].cheapest, [0, 1]);
        let within = vec![
            instance("a.one", 10_000.0, 0.1),
            instance("a.two", 12_000.0, 0.1),
        ];
        let fleet = cheapest(&within, "a", &Policy::SEEDS, Nodes::Fixed, 1_000.0).unwrap();
        assert_eq!(fleet.instance, 1);
    }

    #[test]
    fn optimizer_prefers_fewer_nodes_on_a_tie() {
        // One failure at 66%: three large (0.15) beat two xlarge (0.20).
        let fleet = cheapest(&sample(), "a", &Policy::SEEDS, Nodes::Optimized, 12_000.0).unwrap();
        assert_eq!((fleet.instance, fleet.nodes), (0, 3));
        // No failure at 100%: two large and one xlarge both cost 0.10 for 20_000.
        let p = Policy::new(1, 0, 1.0).unwrap();
        let fleet = cheapest(&sample(), "a", &p, Nodes::Optimized, 20_000.0).unwrap();
        assert_eq!((fleet.instance, fleet.nodes), (1, 1));
    }

    #[test]
    fn optimizer_never_costs_more_and_survives_failures() {
        let instances = sample();
        for failures in 0..3 {
            for nodes in failures + 1..failures + 4 {
                for cap in [0.5, 0.66, 0.8, 1.0] {
                    let policy = Policy::new(nodes, failures, cap).unwrap();
                    for step in 1..200 {
                        let target = f64::from(step) * 1_500.0;
                        for family in ["a", "b"] {
                            let best =
                                cheapest(&instances, family, &policy, Nodes::Optimized, target);
                            let fixed = cheapest(&instances, family, &policy, Nodes::Fixed, target);
                            if let Some(fixed) = &fixed {
                                let best = best
                                    .as_ref()
                                    .expect("a fixed fleet exists, so an optimized one does");
                                assert!(best.usd_per_hour <= fixed.usd_per_hour + 1e-9);
                            }
                            if let Some(best) = best {
                                let max = instances[best.instance].max_rps;
                                let survivors = f64::from(best.nodes - failures);
                                assert!(
                                    survivors * max >= target * (1.0 - 1e-9),
                                    "{best:?} at {target}"
                                );
                                assert!(f64::from(best.nodes) * cap * max >= target * (1.0 - 1e-9));
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn optimizer_gives_up_past_max_nodes() {
        let tiny = vec![instance("a.nano", 1.0, 0.01)];
        assert_eq!(
            cheapest(&tiny, "a", &Policy::SEEDS, Nodes::Optimized, 10_000.0),
            None
        );
        assert!(cheapest(&tiny, "a", &Policy::SEEDS, Nodes::Optimized, 100.0).is_some());
    }
}
