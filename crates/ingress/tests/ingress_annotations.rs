//! Ingress annotations as a client sees them: the configuration of annotated Ingresses served
//! by the portcullis server, with backends that echo what reached them. Rewrites under both
//! controllers' names, rate and connection limits with an exempt address, and snippets only
//! where the operator turned them on.

mod common;

use std::collections::BTreeMap;

use common::{backend, default_certificate, free_port, meta, request_to, service, start, temp};
use portcullis_ingress::{translate, Cluster, Settings};
use serde_json::{from_value, json, Value};

fn ingress(name: &str, host: &str, path: (&str, &str), annotations: Value) -> Value {
    let mut metadata = meta(name, "2026-01-01T00:00:00Z");
    metadata["annotations"] = annotations;
    json!({"metadata": metadata, "spec": {"rules": [{"host": host, "http": {"paths": [{
        "path": path.0, "pathType": path.1,
        "backend": {"service": {"name": "one", "port": {"number": 80}}},
    }]}}]}})
}

fn settings(dir: &std::path::Path, snippets: bool) -> Settings {
    Settings {
        controller: "portcullis.dev/ingress-controller".into(),
        class: "portcullis".into(),
        http_port: free_port(),
        https_port: free_port(),
        files: dir.to_path_buf(),
        default_certificate: default_certificate(dir),
        defaults: BTreeMap::new(),
        gateway_controller: "portcullis.dev/gateway-controller".into(),
        status_address: None,
        snippets,
        health_port: 0,
    }
}

#[test]
fn annotations_rewrite_limit_and_guard() {
    let dir = temp("ingress-annotations");
    let mut cluster = Cluster::default();
    let (svc, slice) = service("one", backend("one"));
    cluster.services.push(from_value(svc).expect("a Service"));
    cluster
        .slices
        .push(from_value(slice).expect("an EndpointSlice"));
    cluster.classes.push(
        from_value(json!({
            "metadata": {"name": "portcullis",
                         "annotations": {"ingressclass.kubernetes.io/is-default-class": "true"}},
            "spec": {"controller": "portcullis.dev/ingress-controller"},
        }))
        .expect("an IngressClass"),
    );
    for object in [
        ingress(
            "tea",
            "tea.example",
            ("/tea", "Prefix"),
            json!({"nginx.org/rewrites": "serviceName=one rewrite=/leaves/"}),
        ),
        ingress(
            "coffee",
            "coffee.example",
            ("/coffee(/|$)(.*)", "ImplementationSpecific"),
            json!({"nginx.ingress.kubernetes.io/rewrite-target": "/$2"}),
        ),
        ingress(
            "limited",
            "limited.example",
            ("/", "Prefix"),
            json!({"nginx.ingress.kubernetes.io/limit-rpm": "1",
                   "nginx.ingress.kubernetes.io/limit-burst-multiplier": "2"}),
        ),
        // A name with `-` and `.`, as Kubernetes names may have.
        ingress(
            "exempt-app.v2",
            "exempt.example",
            ("/", "Prefix"),
            json!({"nginx.ingress.kubernetes.io/limit-rpm": "1",
                   "nginx.ingress.kubernetes.io/limit-burst-multiplier": "1",
                   "nginx.ingress.kubernetes.io/limit-whitelist": "127.0.0.0/8"}),
        ),
        ingress(
            "snippet",
            "snippet.example",
            ("/", "Prefix"),
            json!({"nginx.org/location-snippets": "add_header X-Snippet on;"}),
        ),
    ] {
        cluster
            .ingresses
            .push(from_value(object).expect("an Ingress"));
    }

    // Snippets off (the default): the Ingress with one is refused, the others served.
    let off = settings(&dir, false);
    let generated = translate(&cluster, &off);
    assert_eq!(generated.problems.len(), 1, "{:?}", generated.problems);
    assert_eq!(generated.problems[0].name, "snippet");
    assert!(!generated.http.contains("X-Snippet"));

    let on = settings(&dir, true);
    let generated = translate(&cluster, &on);
    assert!(generated.problems.is_empty(), "{:?}", generated.problems);
    let server = start(&generated.http, &dir);
    let port = on.http_port;
    let path_seen = |host: &str, target: &str| {
        let (status, _, body) = request_to(host, port, "GET", target, &[]);
        assert_eq!(status, 200, "{host}{target}: {body}");
        body.lines().nth(1).unwrap_or("").to_owned()
    };
    // NGINX Ingress Controller's rewrites: the location's path replaced, element-wise.
    assert_eq!(
        path_seen("tea.example", "/tea/green?x=1"),
        "GET /leaves/green?x=1 HTTP/1.1"
    );
    assert_eq!(path_seen("tea.example", "/tea"), "GET /leaves/ HTTP/1.1");
    // ingress-nginx's rewrite-target with the path's captures.
    assert_eq!(
        path_seen("coffee.example", "/coffee/beans/dark"),
        "GET /beans/dark HTTP/1.1"
    );
    assert_eq!(path_seen("coffee.example", "/coffee"), "GET / HTTP/1.1");
    // One request a minute, a burst of two: the fourth in a row is refused with 503.
    let statuses: Vec<u16> = (0..4)
        .map(|_| request_to("limited.example", port, "GET", "/", &[]).0)
        .collect();
    assert_eq!(statuses, [200, 200, 200, 503]);
    // An exempt address is not counted.
    let statuses: Vec<u16> = (0..4)
        .map(|_| request_to("exempt.example", port, "GET", "/", &[]).0)
        .collect();
    assert_eq!(statuses, [200; 4]);
    // The snippet, where turned on, is in the location.
    let (_, headers, _) = request_to("snippet.example", port, "GET", "/", &[]);
    assert_eq!(headers.get("x-snippet").map(String::as_str), Some("on"));
    server.stop(false);
    let _ = std::fs::remove_dir_all(&dir);
}
