//! The controller against a real Kubernetes API server: etcd and kube-apiserver built by
//! `cluster/build.sh`, started on addresses of a network namespace the test makes for itself
//! (`unshare -n`: nothing it does leaves it), with the objects a user would apply. Backend
//! "pods" are servers of the test named by an EndpointSlice. What is checked is what a
//! client sees: an Ingress with TLS served by SNI with HTTP redirected, both endpoints
//! answering, an endpoint scaled away with no reload, an Ingress that cannot be applied
//! given a Kubernetes Event while the others keep serving, an Ingress edited under load
//! with no request failed, the controller and the API server restarted, `--dump`'s
//! configuration, the Gateway API (its CRDs from its module, a Gateway and an HTTPRoute with
//! weighted backends splitting within 5% of the weights, and their status), and the Helm
//! chart (rendered by Helm, every object accepted by the API server in a dry run).

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{json, Value};

/// A plain HTTP request to `host` through the controller: its status.
fn through_plain(host: &str) -> u16 {
    let url = format!("http://{host}/");
    let out = Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--max-time",
            "5",
        ])
        .args(["--resolve", &format!("{host}:80:127.0.0.1")])
        .arg(url)
        .output()
        .expect("curl");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(0)
}

/// Set in the child that runs inside the namespace: where the cluster's binaries are.
const INSIDE: &str = "PORTCULLIS_INGRESS_CLUSTER_BIN";
const API: &str = "10.244.0.1";
const TOKEN: &str = "test-admin-token";

#[test]
fn an_ingress_serves_through_the_controller() {
    match std::env::var_os(INSIDE) {
        Some(bin) => inside(Path::new(&bin)),
        None => outside("an_ingress_serves_through_the_controller"),
    }
}

/// Builds (or finds) the cluster's binaries, then runs the test again in a network
/// namespace of its own.
fn outside(test: &str) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("cluster/build.sh");
    let built = Command::new(&script)
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", script.display()));
    assert!(
        built.status.success(),
        "{} could not build etcd and kube-apiserver (the Go module proxy must be reachable)",
        script.display()
    );
    let bin = String::from_utf8_lossy(&built.stdout).trim().to_owned();
    let me = std::env::current_exe().expect("the test binary");
    let status = Command::new("unshare")
        .arg("-n")
        .arg(me)
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(INSIDE, &bin)
        .status()
        .expect("unshare (util-linux) runs");
    assert!(
        status.success(),
        "the test inside its network namespace failed (it needs root for unshare -n)"
    );
}

/// Kills what it holds when the test ends, however it ends.
struct Killed(Vec<Child>);

