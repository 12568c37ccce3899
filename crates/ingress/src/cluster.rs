//! What the Ingress and the Gateway API translations share: the objects the controller
//! watches and how it runs, a Service's endpoints, a Secret's certificate, the order of
//! objects, and the words of nginx.conf they write.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// The label that names an EndpointSlice's Service.
pub(crate) const SERVICE_NAME: &str = "kubernetes.io/service-name";
/// The size of each group's zone: NGINX Ingress Controller's.
pub(crate) const ZONE_SIZE: &str = "256k";

/// The objects the controller watches, as they are now.
#[derive(Debug, Default, Clone)]
pub struct Cluster {
    pub ingresses: Vec<Ingress>,
    pub classes: Vec<IngressClass>,
    pub services: Vec<Service>,
    pub slices: Vec<EndpointSlice>,
    pub secrets: Vec<Secret>,
    pub gateway_classes: Vec<crate::gateway::objects::GatewayClass>,
    pub gateways: Vec<crate::gateway::objects::Gateway>,
    pub routes: Vec<crate::gateway::objects::HttpRoute>,
    pub grants: Vec<crate::gateway::objects::ReferenceGrant>,
    /// Namespaces, for the labels listeners select routes' namespaces by.
    pub namespaces: Vec<k8s_openapi::api::core::v1::Namespace>,
}

/// How the controller runs.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `spec.controller` of the IngressClasses that are this controller's.
    pub controller: String,
    /// The class the legacy annotation names.
    pub class: String,
    pub http_port: u16,
    pub https_port: u16,
    /// Where certificates and keys from Secrets are written.
    pub files: PathBuf,
    /// The default server's certificate and key.
    pub default_certificate: (PathBuf, PathBuf),
    /// What every Ingress has unless its annotations say otherwise (the controller's
    /// ConfigMap, as `nginx.org/` annotations).
    pub defaults: BTreeMap<String, String>,
    /// `spec.controllerName` of the GatewayClasses that are this controller's.
    pub gateway_controller: String,
    /// What Gateways' status gives as their address.
    pub status_address: Option<String>,
    /// Snippets of raw configuration in annotations and the ConfigMap are applied (the
    /// operator's `--enable-snippets`); off, they refuse what has them.
    pub snippets: bool,
    /// Where the probes answer (0: nowhere): no listener may take it.
    pub health_port: u16,
}

/// A Service's port (by name, else number) and its ready endpoints on it, from its
/// EndpointSlices (the slice port of the service port's name).
pub(crate) fn service_servers(
    cluster: &Cluster,
    namespace: &str,
    service: &str,
    port_name: Option<&str>,
    port_number: Option<i32>,
) -> Result<(i32, Vec<String>), String> {
    let Some(svc) = (cluster.services.iter()).find(|s| {
        s.metadata.name.as_deref() == Some(service)
            && s.metadata.namespace.as_deref() == Some(namespace)
    }) else {
        return Err(format!("service \"{namespace}/{service}\" not found"));
    };
    let ports = svc.spec.iter().flat_map(|s| s.ports.iter().flatten());
    let Some(port) = ports.clone().find(|p| match (port_name, port_number) {
        (Some(name), _) => p.name.as_deref() == Some(name),
        (None, Some(n)) => p.port == n,
        (None, None) => false,
    }) else {
        let wanted = port_name.map_or_else(
            || port_number.map_or("given".into(), |n| n.to_string()),
            str::to_owned,
        );
        return Err(format!(
            "service \"{namespace}/{service}\" has no port {wanted}"
        ));
    };
    let mut servers = BTreeSet::new();
    for slice in cluster.slices.iter().filter(|s| {
        s.metadata.namespace.as_deref() == Some(namespace)
            && (s.metadata.labels.as_ref())
                .and_then(|l| l.get(SERVICE_NAME))
                .is_some_and(|n| n == service)
    }) {
        // The slice's port of the same name as the Service's (both unnamed for one port:
        // the API gives a slice's unnamed port the name "").
        let unnamed = |name: &Option<String>| name.clone().unwrap_or_default();
        let Some(target) = (slice.ports.iter().flatten())
            .find(|p| unnamed(&p.name) == unnamed(&port.name))
            .and_then(|p| p.port)
        else {
            continue;
        };
        for endpoint in &slice.endpoints {
            let ready = endpoint.conditions.as_ref().and_then(|c| c.ready);
            if ready == Some(false) {
                continue;
            }
            for address in &endpoint.addresses {
                let Ok(ip) = address.parse::<std::net::IpAddr>() else {
                    continue;
                };
                servers.insert(std::net::SocketAddr::new(ip, target_port(target)).to_string());
            }
        }
    }
    Ok((port.port, servers.into_iter().collect()))
}

