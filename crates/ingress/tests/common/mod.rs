//! What the tests that serve a translated configuration share: backends that echo what
//! reached them, requests, objects, and the server started on the text.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

#[path = "../../../portcullis/tests/support/ports.rs"]
mod ports;

/// A free port of 127.0.0.1, never handed out before in this test process.
pub fn free_port() -> u16 {
    ports::free_ports(1)[0]
}

/// A backend that answers every request with its name, the request line and the headers
/// it got, one per line.
pub fn backend(name: &'static str) -> u16 {
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
pub fn request_to(
    host: &str,
    port: u16,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
) -> (u16, BTreeMap<String, String>, String) {
    let mut c = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    let mut text = format!("{method} {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
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

pub fn service(name: &str, backend_port: u16) -> (Value, Value) {
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

pub fn meta(name: &str, created: &str) -> Value {
    json!({"name": name, "namespace": "shop", "creationTimestamp": created, "generation": 1})
}

pub fn temp(label: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("{label}-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("logs")).expect("mkdir");
    dir
}

pub fn default_certificate(dir: &Path) -> (PathBuf, PathBuf) {
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

/// The server on `http` (a generated `http` block's contents), with one worker.
pub fn start(http: &str, dir: &Path) -> portcullis_server::Server {
    let text = format!(
        "worker_processes 1;\nerror_log stderr notice;\nevents {{}}\nhttp {{\n    access_log off;\n{http}}}\n"
    );
    if std::env::var_os("SHOW").is_some() {
        eprintln!("{text}");
    }
    let conf = dir.join("nginx.conf");
    let loaded = portcullis_config::load_str(&text, &conf, &Default::default())
        .unwrap_or_else(|e| panic!("{e}\n{text}"));
    let compiled =
        portcullis_server::compile(&loaded, dir, None).unwrap_or_else(|e| panic!("{e}\n{text}"));
    portcullis_server::Server::start(compiled).expect("the server starts")
}