impl Drop for Killed {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn run(cmd: &str, args: &[&str]) {
    let status = Command::new(cmd).args(args).status().expect(cmd);
    assert!(status.success(), "{cmd} {args:?}");
}

fn wait_until(what: &str, limit: Duration, mut ok: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ok() {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The test's certificate authority and the API server's certificate, signed by it.
fn certificates(dir: &Path) {
    let ca_key = rcgen::KeyPair::generate().expect("key");
    let mut ca = rcgen::CertificateParams::new(Vec::new()).expect("params");
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "test ca");
    let ca_cert = ca.self_signed(&ca_key).expect("ca");
    let key = rcgen::KeyPair::generate().expect("key");
    let mut server = rcgen::CertificateParams::new(vec!["kubernetes".into()]).expect("params");
    server
        .subject_alt_names
        .push(rcgen::SanType::IpAddress(API.parse().expect("ip")));
    let cert = server
        .signed_by(&key, &ca_cert, &ca_key)
        .expect("server certificate");
    let sa = rcgen::KeyPair::generate().expect("key");
    for (name, text) in [
        ("ca.crt", ca_cert.pem()),
        ("server.crt", cert.pem()),
        ("server.key", key.serialize_pem()),
        ("sa.key", sa.serialize_pem()),
        ("sa.pub", sa.public_key_pem()),
        (
            "tokens.csv",
            format!("{TOKEN},admin,1,\"system:masters\"\n"),
        ),
    ] {
        std::fs::write(dir.join(name), text).expect("write");
    }
}

/// A log file the processes of the test write to, kept across their restarts.
fn appended(dir: &Path, name: &str) -> std::fs::File {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(name))
        .expect("log file")
}

/// kube-apiserver on the test's etcd, ready in a few seconds.
fn apiserver(bin: &Path, dir: &Path) -> Child {
    let path = |name: &str| dir.join(name).display().to_string();
    Command::new(bin.join("kube-apiserver"))
        .args(["--etcd-servers", "http://127.0.0.1:2379"])
        .args(["--bind-address", API, "--advertise-address", API])
        .args(["--secure-port", "6443"])
        .args(["--tls-cert-file", &path("server.crt")])
        .args(["--tls-private-key-file", &path("server.key")])
        .args(["--client-ca-file", &path("ca.crt")])
        .args(["--token-auth-file", &path("tokens.csv")])
        .args(["--authorization-mode", "RBAC"])
        .args(["--service-account-key-file", &path("sa.pub")])
        .args(["--service-account-signing-key-file", &path("sa.key")])
        .args(["--service-account-issuer", "https://kubernetes.default.svc"])
        .args(["--service-cluster-ip-range", "10.96.0.0/16"])
        .args(["--disable-admission-plugins", "ServiceAccount"])
        .stdout(appended(dir, "apiserver.log"))
        .stderr(appended(dir, "apiserver.err"))
        .spawn()
        .expect("kube-apiserver")
}

/// The controller, on ports 80 and 443 of the namespace.
fn start_controller(dir: &Path, kubeconfig: &Path, work: &Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_portcullis-ingress"))
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--dir")
        .arg(work)
        .args(["--workers", "1", "--status-address", "10.244.0.9"])
        .args(["--configmap", "portcullis-ingress/portcullis-ingress"])
        .stdout(appended(dir, "controller.log"))
        .stderr(appended(dir, "controller.err"))
        .spawn()
        .expect("the controller")
}

/// Stops `child` at once.
fn kill(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// Requests to `host` over plain HTTP on kept connections until `stop`: how many were
/// answered 200, and how many were not.
fn load(
    host: &'static str,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<(u64, u64)> {
    std::thread::spawn(move || {
        let (mut ok, mut failed) = (0, 0);
        let request = format!("GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            let answered = std::net::TcpStream::connect("127.0.0.1:80").and_then(|mut c| {
                c.write_all(request.as_bytes())?;
                let mut got = String::new();
                c.read_to_string(&mut got)?;
                Ok(got)
            });
            match answered {
                Ok(got) if got.starts_with("HTTP/1.1 200 ") => ok += 1,
                _ => failed += 1,
            }
        }
        (ok, failed)
    })
}

