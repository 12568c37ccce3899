//! The NGINX Plus API and the live dashboard that reads it, as a user sees them: the API's
//! paths and JSON against the requests made (a server zone, a location zone, a group of a
//! live peer and a dead one), its errors and writes refused with `write=off` (the writes
//! themselves: `upstream_api.rs`); then the dashboard
//! page loaded by a real browser (Debian's headless Chromium) while requests keep coming,
//! and what it shows checked in the page it made: the counts, a request rate, each peer with
//! its state.

mod support;

use std::io::{Read, Write};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use serde_json::Value;
use support::{get, main_config, Kind, Server};

const CONFIG: &str = r#"
    upstream back {
        zone back 64k;
        server 127.0.0.1:{PORT1};
        server 127.0.0.1:DEAD;
    }
    server {
        listen 127.0.0.1:{PORT1};
        location / { return 200 "back\n"; }
    }
    server {
        listen 127.0.0.1:{PORT0};
        # The load below reconnects as a client must.
        keepalive_requests 100;
        status_zone front;
        location /p/ {
            status_zone proxied;
            proxy_pass http://back/;
        }
        location /api { api write=off; }
        location = /dashboard.html { dashboard /api; }
        location / { return 200 "static\n"; }
    }
"#;

fn start() -> Option<(Server, u16)> {
    let dead = support::free_ports(1)[0];
    let config = main_config(&CONFIG.replace("DEAD", &dead.to_string()));
    Server::start(Kind::Portcullis, 2, &config).map(|s| (s, dead))
}

fn json(port: u16, path: &str) -> (u16, Value) {
    let r = get(port, path).unwrap_or_else(|e| panic!("GET {path}: {e}"));
    assert_eq!(r.header("content-type"), Some("application/json"), "{path}");
    let v = serde_json::from_str(&r.body_text()).unwrap_or_else(|e| panic!("{path}: {e}"));
    (r.status, v)
}

#[test]
fn the_api_answers_as_nginx_plus_s() {
    let Some((server, dead)) = start() else {
        return;
    };
    let port = server.port(0);
    for _ in 0..4 {
        assert_eq!(get(port, "/p/x").expect("GET").status, 200);
    }
    assert_eq!(get(port, "/").expect("GET").status, 200);

    let (status, versions) = json(port, "/api/");
    assert_eq!(
        (status, versions),
        (200, serde_json::json!([1, 2, 3, 4, 5, 6, 7, 8, 9]))
    );
    let (_, zones) = json(port, "/api/9/http/server_zones");
    // Four proxied, one static, and the API requests logged before this one.
    let front = &zones["front"];
    assert_eq!(front["responses"]["2xx"], front["requests"], "{zones}");
    assert!(front["requests"].as_u64() >= Some(6), "{zones}");
    let (_, proxied) = json(port, "/api/9/http/location_zones/proxied");
    assert_eq!(proxied["requests"], 4, "{proxied}");
    assert_eq!(proxied["responses"]["total"], 4, "{proxied}");
    let (_, group) = json(port, "/api/9/http/upstreams/back");
    let peers = group["peers"].as_array().expect("peers");
    assert_eq!(peers.len(), 2, "{group}");
    let live = format!("127.0.0.1:{}", server.port(1));
    let dead = format!("127.0.0.1:{dead}");
    assert_eq!(peers[0]["server"], live.as_str());
    assert_eq!(peers[0]["state"], "up");
    assert_eq!(peers[0]["responses"]["2xx"], 4, "{group}");
    assert_eq!(peers[1]["server"], dead.as_str());
    assert_eq!(peers[1]["state"], "unavail");
    assert_eq!(peers[1]["fails"], 1, "{group}");
    let (_, servers) = json(port, "/api/9/http/upstreams/back/servers");
    assert_eq!(servers[1]["max_fails"], 1, "{servers}");
    assert_eq!(servers[1]["fail_timeout"], "10s", "{servers}");
    let (_, conns) = json(port, "/api/9/connections");
    assert!(conns["accepted"].as_u64() >= Some(8), "{conns}");
    let (_, requests) = json(port, "/api/9/http/requests");
    assert!(requests["total"].as_u64() >= Some(9), "{requests}");
    let (_, ssl) = json(port, "/api/9/ssl");
    assert_eq!(ssl["handshakes"], 0, "{ssl}");
    // What clients that read every endpoint ask for (the exporter's Plus mode).
    let (_, workers) = json(port, "/api/9/workers");
    let workers = workers.as_array().expect("workers");
    assert_eq!(workers.len(), 1, "{workers:?}");
    assert!(workers[0]["http"]["requests"]["total"].as_u64() >= Some(9));
    let (_, processes) = json(port, "/api/9/processes");
    assert_eq!(processes["respawned"], 0);
    for path in [
        "slabs",
        "resolvers",
        "http/caches",
        "http/limit_reqs",
        "http/limit_conns",
    ] {
        let (status, _) = json(port, &format!("/api/9/{path}"));
        assert_eq!(status, 200, "{path}");
    }

    let (status, e) = json(port, "/api/9/http/upstreams/nope");
    assert_eq!(
        (status, &e["error"]["code"]),
        (404, &Value::from("PathNotFound"))
    );
    let (status, e) = json(port, "/api/10/nginx");
    assert_eq!(
        (status, &e["error"]["code"]),
        (404, &Value::from("UnknownVersion"))
    );
    let write = support::request(
        port,
        "DELETE /api/9/http/upstreams/back/servers/1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .expect("DELETE");
    assert_eq!(write.status, 405);
    assert!(
        write.body_text().contains("MethodDisabled"),
        "{}",
        write.body_text()
    );
}

/// Requests until `stop`, on a kept connection (a new one when the server closes it, as
/// after keepalive_requests): a load for the dashboard to show.
fn keep_asking(port: u16, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let connect = || std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
        let mut n = 0;
        let mut c = connect();
        let mut buf = [0u8; 4096];
        while !stop.load(Ordering::Relaxed) {
            let answered = c
                .write_all(b"GET /p/x HTTP/1.1\r\nHost: x\r\n\r\n")
                .and_then(|()| c.read(&mut buf));
            match answered {
                Ok(got) if got > 0 => n += 1,
                _ => c = connect(),
            }
        }
        n
    })
}