pub(crate) fn target_port(port: i32) -> u16 {
    u16::try_from(port).unwrap_or(0)
}

/// A TLS Secret's certificate and key, as files: their paths, and the files to write.
#[allow(clippy::type_complexity)]
pub(crate) fn certificate(
    cluster: &Cluster,
    namespace: &str,
    secret: &str,
    settings: &Settings,
) -> Result<((PathBuf, PathBuf), Vec<(PathBuf, Vec<u8>)>), String> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let Some(found) = (cluster.secrets.iter()).find(|s| {
        s.metadata.name.as_deref() == Some(secret)
            && s.metadata.namespace.as_deref() == Some(namespace)
    }) else {
        return Err(format!("secret \"{namespace}/{secret}\" not found"));
    };
    let data = found.data.as_ref();
    let get = |key: &str| data.and_then(|d| d.get(key)).map(|b| b.0.clone());
    let (Some(cert), Some(key)) = (get("tls.crt"), get("tls.key")) else {
        return Err(format!(
            "secret \"{namespace}/{secret}\" has no tls.crt and tls.key"
        ));
    };
    let certs = CertificateDer::pem_slice_iter(&cert).collect::<Result<Vec<_>, _>>();
    if !certs.is_ok_and(|c| !c.is_empty()) || PrivateKeyDer::from_pem_slice(&key).is_err() {
        return Err(format!(
            "secret \"{namespace}/{secret}\" is not a PEM certificate and key"
        ));
    }
    // A key that is not the certificate's would refuse the whole configuration: checked
    // here as the server will, so that only what names the Secret is refused.
    if let Err(why) = pair_checked(&settings.files, &cert, &key) {
        return Err(format!("secret \"{namespace}/{secret}\": {why}"));
    }
    // `_` is in no Kubernetes name: no two Secrets share a file.
    let crt = settings.files.join(format!("{namespace}_{secret}.crt"));
    let pem = settings.files.join(format!("{namespace}_{secret}.key"));
    Ok(((crt.clone(), pem.clone()), vec![(crt, cert), (pem, key)]))
}

/// [`pair_loads`], asked once per certificate and key: the configuration is made again on
/// every change the controller sees (an endpoint moved), and a Secret's bytes seldom change.
fn pair_checked(files: &Path, cert: &[u8], key: &[u8]) -> Result<(), String> {
    use std::collections::HashMap;
    use std::sync::{Mutex, PoisonError};
    type Checked = HashMap<(Vec<u8>, Vec<u8>), Result<(), String>>;
    static CHECKED: Mutex<Option<Checked>> = Mutex::new(None);
    let pair = (cert.to_vec(), key.to_vec());
    let mut checked = CHECKED.lock().unwrap_or_else(PoisonError::into_inner);
    let checked = checked.get_or_insert_with(HashMap::new);
    if let Some(known) = checked.get(&pair) {
        return known.clone();
    }
    // Secrets replaced over time: the old pairs go in a while.
    if checked.len() >= 4096 {
        checked.clear();
    }
    let result = pair_loads(files, cert, key);
    checked.insert(pair, result.clone());
    result
}

/// Whether the server loads a certificate chain and key, as it reads them from files: written
/// for the check in a directory of their own under `files` (where the Secrets' files go),
/// which only the controller's user may read, and removed after.
fn pair_loads(files: &Path, cert: &[u8], key: &[u8]) -> Result<(), String> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let dir = files.join(format!(
        ".check-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let (crt, pem) = (dir.join("tls.crt"), dir.join("tls.key"));
    let private = |path: &Path, bytes: &[u8]| {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)?;
        f.write_all(bytes)
    };
    let written = std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .and_then(|()| private(&crt, cert))
        .and_then(|()| private(&pem, key));
    let loaded = match written {
        // Named in the message by the Secret's keys, not the files of the check.
        Ok(()) => portcullis_tls::load_certified_key(&crt, &pem, &[])
            .map(drop)
            .map_err(|e| {
                (e.to_string())
                    .replace(&crt.display().to_string(), "tls.crt")
                    .replace(&pem.display().to_string(), "tls.key")
            }),
        Err(e) => Err(format!("cannot check it: {e}")),
    };
    let _ = std::fs::remove_dir_all(&dir);
    loaded
}