/// A request to the API server: its status and JSON.
fn api(dir: &Path, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    let mut cmd = Command::new("curl");
    cmd.args(["-s", "-o", "-", "-w", "\n%{http_code}", "-X", method])
        .arg("--cacert")
        .arg(dir.join("ca.crt"))
        .args(["-H", &format!("Authorization: Bearer {TOKEN}")])
        .args(["-H", "Content-Type: application/json"])
        .arg(format!("https://{API}:6443{path}"));
    if let Some(b) = body {
        cmd.args(["--data-binary", &b.to_string()]);
    }
    let out = cmd.output().expect("curl");
    let text = String::from_utf8_lossy(&out.stdout);
    let (json, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (
        code.trim().parse().unwrap_or(0),
        serde_json::from_str(json).unwrap_or(Value::Null),
    )
}

/// Creates each object of a YAML file of manifests, as `kubectl apply -f` would the first
/// time (the API server reads YAML).
fn apply_manifests(dir: &Path, file: &Path) {
    let text = std::fs::read_to_string(file).expect("manifests");
    create_all(dir, &text, "");
}

/// Creates each object of YAML text; `query` may ask for a dry run (`?dryRun=All`): checked
/// by the API server as it would be created, and not kept.
fn create_all(dir: &Path, text: &str, query: &str) {
    for doc in text.split("\n---\n") {
        if !doc.lines().any(|l| l.starts_with("kind: ")) {
            continue;
        }
        let field = |name: &str, indent: &str| {
            doc.lines()
                .find_map(|l| l.strip_prefix(&format!("{indent}{name}: ")))
                .map(str::trim)
        };
        let kind = field("kind", "").expect("a kind");
        let namespace = field("namespace", "  ").unwrap_or("");
        let path = match kind {
            "Namespace" => "/api/v1/namespaces".to_owned(),
            "ServiceAccount" => format!("/api/v1/namespaces/{namespace}/serviceaccounts"),
            "Service" => format!("/api/v1/namespaces/{namespace}/services"),
            "ClusterRole" => "/apis/rbac.authorization.k8s.io/v1/clusterroles".to_owned(),
            "ClusterRoleBinding" => {
                "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings".to_owned()
            }
            "IngressClass" => "/apis/networking.k8s.io/v1/ingressclasses".to_owned(),
            "GatewayClass" => "/apis/gateway.networking.k8s.io/v1/gatewayclasses".to_owned(),
            "CustomResourceDefinition" => {
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions".to_owned()
            }
            "Deployment" => format!("/apis/apps/v1/namespaces/{namespace}/deployments"),
            "ConfigMap" => format!("/api/v1/namespaces/{namespace}/configmaps"),
            "Role" => format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles"),
            "RoleBinding" => {
                format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings")
            }
            other => panic!("a manifest of kind {other}"),
        };
        let mut out = Command::new("curl")
            .args(["-s", "-o", "-", "-w", "\n%{http_code}", "-X", "POST"])
            .arg("--cacert")
            .arg(dir.join("ca.crt"))
            .args(["-H", &format!("Authorization: Bearer {TOKEN}")])
            .args(["-H", "Content-Type: application/yaml"])
            .args(["--data-binary", "@-"])
            .arg(format!("https://{API}:6443{path}{query}"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("curl");
        // A CRD is longer than one argument may be: the body goes by stdin.
        let mut input = out.stdin.take().expect("stdin");
        input.write_all(doc.as_bytes()).expect("write to curl");
        drop(input);
        let out = out.wait_with_output().expect("curl");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.ends_with("\n201"), "{kind} at {path}: {text}");
    }
}

fn create(dir: &Path, path: &str, object: Value) {
    let (status, answer) = api(dir, "POST", path, Some(&object));
    assert_eq!(status, 201, "POST {path}: {answer}");
}

/// A backend "pod" at `addr` that answers `name`.
fn pod(addr: &str, name: &'static str) {
    let listener = TcpListener::bind(addr).expect("bind a pod's address");
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut c) = conn else { continue };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match c.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let answer = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{name}",
                    name.len()
                );
                let _ = c.write_all(answer.as_bytes());
            });
        }
    });
}

/// A request through the controller, as curl makes it: status and body.
fn through(url: &str) -> (u16, String) {
    let out = Command::new("curl")
        .args([
            "-s",
            "-k",
            "-o",
            "-",
            "-w",
            "\n%{http_code}",
            "--max-time",
            "5",
        ])
        .args(["--resolve", "shop.example:80:127.0.0.1"])
        .args(["--resolve", "shop.example:443:127.0.0.1"])
        .arg(url)
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_owned())
}

fn slice(endpoints: &[&str]) -> Value {
    let endpoints: Vec<Value> = (endpoints.iter())
        .map(|ip| json!({"addresses": [ip], "conditions": {"ready": true}}))
        .collect();
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "web-1", "namespace": "shop",
                     "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
    })
}

/// The Gateway API's CRDs, as its module ships them, and the controller's GatewayClass.
fn install_gateway_api(dir: &Path, bin: &Path, manifests: &Path) {
    let crds = bin.join("../crds");
    for crd in [
        "gatewayclasses",
        "gateways",
        "httproutes",
        "referencegrants",
    ] {
        apply_manifests(
            dir,
            &crds.join(format!("gateway.networking.k8s.io_{crd}.yaml")),
        );
    }
    wait_until("the Gateway API served", Duration::from_secs(30), || {
        let (status, list) = api(dir, "GET", "/apis/gateway.networking.k8s.io/v1", None);
        status == 200 && list["resources"].as_array().is_some_and(|r| r.len() >= 6)
    });
    apply_manifests(
        dir,
        &manifests.with_file_name("gateway-api/gatewayclass.yaml"),
    );
}

