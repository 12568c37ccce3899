//! portcullis-bench: the seeds' test rig and sizing model.
//!
//! `size` turns measured maximum RPS per instance type (the seeds' per-instance tables, or
//! a worker sweep written by `run`) and an instance catalog into the seeds' price tables:
//! for each target load and instance family, the cheapest fleet that serves it with N+k
//! redundancy.
//!
//! `run` reproduces the seeds' measurements on one machine: each scenario generates one
//! nginx.conf that nginx and portcullis both run (and an equivalent haproxy.cfg where HAProxy
//! can do the work), upstream nginx file servers and wrk are pinned away from the system
//! under test, and the CPU time the system spent is divided by the requests wrk completed.
//!
//! - [`scenario`]: the seeds' scenarios and the configs each generates;
//! - [`assets`]: docroot files, certificates, JWT keys and tokens;
//! - [`rig`]: starting, loading and measuring the systems ([`procfs`] reads their CPU time,
//!   [`wrk`] parses the load generator's report);
//! - [`results`]: summaries (medians and spread by [`stats`]), CSV and the HTML report;
//! - [`data`]: the measured-instances and catalog CSV files;
//! - [`run`]: the measurement record [`RunRecord`] and the estimate made from a sweep;
//! - [`model`]: the sizing rule ([`Policy`]) and the price table;
//! - [`size`]: the report `size` prints;
//! - [`report`]: tables rendered as text, CSV, Markdown or HTML.

pub mod assets;
pub mod charts;
pub mod data;
pub mod floor;
pub mod ingress;
pub mod model;
pub mod procfs;
pub mod report;
pub mod results;
pub mod rig;
pub mod run;
pub mod scenario;
pub mod size;
pub mod stats;
pub mod wrk;

pub use data::{parse_catalog, parse_measured, DataError, Measured, Priced};
pub use model::{price_table, Fleet, Instance, Nodes, Policy, PolicyError, PriceTable};
pub use report::{Format, Report};
pub use rig::{Kind, Plan, System};
pub use run::{RunRecord, Sweep};
pub use scenario::{Scenario, SCENARIOS};

/// The catalog shipped with the crate: every instance type priced in the seeds.
pub const SEEDS_CATALOG: &str = include_str!("../data/catalog-seeds.csv");
