//! Seed 003's ingress controller: one Ingress for `cafe.example.com` whose path `/` goes to a
//! Service with three endpoints (the upstream file servers), with TLS for the SSL TPS run.
//! Each system runs what its ingress controller makes of that Ingress: portcullis the
//! configuration `portcullis-ingress` generates (its own translation, called here), nginx
//! the one NGINX Ingress Controller's template generates with its defaults. Both get the
//! bench's main and `http` settings (access logs off), and the seed's TLS 1.2 cipher.

use std::fmt::Write;
use std::path::PathBuf;

use portcullis_ingress::{translate, Cluster, Settings};
use serde_json::json;

/// The Ingress's host: the `Host` the load sends.
pub const HOST: &str = "cafe.example.com";
const NAMESPACE: &str = "default";
const INGRESS: &str = "cafe-ingress";
const SERVICE: &str = "coffee-svc";

/// Where the controller serves from: the work directory, the RSA certificate and key (of
/// the default server and the Ingress's TLS), its ports, and the three backends' ports.
#[derive(Debug, Clone)]
pub struct Site {
    pub dir: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
    pub http_port: u16,
    pub https_port: u16,
    pub backends: [u16; 3],
}

/// The `http` block's contents `portcullis-ingress` generates for the Ingress; the
/// certificate files it names are written under `layout`'s directory.
pub fn portcullis_http(site: &Site, tls: bool) -> anyhow::Result<String> {
    let crt = std::fs::read(&site.cert)?;
    let key = std::fs::read(&site.key)?;
    let bytes = |b: &[u8]| serde_json::to_value(k8s_openapi::ByteString(b.to_vec()));
    let mut cluster = Cluster::default();
    cluster.classes.push(serde_json::from_value(json!({
        "metadata": {"name": "portcullis",
                     "annotations": {"ingressclass.kubernetes.io/is-default-class": "true"}},
        "spec": {"controller": "portcullis.dev/ingress-controller"},
    }))?);
    cluster.services.push(serde_json::from_value(json!({
        "metadata": {"name": SERVICE, "namespace": NAMESPACE},
        "spec": {"ports": [{"port": 80, "targetPort": 8080}]},
    }))?);
    // One slice per backend: each listens on a port of its own here, where pods share one.
    for (i, port) in site.backends.into_iter().enumerate() {
        cluster.slices.push(serde_json::from_value(json!({
            "metadata": {"name": format!("{SERVICE}-{i}"), "namespace": NAMESPACE,
                         "labels": {"kubernetes.io/service-name": SERVICE}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": true}}],
            "ports": [{"name": "", "port": port}],
        }))?);
    }
    cluster.secrets.push(serde_json::from_value(json!({
        "metadata": {"name": "cafe-secret", "namespace": NAMESPACE},
        "type": "kubernetes.io/tls",
        "data": {"tls.crt": bytes(&crt)?, "tls.key": bytes(&key)?},
    }))?);
    let mut spec = json!({"rules": [{"host": HOST, "http": {"paths": [{
        "path": "/", "pathType": "Prefix",
        "backend": {"service": {"name": SERVICE, "port": {"number": 80}}},
    }]}}]});
    if tls {
        spec["tls"] = json!([{"hosts": [HOST], "secretName": "cafe-secret"}]);
    }
    cluster.ingresses.push(serde_json::from_value(json!({
        "metadata": {"name": INGRESS, "namespace": NAMESPACE},
        "spec": spec,
    }))?);
    let files = site.dir.join("ingress");
    std::fs::create_dir_all(&files)?;
    let settings = Settings {
        controller: "portcullis.dev/ingress-controller".into(),
        class: "portcullis".into(),
        http_port: site.http_port,
        https_port: site.https_port,
        files: files.clone(),
        default_certificate: (site.cert.clone(), site.key.clone()),
        defaults: Default::default(),
        gateway_controller: "portcullis.dev/gateway-controller".into(),
        status_address: None,
        snippets: false,
        health_port: 0,
    };
    let generated = translate(&cluster, &settings);
    if let Some(p) = generated.problems.first() {
        anyhow::bail!("the bench's Ingress was not applied: {}", p.reason);
    }
    for (path, bytes) in &generated.files {
        std::fs::write(path, bytes)?;
    }
    Ok(generated.http)
}

/// The `http` block's contents NGINX Ingress Controller's template (`nginx.ingress.tmpl`,
/// and the default server of `nginx.tmpl`) generates for the Ingress with its ConfigMap's
/// defaults: its upstream group's zone, balancer and server parameters, its locations'
/// timeouts, headers, buffering and retries.
pub fn nginx_http(site: &Site, tls: bool) -> String {
    let (http_port, https_port) = (site.http_port, site.https_port);
    let (crt, key) = (site.cert.display(), site.key.display());
    let group = format!("{NAMESPACE}-{INGRESS}-{HOST}-{SERVICE}-80");
    let mut out = format!(
        "\n    upstream {group} {{\n        zone {group} 256k;\n        random two least_conn;\n"
    );
    for port in site.backends {
        let _ = writeln!(
            out,
            "        server 127.0.0.1:{port} max_fails=1 fail_timeout=10s max_conns=0;"
        );
    }
    let _ = write!(
        out,
        "    }}

    server {{
        listen {http_port} default_server;
        listen {https_port} ssl default_server;
        ssl_certificate {crt};
        ssl_certificate_key {key};
        server_name _;
        server_tokens on;
        location / {{
            return 404;
        }}
    }}

    server {{
        listen {http_port};
"
    );
    if tls {
        let _ = write!(
            out,
            "        listen {https_port} ssl;
        ssl_certificate {crt};
        ssl_certificate_key {key};
"
        );
    }
    let _ = write!(
        out,
        "        server_tokens on;
        server_name {HOST};
        set $resource_type \"ingress\";
        set $resource_name \"{INGRESS}\";
        set $resource_namespace \"{NAMESPACE}\";
        set $service \"-\";
"
    );
    if tls {
        let _ = writeln!(
            out,
            "        if ($scheme = http) {{\n            return 301 https://$host:{https_port}$request_uri;\n        }}"
        );
    }
    let _ = write!(
        out,
        "        location / {{
            set $service \"{SERVICE}\";
            proxy_http_version 1.1;
            proxy_connect_timeout 60s;
            proxy_read_timeout 60s;
            proxy_send_timeout 60s;
            client_max_body_size 1m;
            proxy_set_header Host $host;
            proxy_set_header X-Real-IP $remote_addr;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_set_header X-Forwarded-Host $host;
            proxy_set_header X-Forwarded-Port $server_port;
            proxy_set_header X-Forwarded-Proto $scheme;
            proxy_buffering on;
            proxy_next_upstream error timeout;
            proxy_next_upstream_timeout 0s;
            proxy_next_upstream_tries 0;
            proxy_pass http://{group};
        }}
    }}
"
    );
    out
}
