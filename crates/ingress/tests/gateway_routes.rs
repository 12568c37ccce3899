//! Gateway API routes as a client sees them: GatewayClass, Gateway and HTTPRoute objects
//! made into the configuration, served by the portcullis server, with backends that echo
//! what reached them. Matches by path, header, query parameter and method, their order,
//! weighted backends, filters, an unresolved backend, and the status each object gets.

use std::collections::BTreeMap;
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
    let (port, empty) = (free_port(), free_port());
    let (team_a, team_b) = (free_port(), free_port());
    let mut cluster = Cluster::default();
    // The routes' namespace, selected by the labels of team a.
    cluster.namespaces.push(
        from_value(json!({"metadata": {"name": "shop", "labels": {"team": "a", "stage": "prod"}}}))
            .expect("a Namespace"),
    );
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
                    {"name": "probes", "port": 8081, "protocol": "HTTP"},
                    {"name": "empty", "port": empty, "protocol": "HTTP",
                     "hostname": "empty.example"},
                    {"name": "mismatched", "port": free_port(), "protocol": "HTTPS",
                     "tls": {"certificateRefs": [{"name": "mismatched"}]}},
                    {"name": "grpc-only", "port": free_port(), "protocol": "HTTP",
                     "allowedRoutes": {"kinds": [{"kind": "GRPCRoute"}]}},
                    {"name": "granted-tls", "port": free_port(), "protocol": "HTTPS",
                     "tls": {"certificateRefs": [{"name": "wildcard", "namespace": "certs"}]}},
                    {"name": "denied-tls", "port": free_port(), "protocol": "HTTPS",
                     "tls": {"certificateRefs": [{"name": "other", "namespace": "certs"}]}},
                    {"name": "team-a", "port": team_a, "protocol": "HTTP",
                     "allowedRoutes": {"namespaces": {"from": "Selector", "selector": {
                         "matchLabels": {"team": "a"},
                         "matchExpressions": [{"key": "stage", "operator": "NotIn", "values": ["test"]}]}}}},
                    {"name": "team-b", "port": team_b, "protocol": "HTTP",
                     "allowedRoutes": {"namespaces": {"from": "Selector", "selector": {
                         "matchLabels": {"team": "b"}}}}},
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
            {"matches": [{"path": {"type": "RegularExpression", "value": "/api/v[0-9]+"},
                          "headers": [{"name": "X-Regex", "value": "yes"}]}],
             "backendRefs": to("two")},
            {"matches": [{"path": {"type": "RegularExpression", "value": "/forms?"}}],
             "backendRefs": to("one")},
            {"matches": [{"path": {"type": "RegularExpression", "value": "/r/[a-z]+"}}],
             "backendRefs": to("two")},
            {"matches": [{"path": {"type": "RegularExpression", "value": "/r/.*"}}],
             "backendRefs": to("one")},
            {"matches": [{"path": {"type": "PathPrefix", "value": "/gone"}}],
             "backendRefs": [{"name": "nowhere", "port": 80}]},
            {"backendRefs": [{"name": "one", "port": 80, "weight": 3},
                             {"name": "two", "port": 80, "weight": 1}]},
        ],
    }});
    cluster
        .routes
        .push(from_value(route).expect("an HTTPRoute"));
    // Hosts: a wildcard's rules and every host's apply where an exact host's do not.
    for (name, hosts, path, to_backend) in [
        ("exact", json!(["foo.example.com"]), "/b", "two"),
        ("wild", json!(["*.example.com"]), "/a", "one"),
        ("any", json!([]), "/c", "two"),
        (
            "reserved",
            json!(["foo.example.com"]),
            "/_portcullis-gateway-0",
            "one",
        ),
    ] {
        cluster.routes.push(
            from_value(
                json!({"metadata": meta(name, "2026-01-03T00:00:00Z"), "spec": {
                    "parentRefs": [{"name": "gw", "sectionName": "web"}],
                    "hostnames": hosts,
                    "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": path}}],
                               "backendRefs": to(to_backend)}],
                }}),
            )
            .expect("an HTTPRoute"),
        );
    }
    // Listeners that select namespaces by label: team a's takes the route, team b's not.
    for listener in ["team-a", "team-b"] {
        cluster.routes.push(
            from_value(
                json!({"metadata": meta(listener, "2026-01-05T00:00:00Z"), "spec": {
                    "parentRefs": [{"name": "gw", "sectionName": listener}],
                    "rules": [{"backendRefs": to("one")}],
                }}),
            )
            .expect("an HTTPRoute"),
        );
    }
    // Another namespace's Services: only the one a ReferenceGrant there names.
    for (name, p) in [("far", backend("far")), ("near", backend("near"))] {
        let (mut svc, mut slice) = service(name, p);
        svc["metadata"]["namespace"] = json!("other");
        slice["metadata"]["namespace"] = json!("other");
        cluster.services.push(from_value(svc).expect("a Service"));
        cluster
            .slices
            .push(from_value(slice).expect("an EndpointSlice"));
    }
    cluster.grants.push(
        from_value(json!({"metadata": {"name": "routes-of-shop", "namespace": "other"}, "spec": {
            "from": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "namespace": "shop"}],
            "to": [{"group": "", "kind": "Service", "name": "far"}],
        }}))
        .expect("a ReferenceGrant"),
    );
    for (route, service) in [("far", "far"), ("near", "near")] {
        cluster.routes.push(
            from_value(json!({"metadata": meta(route, "2026-01-04T00:00:00Z"), "spec": {
                "parentRefs": [{"name": "gw", "sectionName": "web"}],
                "hostnames": [format!("{route}.example")],
                "rules": [{"backendRefs": [{"name": service, "namespace": "other", "port": 80}]}],
            }}))
            .expect("an HTTPRoute"),
        );
    }
    // A key that is not its certificate's: the listener is refused, nothing else.
    let (key, other) = (
        rcgen::KeyPair::generate().expect("key"),
        rcgen::KeyPair::generate().expect("key"),
    );
    let cert = rcgen::CertificateParams::new(vec!["x.example".into()])
        .expect("params")
        .self_signed(&key)
        .expect("certificate");
    let bytes =
        |b: String| serde_json::to_value(k8s_openapi::ByteString(b.into_bytes())).expect("bytes");
    cluster.secrets.push(
        from_value(json!({
            "metadata": {"name": "mismatched", "namespace": "shop"},
            "type": "kubernetes.io/tls",
            "data": {"tls.crt": bytes(cert.pem()), "tls.key": bytes(other.serialize_pem())},
        }))
        .expect("a Secret"),
    );
    // Certificates of another namespace: the one a ReferenceGrant there names.
    let good = rcgen::KeyPair::generate().expect("key");
    let good_cert = rcgen::CertificateParams::new(vec!["w.example".into()])
        .expect("params")
        .self_signed(&good)
        .expect("certificate");
    for name in ["wildcard", "other"] {
        cluster.secrets.push(
            from_value(json!({
                "metadata": {"name": name, "namespace": "certs"},
                "type": "kubernetes.io/tls",
                "data": {"tls.crt": bytes(good_cert.pem()), "tls.key": bytes(good.serialize_pem())},
            }))
            .expect("a Secret"),
        );
    }
    cluster.grants.push(
        from_value(json!({"metadata": {"name": "gateways-of-shop", "namespace": "certs"}, "spec": {
            "from": [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "namespace": "shop"}],
            "to": [{"group": "", "kind": "Secret", "name": "wildcard"}],
        }}))
        .expect("a ReferenceGrant"),
    );
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
        health_port: 8081,
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
    // Where it fails at an exact path, a regular expression matching it is next.
    assert_eq!(from(&get("/form", &[])), "one");
    assert_eq!(from(&get("/forms", &[])), "one");
    // A regular expression with a header; where it fails, the prefix.
    assert_eq!(from(&get("/api/v1", &[("X-Regex", "yes")])), "two");
    assert_eq!(from(&get("/api/v1", &[])), "one");
    // Two regular expressions: the first rule's first, whatever they spell.
    assert_eq!(from(&get("/r/abc", &[])), "two");
    assert_eq!(from(&get("/r/1", &[])), "one");
    // After a jump to an internal location, the URI goes on as the client sent it.
    let seen = get("/api/a%2Fb?x=%20", &[("X-Version", "v2")]).2;
    assert!(seen.contains("\nGET /api/a%2Fb?x=%20 HTTP/1.1\n"), "{seen}");
    // Hosts' precedence, and their fallbacks.
    let on = |host: &str, target: &str| {
        let answer = request_to(host, port, "GET", target, &[]);
        answer.2.lines().next().unwrap_or("").to_owned() + &answer.0.to_string()
    };
    assert_eq!(on("foo.example.com", "/b"), "two200");
    assert_eq!(on("foo.example.com", "/a"), "one200");
    assert_eq!(on("foo.example.com", "/c"), "two200");
    assert_eq!(on("bar.example.com", "/a"), "one200");
    assert_eq!(request_to("bar.example.com", port, "GET", "/b", &[]).0, 404);
    assert_eq!(on("other.example", "/c"), "two200");
    assert_eq!(
        request_to(
            "foo.example.com",
            port,
            "GET",
            "/_portcullis-gateway-0/x",
            &[]
        )
        .0,
        404
    );
    // The granted Service of another namespace is served; the other one's share is 500.
    assert_eq!(on("far.example", "/"), "far200");
    assert_eq!(request_to("near.example", port, "GET", "/", &[]).0, 500);
    assert_eq!(request_to("any.example", team_a, "GET", "/", &[]).0, 200);
    assert_eq!(request_to("any.example", team_b, "GET", "/", &[]).0, 404);
    // A listener with no route listens, and answers 404.
    assert_eq!(request_to("empty.example", empty, "GET", "/", &[]).0, 404);
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
    // The routes of the test, and of the hosts' checks (the one with a reserved path is not).
    assert_eq!(gw["listeners"][0]["attachedRoutes"], 6, "{gw}");
    assert_eq!(
        condition(&gw["listeners"][1], "Accepted")["reason"],
        "UnsupportedProtocol"
    );
    assert_eq!(
        condition(&gw["listeners"][2], "Accepted")["reason"],
        "PortUnavailable"
    );
    let refused = condition(&gw["listeners"][4], "ResolvedRefs");
    assert_eq!(refused["reason"], "InvalidCertificateRef", "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .is_some_and(|m| m == "secret \"shop/mismatched\": SSL_CTX_use_PrivateKey(\"tls.key\") failed (key values mismatch)"),
        "{refused}"
    );
    let grpc = &gw["listeners"][5];
    assert_eq!(
        condition(grpc, "ResolvedRefs")["reason"],
        "InvalidRouteKinds",
        "{grpc}"
    );
    assert_eq!(grpc["supportedKinds"], json!([]), "{grpc}");
    assert_eq!(grpc["attachedRoutes"], 0, "{grpc}");
    assert_eq!(
        condition(&gw["listeners"][6], "Programmed")["status"],
        "True",
        "{gw}"
    );
    let denied = condition(&gw["listeners"][7], "ResolvedRefs");
    assert_eq!(denied["reason"], "RefNotPermitted", "{denied}");
    let b = condition(&status("HTTPRoute", "team-b")["parents"][0], "Accepted");
    assert_eq!(b["reason"], "NotAllowedByListeners", "{b}");
    let near = condition(&status("HTTPRoute", "near")["parents"][0], "ResolvedRefs");
    assert_eq!(near["reason"], "RefNotPermitted", "{near}");
    let far = condition(&status("HTTPRoute", "far")["parents"][0], "ResolvedRefs");
    assert_eq!(far["status"], "True", "{far}");
    let reserved = condition(&status("HTTPRoute", "reserved")["parents"][0], "Accepted");
    assert_eq!(reserved["reason"], "UnsupportedValue", "{reserved}");
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