/// The Helm chart, rendered by Helm with every option on, is what the API server accepts
/// (a dry run of each object), and its service account has the rules of the manifests'.
fn helm_chart(dir: &Path, bin: &Path, manifests: &Path) {
    let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/helm/portcullis-ingress");
    let lint = Command::new(bin.join("helm"))
        .arg("lint")
        .arg(&chart)
        .output()
        .expect("helm");
    assert!(
        lint.status.success(),
        "{}",
        String::from_utf8_lossy(&lint.stdout)
    );
    let out = Command::new(bin.join("helm"))
        .args(["template", "edge"])
        .arg(&chart)
        .args([
            "--namespace",
            "helm-test",
            "--api-versions",
            "gateway.networking.k8s.io/v1/GatewayClass",
        ])
        .args([
            "--set",
            "statusAddress=10.244.0.9",
            "--set",
            "enableSnippets=true",
        ])
        .args([
            "--set",
            "workers=2",
            "--set",
            "config.proxy-read-timeout=30",
        ])
        .args([
            "--set",
            "ingressClass.name=edge",
            "--set",
            "gatewayClass.name=edge",
        ])
        .output()
        .expect("helm");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for expected in [
        "kind: GatewayClass",
        "- --enable-snippets",
        "- --status-address",
        "proxy-read-timeout: \"30\"",
    ] {
        assert!(text.contains(expected), "{expected}:\n{text}");
    }
    let rules = |text: &str| {
        let start = text.find("kind: ClusterRole\n").expect("a ClusterRole");
        let from = text[start..].find("rules:").expect("rules") + start;
        let end = text[from..].find("\n---").map_or(text.len(), |e| from + e);
        text[from..end].trim().to_owned()
    };
    let raw = std::fs::read_to_string(manifests).expect("manifests");
    assert_eq!(
        rules(&text),
        rules(&raw),
        "the chart's rules and the manifests' differ"
    );
    create(
        dir,
        "/api/v1/namespaces",
        json!({"metadata": {"name": "helm-test"}}),
    );
    create_all(dir, &text, "?dryRun=All");
}

/// A Gateway with an HTTP listener for `gw.example` on the controller's port 80, and an
/// HTTPRoute sending 80% of its requests to the pod "one", 20% to "two" (a Service each).
fn gateway_objects(dir: &Path) {
    for (name, ip) in [("one", "10.244.1.1"), ("two", "10.244.1.2")] {
        create(
            dir,
            "/api/v1/namespaces/shop/services",
            json!({"metadata": {"name": name},
                   "spec": {"ports": [{"port": 80, "targetPort": 8080}]}}),
        );
        create(
            dir,
            "/apis/discovery.k8s.io/v1/namespaces/shop/endpointslices",
            json!({
                "metadata": {"name": format!("{name}-1"),
                             "labels": {"kubernetes.io/service-name": name}},
                "addressType": "IPv4",
                "endpoints": [{"addresses": [ip], "conditions": {"ready": true}}],
                "ports": [{"port": 8080, "protocol": "TCP"}],
            }),
        );
    }
    create(
        dir,
        "/apis/gateway.networking.k8s.io/v1/namespaces/shop/gateways",
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": "gw"},
            "spec": {"gatewayClassName": "portcullis", "listeners": [
                {"name": "web", "port": 80, "protocol": "HTTP", "hostname": "gw.example"},
            ]},
        }),
    );
    create(
        dir,
        "/apis/gateway.networking.k8s.io/v1/namespaces/shop/httproutes",
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": "split"},
            "spec": {
                "parentRefs": [{"name": "gw"}],
                "rules": [{"backendRefs": [
                    {"name": "one", "port": 80, "weight": 80},
                    {"name": "two", "port": 80, "weight": 20},
                ]}],
            },
        }),
    );
}

