//! portcullis as a Kubernetes ingress controller: what the cluster says (Ingress,
//! IngressClass, Service, EndpointSlice and TLS Secret objects) made into the nginx.conf text
//! the server runs.
//!
//! - `annotations`: what an Ingress's annotations ask, under both nginx controllers' names;
//! - `gateway`: Gateway API v1's GatewayClasses, Gateways and HTTPRoutes, and their status;
//! - `translate`: the configuration of a set of objects, and the Ingresses that could not be
//!   applied with the reason, while every other one still is;
//! - the binary (`main.rs`): the watches, the server they drive, Events and status.

mod annotations;
mod cluster;
pub mod gateway;
pub mod translate;

pub use cluster::{Cluster, Settings};
pub use translate::{loadable, translate, Generated, Problem};

/// The controller's ConfigMap's data as the defaults of every Ingress's annotations; an
/// error says which key refuses it.
pub fn config_map(
    data: &std::collections::BTreeMap<String, String>,
    snippets: bool,
) -> Result<std::collections::BTreeMap<String, String>, String> {
    annotations::defaults(data, snippets)
}
