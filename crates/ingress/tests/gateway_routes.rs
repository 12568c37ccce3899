//! Gateway API routes as a client sees them: GatewayClass, Gateway and HTTPRoute objects
//! made into the configuration, served by the portcullis server, with backends that echo
//! what reached them. Matches by path, header, query parameter and method, their order,
//! weighted backends, filters, an unresolved backend, and the status each object gets.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::TcpStream;

use portcullis_ingress::{gateway, translate, Cluster, Settings};
use serde_json::{from_value, json, Value};

mod common;

use common::{backend, default_certificate, free_port, meta, request_to, service, start, temp};

fn request(
    port: u16,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
) -> (u16, BTreeMap<String, String>, String) {
    request_to("gw.example", port, method, target, headers)
}

#[test]
fn routes_match_filter_and_split_as_the_api_says() {
    let dir = temp("gateway-routes");
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
        snippets: false,
    };
    let generated = translate(&cluster, &settings);
    let server = start(&generated.http, &dir);

    let get = |target: &str, headers: &[(&str, &str)]| request(port, "GET", target, headers);
    let from = |answer: &(u16, BTreeMap<String, String>, String)| {
        answer.2.lines().next().unwrap_or("").to_owned()
    };
    // Element-wise prefix; the match with more headers first.
    assert_eq!(from(&get("/api", &[])), "one");
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
