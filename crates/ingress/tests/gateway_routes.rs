//! Gateway API routes as a client sees them: GatewayClass, Gateway and HTTPRoute objects
//! made into the configuration, served by the portcullis server, with backends that echo
//! what reached them. Matches by path, header, query parameter and method, their order,
//! weighted backends, filters, an unresolved backend, and the status each object gets.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};

use portcullis_ingress::{gateway, translate, Cluster, Settings};
use serde_json::{from_value, json, Value};

/// A free port of 127.0.0.1.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// A backend that answers every request with its name, the request line and the headers
/// it got, one per line.
fn backend(name: &'static str) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(c) = conn else { continue };
            std::thread::spawn(move || serve(c, name));
        }
    });
    port
}

fn serve(c: TcpStream, name: &str) {
    let mut reader = BufReader::new(c.try_clone().expect("clone"));
    let mut writer = c;
    loop {
        let mut head = Vec::new();
        loop {
            let mut line = String::new();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) if line == "\r\n" => break,
                Ok(_) => head.push(line.trim_end().to_owned()),
            }
        }
        let length: usize = (head.iter())
            .find_map(|h| {
                h.to_ascii_lowercase()
                    .strip_prefix("content-length: ")
                    .map(str::to_owned)
            })
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let text = format!("{name}\n{}\n", head.join("\n"));
        let answer = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nX-From: {name}\r\n\r\n{text}",
            text.len()
        );
        if writer.write_all(answer.as_bytes()).is_err() {
            return;
        }
    }
}

/// One request on a new connection: status, headers (lowercase names) and body.
fn request(
    port: u16,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
) -> (u16, BTreeMap<String, String>, String) {
    let mut c = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    let mut text =
        format!("{method} {target} HTTP/1.1\r\nHost: gw.example\r\nConnection: close\r\n");
    for (k, v) in headers {
        text.push_str(&format!("{k}: {v}\r\n"));
    }
    if method == "POST" {
        text.push_str("Content-Length: 0\r\n");
    }
    text.push_str("\r\n");
    c.write_all(text.as_bytes()).expect("send");
    let mut got = String::new();
    c.read_to_string(&mut got).expect("read");
    let (head, body) = got.split_once("\r\n\r\n").unwrap_or((&got, ""));
    let mut lines = head.lines();
    let status = (lines.next().unwrap_or(""))
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.to_ascii_lowercase(), v.to_owned()))
        .collect();
    (status, headers, body.to_owned())
}

fn service(name: &str, backend_port: u16) -> (Value, Value) {
    (
        json!({"metadata": {"name": name, "namespace": "shop"},
               "spec": {"ports": [{"port": 80, "targetPort": backend_port}]}}),
        json!({"metadata": {"name": format!("{name}-1"), "namespace": "shop",
                            "labels": {"kubernetes.io/service-name": name}},
               "addressType": "IPv4",
               "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": true}}],
               "ports": [{"port": backend_port}]}),
    )
}

fn meta(name: &str, created: &str) -> Value {
    json!({"name": name, "namespace": "shop", "creationTimestamp": created, "generation": 1})
}

fn temp() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gateway-routes-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("logs")).expect("mkdir");
    dir
}

fn default_certificate(dir: &Path) -> (PathBuf, PathBuf) {
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = rcgen::CertificateParams::new(vec!["default".into()])
        .expect("params")
        .self_signed(&key)
        .expect("certificate");
    let (crt, pem) = (dir.join("default.crt"), dir.join("default.key"));
    std::fs::write(&crt, cert.pem()).expect("write");
    std::fs::write(&pem, key.serialize_pem()).expect("write");
    (crt, pem)
}