/// The HTTPRoute splits within 5% of its weights, and the Gateway API objects say so in
/// their status.
fn gateway_routes(dir: &Path) {
    // Within the controller's next look for the Gateway API (every 10 s).
    wait_until("the HTTPRoute served", Duration::from_secs(30), || {
        through_plain("gw.example") == 200
    });
    let mut ones = 0;
    let request = b"GET / HTTP/1.1\r\nHost: gw.example\r\nConnection: close\r\n\r\n";
    for _ in 0..1000 {
        let mut c = std::net::TcpStream::connect("127.0.0.1:80").expect("connect");
        c.write_all(request).expect("send");
        let mut got = String::new();
        c.read_to_string(&mut got).expect("read");
        assert!(got.starts_with("HTTP/1.1 200 "), "{got}");
        ones += usize::from(got.ends_with("\r\n\r\none"));
    }
    assert!(
        (750..=850).contains(&ones),
        "{ones} of 1000 to the backend of weight 80"
    );
    let condition = |object: &Value, kind: &str| {
        (object["conditions"].as_array().into_iter().flatten())
            .find(|c| c["type"] == kind)
            .map(|c| c["status"].clone())
    };
    wait_until(
        "the Gateway API objects' status",
        Duration::from_secs(10),
        || {
            let class = api(
                dir,
                "GET",
                "/apis/gateway.networking.k8s.io/v1/gatewayclasses/portcullis",
                None,
            )
            .1;
            let gw = api(
                dir,
                "GET",
                "/apis/gateway.networking.k8s.io/v1/namespaces/shop/gateways/gw",
                None,
            )
            .1;
            let route = api(
                dir,
                "GET",
                "/apis/gateway.networking.k8s.io/v1/namespaces/shop/httproutes/split",
                None,
            )
            .1;
            condition(&class["status"], "Accepted") == Some(json!("True"))
                && condition(&gw["status"], "Programmed") == Some(json!("True"))
                && gw["status"]["listeners"][0]["attachedRoutes"] == 1
                && condition(&route["status"]["parents"][0], "Accepted") == Some(json!("True"))
                && condition(&route["status"]["parents"][0], "ResolvedRefs") == Some(json!("True"))
        },
    );
}

