//! The Gateway API kinds, as far as the controller reads them.

use std::path::PathBuf;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;
use serde_json::Value;

/// The API group of every Gateway API kind.
pub const GROUP: &str = "gateway.networking.k8s.io";

/// An object of a Gateway API kind: what the controller reads of it.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, bound(deserialize = "S: Deserialize<'de> + Default"))]
pub struct Object<S> {
    pub metadata: ObjectMeta,
    pub spec: S,
    /// As it is now: the controller writes it again only when it should say something else.
    pub status: Option<Value>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct GatewayClassSpec {
    pub controller_name: String,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct GatewaySpec {
    pub gateway_class_name: String,
    pub listeners: Vec<Listener>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Listener {
    pub name: String,
    pub hostname: Option<String>,
    pub port: i32,
    pub protocol: String,
    pub tls: Option<ListenerTls>,
    pub allowed_routes: Option<AllowedRoutes>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ListenerTls {
    pub mode: Option<String>,
    pub certificate_refs: Vec<Reference>,
}

/// A reference to another object (`certificateRefs`, `backendRefs`, `parentRefs`).
#[derive(Debug, Clone, Default, Deserialize, serde::Serialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct Reference {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub section_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
    #[serde(skip_serializing)]
    pub weight: Option<i32>,
    #[serde(skip_serializing)]
    pub filters: Vec<Filter>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct AllowedRoutes {
    pub namespaces: Option<RouteNamespaces>,
    pub kinds: Vec<Reference>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct RouteNamespaces {
    pub from: Option<String>,
    /// With `from: Selector`: the labels of the namespaces whose routes may attach.
    pub selector: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct HttpRouteSpec {
    pub parent_refs: Vec<Reference>,
    pub hostnames: Vec<String>,
    pub rules: Vec<Rule>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Rule {
    pub matches: Vec<RouteMatch>,
    pub filters: Vec<Filter>,
    pub backend_refs: Vec<Reference>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct RouteMatch {
    pub path: Option<PathMatch>,
    pub headers: Vec<ValueMatch>,
    pub query_params: Vec<ValueMatch>,
    pub method: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct PathMatch {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub value: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct ValueMatch {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub name: String,
    pub value: String,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct Filter {
    #[serde(rename = "type")]
    pub kind: String,
    pub request_header_modifier: Option<HeaderModifier>,
    pub response_header_modifier: Option<HeaderModifier>,
    pub request_redirect: Option<Redirect>,
    #[serde(rename = "urlRewrite")]
    pub url_rewrite: Option<Redirect>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct HeaderModifier {
    pub set: Vec<Header>,
    pub add: Vec<Header>,
    pub remove: Vec<String>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct Header {
    pub name: String,
    pub value: String,
}

/// `requestRedirect` and `urlRewrite` (which has only `hostname` and `path`).
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct Redirect {
    pub scheme: Option<String>,
    pub hostname: Option<String>,
    pub path: Option<PathModifier>,
    pub port: Option<i32>,
    pub status_code: Option<i32>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct PathModifier {
    #[serde(rename = "type")]
    pub kind: String,
    pub replace_full_path: Option<String>,
    pub replace_prefix_match: Option<String>,
}

/// A ReferenceGrant (`v1beta1`): in its namespace, the objects `to` may be named by the
/// kinds and namespaces `from`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct ReferenceGrantSpec {
    pub from: Vec<GrantFrom>,
    pub to: Vec<GrantTo>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct GrantFrom {
    pub group: String,
    pub kind: String,
    pub namespace: String,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct GrantTo {
    pub group: String,
    pub kind: String,
    pub name: Option<String>,
}

pub type ReferenceGrant = Object<ReferenceGrantSpec>;

/// Whether a ReferenceGrant of `to_namespace` lets a `from_kind` of the Gateway API in
/// `from_namespace` name the core object `to_kind` called `to_name` there.
pub fn granted(
    grants: &[ReferenceGrant],
    (from_kind, from_namespace): (&str, &str),
    (to_kind, to_namespace, to_name): (&str, &str, &str),
) -> bool {
    grants.iter().any(|g| {
        g.metadata.namespace.as_deref() == Some(to_namespace)
            && (g.spec.from.iter())
                .any(|f| f.group == GROUP && f.kind == from_kind && f.namespace == from_namespace)
            && (g.spec.to.iter()).any(|t| {
                t.group.is_empty()
                    && t.kind == to_kind
                    && t.name.as_deref().is_none_or(|n| n == to_name)
            })
    })
}

pub type GatewayClass = Object<GatewayClassSpec>;
pub type Gateway = Object<GatewaySpec>;
pub type HttpRoute = Object<HttpRouteSpec>;

/// The status an object should have: written when it differs from the one it has.
#[derive(Debug, Clone, PartialEq)]
pub struct Status {
    /// `GatewayClass`, `Gateway` or `HTTPRoute`.
    pub kind: &'static str,
    /// Empty for a GatewayClass (cluster-wide).
    pub namespace: String,
    pub name: String,
    pub status: Value,
}

/// The locations a Gateway's listener for every host of an Ingress port puts in that
/// port's default server, and its certificate.
pub type CatchAll = (String, Option<(PathBuf, PathBuf)>);
