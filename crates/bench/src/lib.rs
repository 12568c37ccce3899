//! portcullis-bench: the seeds' test rig and sizing model.
//!
//! `size` turns measured maximum RPS per instance type (the seeds' per-instance tables, or
//! a worker sweep written by `run`) and an instance catalog into the seeds' price tables:
//! for each target load and instance family, the cheapest fleet that serves it with N+k
//! redundancy.
//!
//! - [`data`]: the measured-instances and catalog CSV files;
//! - [`run`]: the measurement record [`RunRecord`] and the estimate made from a sweep;
//! - [`model`]: the sizing rule ([`Policy`]) and the price table;
//! - [`size`]: the report `size` prints;
//! - [`report`]: tables rendered as text, CSV, Markdown or HTML.

pub mod data;
pub mod model;
pub mod report;
pub mod run;
pub mod size;

pub use data::{parse_catalog, parse_measured, DataError, Measured, Priced};
pub use model::{price_table, Fleet, Instance, Nodes, Policy, PolicyError, PriceTable};
pub use report::{Format, Report};
pub use run::{RunRecord, Sweep};

/// The catalog shipped with the crate: every instance type priced in the seeds.
pub const SEEDS_CATALOG: &str = include_str!("../data/catalog-seeds.csv");