fn inside(bin: &Path) {
    run("ip", &["link", "set", "lo", "up"]);
    for addr in [API, "10.244.1.1", "10.244.1.2"] {
        run("ip", &["addr", "add", &format!("{addr}/32"), "dev", "lo"]);
    }
    let dir = PathBuf::from(format!(
        "/tmp/portcullis-ingress-test-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("mkdir");
    certificates(&dir);
    let mut held = Killed(Vec::new());
    let log = |name: &str| appended(&dir, name);
    held.0.push(
        Command::new(bin.join("etcd"))
            .arg("--data-dir")
            .arg(dir.join("etcd"))
            .args(["--listen-client-urls", "http://127.0.0.1:2379"])
            .args(["--advertise-client-urls", "http://127.0.0.1:2379"])
            .args(["--listen-peer-urls", "http://127.0.0.1:2380"])
            .stdout(log("etcd.log"))
            .stderr(log("etcd.err"))
            .spawn()
            .expect("etcd"),
    );
    held.0.push(apiserver(bin, &dir));
    wait_until("the API server ready", Duration::from_secs(60), || {
        api(&dir, "GET", "/readyz", None).0 == 200
    });

    // The controller's own manifests (its IngressClass, and a service account with only
    // the verbs it uses, which it runs as below), then what a user applies.
    let manifests = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy/kubernetes/portcullis-ingress.yaml");
    apply_manifests(&dir, &manifests);
    let account = "/api/v1/namespaces/portcullis-ingress/serviceaccounts/portcullis-ingress";
    let (status, token) = api(
        &dir,
        "POST",
        &format!("{account}/token"),
        Some(&json!({"spec": {}})),
    );
    assert_eq!(status, 201, "{token}");
    let token = token["status"]["token"]
        .as_str()
        .expect("a token")
        .to_owned();
    create(
        &dir,
        "/api/v1/namespaces",
        json!({"metadata": {"name": "shop"}}),
    );
    create(
        &dir,
        "/api/v1/namespaces/shop/services",
        json!({
            "metadata": {"name": "web"},
            "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080}]},
        }),
    );
    create(
        &dir,
        "/apis/discovery.k8s.io/v1/namespaces/shop/endpointslices",
        slice(&["10.244.1.1", "10.244.1.2"]),
    );
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = rcgen::CertificateParams::new(vec!["shop.example".into()])
        .expect("params")
        .self_signed(&key)
        .expect("certificate");
    create(
        &dir,
        "/api/v1/namespaces/shop/secrets",
        json!({
            "metadata": {"name": "shop-tls"},
            "type": "kubernetes.io/tls",
            "stringData": {"tls.crt": cert.pem(), "tls.key": key.serialize_pem()},
        }),
    );
    create(
        &dir,
        "/apis/networking.k8s.io/v1/namespaces/shop/ingresses",
        json!({
            "metadata": {"name": "shop"},
            "spec": {
                "tls": [{"hosts": ["shop.example"], "secretName": "shop-tls"}],
                "rules": [{"host": "shop.example", "http": {"paths": [{
                    "path": "/", "pathType": "Prefix",
                    "backend": {"service": {"name": "web", "port": {"name": "http"}}},
                }]}}],
            },
        }),
    );
    pod("10.244.1.1:8080", "one");
    pod("10.244.1.2:8080", "two");

    let kubeconfig = dir.join("kubeconfig");
    let ca = std::fs::read_to_string(dir.join("ca.crt")).expect("ca");
    std::fs::write(&kubeconfig, format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: https://{API}:6443\n    certificate-authority-data: {}\nusers:\n- name: controller\n  user:\n    token: {token}\ncontexts:\n- name: test\n  context: {{cluster: test, user: controller}}\ncurrent-context: test\n",
        base64::engine::general_purpose::STANDARD.encode(ca.as_bytes())
    )).expect("kubeconfig");
    let controller = env!("CARGO_BIN_EXE_portcullis-ingress");
    let work = dir.join("controller");

    // --dump: the configuration it would run, as text portcullis reads.
    let dump = Command::new(controller)
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .arg("--dir")
        .arg(&work)
        .arg("--dump")
        .output()
        .expect("--dump");
    let text = String::from_utf8_lossy(&dump.stdout);
    assert!(
        dump.status.success(),
        "{}",
        String::from_utf8_lossy(&dump.stderr)
    );
    assert!(text.contains("server_name shop.example;"), "{text}");
    assert!(text.contains("server 10.244.1.1:8080;"), "{text}");
    portcullis_config::load_str(&text, &work.join("dump.conf"), &Default::default())
        .unwrap_or_else(|e| panic!("{e}\n{text}"));

    held.0.push(start_controller(&dir, &kubeconfig, &work));
    let logs = || std::fs::read_to_string(dir.join("controller.err")).unwrap_or_default();
    wait_until(
        "the Ingress served over HTTPS",
        Duration::from_secs(30),
        || through("https://shop.example/").0 == 200,
    );
    // The probes' port answers once the configuration is served.
    for probe in ["ready", "live"] {
        let out = Command::new("curl")
            .args(["-s", &format!("http://127.0.0.1:8081/{probe}")])
            .output()
            .expect("curl");
        assert_eq!(String::from_utf8_lossy(&out.stdout), format!("{probe}\n"));
    }
    // The Ingress says where it is reached.
    wait_until("the Ingress's status", Duration::from_secs(10), || {
        let path = "/apis/networking.k8s.io/v1/namespaces/shop/ingresses/shop";
        api(&dir, "GET", path, None).1["status"]["loadBalancer"]["ingress"][0]["ip"] == "10.244.0.9"
    });
    // HTTP to a TLS host is redirected.
    let (status, _) = through("http://shop.example/x");
    assert_eq!(status, 301, "{}", logs());
    // Both endpoints take requests (the balancer draws at random: within a few).
    let mut answers = String::new();
    for _ in 0..40 {
        answers.push_str(&through("https://shop.example/").1);
        if answers.contains("one") && answers.contains("two") {
            break;
        }
    }
    assert!(
        answers.contains("one") && answers.contains("two"),
        "{answers}"
    );

    // The Gateway API installed while the controller runs: it is watched from then on.
    install_gateway_api(&dir, bin, &manifests);
    helm_chart(&dir, bin, &manifests);
    gateway_objects(&dir);
    gateway_routes(&dir);

    // Scaled down to one endpoint under wrk's load: no request fails, no reload, and only
    // the endpoint left answers.
    let applied = logs().matches("configuration applied").count();
    let updated = logs().matches("endpoints updated without a reload").count();
    let wrk = Command::new("wrk")
        .args(["-t1", "-c4", "-d4s", "-H", "Host: shop.example"])
        .arg("https://127.0.0.1/")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("wrk (Debian's package) runs");
    // wrk's connections are up before the change.
    std::thread::sleep(Duration::from_millis(500));
    let (status, current) = api(
        &dir,
        "GET",
        "/apis/discovery.k8s.io/v1/namespaces/shop/endpointslices/web-1",
        None,
    );
    assert_eq!(status, 200);
    let mut fewer = slice(&["10.244.1.1"]);
    fewer["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"].clone();
    let (status, answer) = api(
        &dir,
        "PUT",
        "/apis/discovery.k8s.io/v1/namespaces/shop/endpointslices/web-1",
        Some(&fewer),
    );
    assert_eq!(status, 200, "{answer}");
    wait_until(
        "the endpoint scaled away gone",
        Duration::from_secs(10),
        || (0..4).all(|_| through("https://shop.example/").1 == "one"),
    );
    let loaded = wrk.wait_with_output().expect("wrk");
    let report = String::from_utf8_lossy(&loaded.stdout);
    assert!(loaded.status.success(), "{report}");
    let requests: u64 = (report.lines())
        .find_map(|l| {
            l.trim()
                .split_once(" requests in ")
                .map(|(n, _)| n.to_owned())
        })
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0);
    assert!(requests > 100, "too few requests to say: {report}");
    assert!(
        !report.contains("Non-2xx") && !report.contains("Socket errors"),
        "{report}"
    );
    // With no reload: the group's servers changed in place.
    assert!(
        logs().matches("endpoints updated without a reload").count() > updated,
        "{}",
        logs()
    );
    assert_eq!(
        logs().matches("configuration applied").count(),
        applied,
        "{}",
        logs()
    );

    // An Ingress naming a Service that is not there: an Event on it, the others serve on.
    create(
        &dir,
        "/apis/networking.k8s.io/v1/namespaces/shop/ingresses",
        json!({
            "metadata": {"name": "broken"},
            "spec": {"rules": [{"host": "broken.example", "http": {"paths": [{
                "path": "/", "pathType": "Prefix",
                "backend": {"service": {"name": "nowhere", "port": {"number": 80}}},
            }]}}]},
        }),
    );
    wait_until(
        "an Event on the broken Ingress",
        Duration::from_secs(10),
        || {
            let (_, events) = api(
                &dir,
                "GET",
                "/apis/events.k8s.io/v1/namespaces/shop/events",
                None,
            );
            events["items"].as_array().is_some_and(|items| {
                items.iter().any(|e| {
                    e["regarding"]["name"] == "broken"
                        && e["type"] == "Warning"
                        && e["note"]
                            .as_str()
                            .is_some_and(|n| n.contains("service \"shop/nowhere\" not found"))
                })
            })
        },
    );
    assert_eq!(through("https://shop.example/").1, "one", "{}", logs());

    // An Ingress edited under load: not one request fails.
    create(
        &dir,
        "/apis/networking.k8s.io/v1/namespaces/shop/ingresses",
        json!({
            "metadata": {"name": "plain"},
            "spec": {"rules": [{"host": "plain.example", "http": {"paths": [{
                "path": "/", "pathType": "Prefix",
                "backend": {"service": {"name": "web", "port": {"number": 80}}},
            }]}}]},
        }),
    );
    wait_until("the plain host served", Duration::from_secs(10), || {
        through_plain("plain.example") == 200
    });
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let clients: Vec<_> = (0..2)
        .map(|_| load("plain.example", stop.clone()))
        .collect();
    let path = "/apis/networking.k8s.io/v1/namespaces/shop/ingresses/plain";
    for round in 0..5 {
        let (_, mut edited) = api(&dir, "GET", path, None);
        let paths = &mut edited["spec"]["rules"][0]["http"]["paths"];
        paths.as_array_mut().expect("paths").push(json!({
            "path": format!("/round{round}"), "pathType": "Exact",
            "backend": {"service": {"name": "web", "port": {"number": 80}}},
        }));
        let (status, answer) = api(&dir, "PUT", path, Some(&edited));
        assert_eq!(status, 200, "{answer}");
        let applied = logs().matches("configuration applied").count();
        wait_until("the edit applied", Duration::from_secs(10), || {
            logs().matches("configuration applied").count() > applied
        });
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (ok, failed) = clients
        .into_iter()
        .map(|c| c.join().expect("a client"))
        .fold((0, 0), |(a, b), (c, d)| (a + c, b + d));
    assert!(ok > 50, "{ok} requests: too few to say");
    assert_eq!(failed, 0, "{ok} answered, {failed} failed\n{}", logs());

    // Its ConfigMap's keys are every Ingress's defaults; one it does not know is refused
    // with an Event, and the configuration running stays.
    let map_path = "/api/v1/namespaces/portcullis-ingress/configmaps/portcullis-ingress";
    let set = |data: Value| {
        let (_, mut map) = api(&dir, "GET", map_path, None);
        map["data"] = data;
        let (status, answer) = api(&dir, "PUT", map_path, Some(&map));
        assert_eq!(status, 200, "{answer}");
    };
    let running = || std::fs::read_to_string(work.join("nginx.conf")).unwrap_or_default();
    set(json!({"proxy-read-timeout": "33"}));
    wait_until(
        "the ConfigMap's default applied",
        Duration::from_secs(10),
        || running().contains("proxy_read_timeout 33s;"),
    );
    set(json!({"proxy-read-timeout": "44", "location-snippets": "deny all;"}));
    wait_until("an Event on the ConfigMap", Duration::from_secs(10), || {
        let path = "/apis/events.k8s.io/v1/namespaces/portcullis-ingress/events";
        let (_, events) = api(&dir, "GET", path, None);
        events["items"].as_array().is_some_and(|items| {
            items.iter().any(|e| {
                e["regarding"]["kind"] == "ConfigMap"
                    && e["note"]
                        .as_str()
                        .is_some_and(|n| n.contains("\"location-snippets\": snippets are off"))
            })
        })
    });
    assert!(
        running().contains("proxy_read_timeout 33s;"),
        "{}",
        running()
    );
    set(json!({}));

    // The controller restarted: it serves again from what the cluster says.
    kill(&mut held.0[2]);
    held.0[2] = start_controller(&dir, &kubeconfig, &work);
    wait_until(
        "served after the controller's restart",
        Duration::from_secs(30),
        || through("https://shop.example/").1 == "one",
    );
    // The Gateway API there when it starts: watched at once.
    assert_eq!(through_plain("gw.example"), 200, "{}", logs());

    // The API server restarted: the watches come back, and what changed meanwhile is seen.
    kill(&mut held.0[1]);
    held.0[1] = apiserver(bin, &dir);
    wait_until("the API server back", Duration::from_secs(60), || {
        api(&dir, "GET", "/readyz", None).0 == 200
    });
    let slice_path = "/apis/discovery.k8s.io/v1/namespaces/shop/endpointslices/web-1";
    let (_, current) = api(&dir, "GET", slice_path, None);
    let mut both = slice(&["10.244.1.1", "10.244.1.2"]);
    both["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"].clone();
    let (status, answer) = api(&dir, "PUT", slice_path, Some(&both));
    assert_eq!(status, 200, "{answer}");
    wait_until(
        "both endpoints after the API server's restart",
        Duration::from_secs(60),
        || {
            let answers: String = (0..6).map(|_| through("https://shop.example/").1).collect();
            answers.contains("one") && answers.contains("two")
        },
    );
    drop(held);
    let _ = std::fs::remove_dir_all(&dir);
}