#[test]
fn the_dashboard_shows_the_server_live_in_a_browser() {
    let Some(chromium) = support::chromium_binary() else {
        return;
    };
    let Some((server, dead)) = start() else {
        return;
    };
    let port = server.port(0);
    // The dead peer is found dead by a request before the page loads.
    for _ in 0..2 {
        get(port, "/p/x").expect("GET");
    }
    let stop = Arc::new(AtomicBool::new(false));
    let load = keep_asking(port, stop.clone());
    let home = support::TempDir::new("chromium");
    // The page refreshes once a second: the budget lets it read the API a few times.
    let out = Command::new(chromium)
        .args([
            "--no-sandbox",
            "--disable-gpu",
            "--virtual-time-budget=3500",
        ])
        .arg(format!("--user-data-dir={}", home.path().display()))
        .arg("--dump-dom")
        .arg(format!("http://127.0.0.1:{port}/dashboard.html"))
        .env("HOME", home.path())
        .output()
        .expect("run chromium");
    stop.store(true, Ordering::Relaxed);
    let asked = load.join().expect("load");
    assert!(asked > 0);
    let dom = String::from_utf8_lossy(&out.stdout);
    let value = |id: &str| -> String {
        let start = format!("id=\"{id}\">");
        let at = dom
            .find(&start)
            .unwrap_or_else(|| panic!("no #{id} in\n{dom}"))
            + start.len();
        dom[at..].split('<').next().unwrap_or_default().to_owned()
    };
    assert!(
        dom.contains("updated "),
        "the page never read the API:\n{dom}"
    );
    let total = value("requests-total");
    assert!(total != "–" && total != "0", "{total}");
    let rate = value("requests-rate");
    assert!(
        rate.trim_end_matches('k')
            .parse::<f64>()
            .is_ok_and(|r| r > 0.0),
        "no request rate under load: {rate:?}"
    );
    let live = format!(
        "data-peer=\"127.0.0.1:{}\" data-state=\"up\"",
        server.port(1)
    );
    let down = format!("data-peer=\"127.0.0.1:{dead}\" data-state=\"unavail\"");
    assert!(dom.contains(&live), "{live} not in\n{dom}");
    assert!(dom.contains(&down), "{down} not in\n{dom}");
    assert!(dom.contains("data-server-zone=\"front\""), "{dom}");
    assert!(dom.contains("data-location-zone=\"proxied\""), "{dom}");
    // The page is whole in itself: nothing is loaded from elsewhere.
    let page = get(port, "/dashboard.html").expect("GET").body_text();
    assert!(!page.contains("http://") && !page.contains("https://") && !page.contains("src="));
}