#[test]
fn routes_match_filter_and_split_as_the_api_says() {
    let dir = temp();
    let (one, two) = (backend("one"), backend("two"));
    let port = free_port();
    let mut cluster = Cluster::default();
    for (name, p) in [("one", one), ("two", two)] {
        let (svc, slice) = service(name, p);
        cluster.services.push(from_value(svc).expect("a Service"));
        cluster
            .slices
            .push(from_value(slice).expect("an EndpointSlice"));
    }
    let controller = "portcullis.dev/gateway-controller";
    cluster.gateway_classes.push(
        from_value(json!({"metadata": {"name": "portcullis", "generation": 1},
                          "spec": {"controllerName": controller}}))
        .expect("a GatewayClass"),
    );
    cluster.gateways.push(
        from_value(
            json!({"metadata": meta("gw", "2026-01-01T00:00:00Z"), "spec": {
                "gatewayClassName": "portcullis",
                "listeners": [
                    {"name": "web", "port": port, "protocol": "HTTP"},
                    {"name": "udp", "port": port + 1, "protocol": "UDP"},
                ],
            }}),
        )
        .expect("a Gateway"),
    );
    let to = |name: &str| json!([{"name": name, "port": 80}]);
    let route = json!({"metadata": meta("shop", "2026-01-01T00:00:00Z"), "spec": {
        "parentRefs": [{"name": "gw", "sectionName": "web"}],
        "hostnames": ["gw.example"],
        "rules": [
            {"matches": [{"path": {"type": "PathPrefix", "value": "/api"}}], "backendRefs": to("one")},
            {"matches": [{"path": {"type": "PathPrefix", "value": "/api"},
                          "headers": [{"name": "X-Version", "value": "v2"}]}],
             "backendRefs": to("two")},
            {"matches": [{"path": {"type": "Exact", "value": "/form"}, "method": "POST"}],
             "backendRefs": to("two")},
            {"matches": [{"path": {"type": "Exact", "value": "/old"}}],
             "filters": [{"type": "RequestRedirect", "requestRedirect": {
                 "path": {"type": "ReplaceFullPath", "replaceFullPath": "/new"}, "statusCode": 301}}]},
            {"matches": [{"path": {"type": "PathPrefix", "value": "/rewrite"}}],
             "filters": [
                 {"type": "URLRewrite", "urlRewrite": {
                     "path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/v1"}}},
                 {"type": "RequestHeaderModifier", "requestHeaderModifier": {
                     "set": [{"name": "X-Set", "value": "yes"}],
                     "add": [{"name": "X-Add", "value": "two"}],
                     "remove": ["X-Drop"]}},
                 {"type": "ResponseHeaderModifier", "responseHeaderModifier": {
                     "add": [{"name": "X-Resp", "value": "r"}], "remove": ["X-From"]}},
             ],
             "backendRefs": to("one")},
            {"matches": [{"path": {"type": "RegularExpression", "value": "/v[0-9]+/.*"},
                          "queryParams": [{"name": "debug", "value": "1"}]}],
             "backendRefs": to("two")},
            {"matches": [{"path": {"type": "PathPrefix", "value": "/gone"}}],
             "backendRefs": [{"name": "nowhere", "port": 80}]},
            {"backendRefs": [{"name": "one", "port": 80, "weight": 3},
                             {"name": "two", "port": 80, "weight": 1}]},
        ],
    }});
    cluster
        .routes
        .push(from_value(route).expect("an HTTPRoute"));
    // A filter not implemented refuses its route: nothing of it is served.
    cluster.routes.push(
        from_value(json!({"metadata": meta("mirrored", "2026-01-02T00:00:00Z"), "spec": {
            "parentRefs": [{"name": "gw"}],
            "hostnames": ["mirror.example"],
            "rules": [{"filters": [{"type": "RequestMirror",
                                   "requestMirror": {"backendRef": {"name": "two", "port": 80}}}],
                       "backendRefs": to("one")}],
        }}))
        .expect("an HTTPRoute"),
    );
    let settings = Settings {
        controller: "portcullis.dev/ingress-controller".into(),
        class: "portcullis".into(),
        http_port: free_port(),
        https_port: free_port(),
        files: dir.clone(),
        default_certificate: default_certificate(&dir),
        defaults: BTreeMap::new(),
        gateway_controller: controller.into(),
        status_address: Some("10.0.0.7".into()),
    };
    let generated = translate(&cluster, &settings);
    let text = format!(
        "worker_processes 1;\nerror_log stderr notice;\nevents {{}}\nhttp {{\n    access_log off;\n{}}}\n",
        generated.http
    );
    let conf = dir.join("nginx.conf");
    let loaded = portcullis_config::load_str(&text, &conf, &Default::default())
        .unwrap_or_else(|e| panic!("{e}\n{text}"));
    let compiled =
        portcullis_server::compile(&loaded, &dir, None).unwrap_or_else(|e| panic!("{e}\n{text}"));
    if std::env::var_os("SHOW").is_some() {
        eprintln!("{text}");
    }
    let server = portcullis_server::Server::start(compiled).expect("the server starts");

    let get = |target: &str, headers: &[(&str, &str)]| request(port, "GET", target, headers);
    let from = |answer: &(u16, BTreeMap<String, String>, String)| {
        answer.2.lines().next().unwrap_or("").to_owned()
    };
    // Element-wise prefix; the match with more headers first.
    assert_eq!(from(&get("/api", &[])), "one", "{text}");
    assert_eq!(from(&get("/api/x", &[])), "one");
    assert_eq!(from(&get("/api/x", &[("X-Version", "v2")])), "two");
    assert_eq!(from(&get("/api", &[("x-version", "v2")])), "two");
    assert_eq!(
        from(&get("/api/x", &[("X-Version", "V2")])),
        "one",
        "values match exactly"
    );
    // A method match; where it fails, the less specific paths (the weighted `/`).
    assert_eq!(from(&request(port, "POST", "/form", &[])), "two");
    let others: BTreeSet<String> = (0..40).map(|_| from(&get("/form", &[]))).collect();
    assert_eq!(others, BTreeSet::from(["one".into(), "two".into()]));
    assert_eq!(get("/form", &[]).0, 200);
    // A regular expression of the whole path with a query parameter.
    assert_eq!(from(&get("/v2/items?debug=1", &[])).len(), 3);
    assert_eq!(from(&get("/v2/items?debug=1", &[])), "two");
    // Redirect: the listener's port, the new path, the query kept.
    let (status, headers, _) = get("/old?a=b", &[]);
    assert_eq!(status, 301);
    assert_eq!(
        headers["location"],
        format!("http://gw.example:{port}/new?a=b")
    );
    // Rewrite and header filters.
    let answer = get(
        "/rewrite/x?q=1",
        &[("X-Add", "one"), ("X-Drop", "gone"), ("X-Set", "no")],
    );
    assert_eq!(answer.0, 200, "{answer:?}");
    let seen = &answer.2;
    assert!(seen.contains("\nGET /v1/x?q=1 HTTP/1.1\n"), "{seen}");
    assert!(seen.contains("\nX-Set: yes\n"), "{seen}");
    assert!(seen.contains("\nX-Add: one,two\n"), "{seen}");
    assert!(!seen.contains("X-Drop"), "{seen}");
    assert_eq!(answer.1.get("x-resp").map(String::as_str), Some("r"));
    assert!(!answer.1.contains_key("x-from"), "{:?}", answer.1);
    let answer = get("/rewrite", &[]);
    assert!(answer.2.contains("\nGET /v1 HTTP/1.1\n"), "{}", answer.2);
    assert!(answer.2.contains("\nX-Add: two\n"), "{}", answer.2);
    // A backend that does not resolve: its share answered 500.
    assert_eq!(get("/gone", &[]).0, 500);
    // Unknown hosts, and the refused route's, are not routed.
    let mut c = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    c.write_all(b"GET / HTTP/1.1\r\nHost: mirror.example\r\nConnection: close\r\n\r\n")
        .expect("send");
    let mut got = String::new();
    c.read_to_string(&mut got).expect("read");
    assert!(got.starts_with("HTTP/1.1 404 "), "{got}");
    // Weights 3 to 1: within 5% of 75% over 1,000 requests.
    let ones = (0..1000).filter(|_| from(&get("/", &[])) == "one").count();
    assert!(
        (700..=800).contains(&ones),
        "{ones} of 1000 to the backend of weight 3"
    );
    server.stop(false);

    // Status: the class accepted; the listeners, one not; the routes, one refused.
    let status = |kind: &str, name: &str| {
        (generated.statuses.iter())
            .find(|s| s.kind == kind && s.name == name)
            .unwrap_or_else(|| panic!("no status for {kind} {name}: {:?}", generated.statuses))
            .status
            .clone()
    };
    let condition = |v: &Value, kind: &str| {
        (v["conditions"].as_array().expect("conditions").iter())
            .find(|c| c["type"] == kind)
            .cloned()
            .unwrap_or_else(|| panic!("no {kind} in {v}"))
    };
    assert_eq!(
        condition(&status("GatewayClass", "portcullis"), "Accepted")["status"],
        "True"
    );
    let gw = status("Gateway", "gw");
    assert_eq!(condition(&gw, "Programmed")["status"], "True");
    assert_eq!(
        gw["addresses"],
        json!([{"type": "IPAddress", "value": "10.0.0.7"}])
    );
    assert_eq!(gw["listeners"][0]["attachedRoutes"], 1, "{gw}");
    assert_eq!(
        condition(&gw["listeners"][1], "Accepted")["reason"],
        "UnsupportedProtocol"
    );
    let shop = status("HTTPRoute", "shop");
    let parent = &shop["parents"][0];
    assert_eq!(parent["controllerName"], controller);
    assert_eq!(condition(parent, "Accepted")["status"], "True");
    let resolved = condition(parent, "ResolvedRefs");
    assert_eq!(
        (resolved["status"].clone(), resolved["reason"].clone()),
        (json!("False"), json!("BackendNotFound"))
    );
    let mirrored = condition(&status("HTTPRoute", "mirrored")["parents"][0], "Accepted");
    assert_eq!(mirrored["reason"], "UnsupportedValue", "{mirrored}");
    assert!(
        mirrored["message"]
            .as_str()
            .is_some_and(|m| m.contains("RequestMirror")),
        "{mirrored}"
    );

    // Written times: kept while a condition's status stays.
    let current = gateway::with_times(&shop, &Value::Null, "2026-01-01T00:00:00Z");
    let again = gateway::with_times(&shop, &current, "2026-02-02T00:00:00Z");
    assert_eq!(again, current);
    let _ = std::fs::remove_dir_all(&dir);
}