/// What orders two Ingresses: creation time, then namespace and name.
pub(crate) fn age(m: &ObjectMeta) -> (Option<k8s_openapi::jiff::Timestamp>, String, String) {
    let created = m.creation_timestamp.as_ref().map(|t| t.0);
    let (namespace, name) = names(m);
    (created, namespace, name)
}

pub(crate) fn names(m: &ObjectMeta) -> (String, String) {
    (
        m.namespace.clone().unwrap_or_else(|| "default".into()),
        m.name.clone().unwrap_or_default(),
    )
}

/// A DNS name of lowercase labels, the first of which may be `*`.
pub(crate) fn valid_host(host: &str) -> bool {
    let rest = host.strip_prefix("*.").unwrap_or(host);
    !rest.is_empty()
        && host.len() <= 253
        && rest.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

pub(crate) fn upstream_block(out: &mut String, name: &str, conf: &str, servers: &[String]) {
    let _ = writeln!(
        out,
        "upstream {name} {{\n    zone {name} {ZONE_SIZE};{conf}"
    );
    if servers.is_empty() {
        // No endpoint: every request is answered 502, "no live upstreams".
        out.push_str("    server 127.0.0.1:8181 down;\n");
    }
    for s in servers {
        let _ = writeln!(out, "    server {s};");
    }
    out.push_str("}\n");
}

/// Whether a user's regular expression compiles and names no capture: a named capture is a
/// variable of the request, which would hide the built-in of its name (`$host`) from every
/// other rule, limit and log of the server.
pub(crate) fn plain_regex(pattern: &str) -> bool {
    regex::Regex::new(pattern).is_ok_and(|re| re.capture_names().all(|n| n.is_none()))
}

/// The headers every proxied location sets, as NGINX Ingress Controller's template does.
pub(crate) const PROXY_HEADERS: [(&str, &str); 6] = [
    ("Host", "$host"),
    ("X-Real-IP", "$remote_addr"),
    ("X-Forwarded-For", "$proxy_add_x_forwarded_for"),
    ("X-Forwarded-Host", "$host"),
    ("X-Forwarded-Port", "$server_port"),
    ("X-Forwarded-Proto", "$scheme"),
];

/// A word of nginx.conf in double quotes, its quotes and backslashes escaped.
pub(crate) fn quote(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// Printable ASCII and spaces: what a value may hold to be written as it is.
pub(crate) fn printable(s: &str) -> bool {
    s.bytes().all(|b| b == b' ' || b.is_ascii_graphic())
}

/// A path that is one word of nginx.conf: it begins with `/` and has no space, quote,
/// `;`, brace, `#`, backslash or `$` (a variable in nginx's text).
pub(crate) fn plain_path(p: &str) -> bool {
    p.starts_with('/')
        && p.chars().all(|c| {
            c.is_ascii_graphic() && !matches!(c, '"' | '\'' | ';' | '{' | '}' | '$' | '#' | '\\')
        })
}

/// The rewrites that replace `prefix` (after `strip`) with `to`, element-wise: `/foo` to
/// `/bar` makes `/foo` `/bar` and `/foo/x` `/bar/x`.
pub(crate) fn prefix_rewrites(strip: &str, prefix: &str, to: &str) -> Vec<(String, String)> {
    let strip = regex::escape(strip);
    let to_trimmed = to.trim_end_matches('/');
    if prefix == "/" {
        return vec![(format!("(?s)^{strip}(/.*)$"), format!("{to_trimmed}$1"))];
    }
    let p = regex::escape(prefix);
    vec![
        (
            format!("(?s)^{strip}{p}$"),
            if to.is_empty() {
                "/".into()
            } else {
                to.to_owned()
            },
        ),
        (format!("(?s)^{strip}{p}(/.*)$"), format!("{to_trimmed}$1")),
    ]
}
