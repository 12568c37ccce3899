//! HTTP/2 clients for the black-box tests: curl with prior knowledge (h2c) for single
//! requests, h2load for many concurrent streams. Both are Debian packages (curl,
//! nghttp2-client); a missing one is a visible skip, or a failure under CI.

use std::fs;
use std::path::PathBuf;
use std::process::Command;

use crate::support::{skip, TempDir};

/// One response as curl saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct H2Response {
    /// "2" for HTTP/2, "1.1" for HTTP/1.1.
    pub version: String,
    pub status: u16,
    /// Names lowercased, in order.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl H2Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Finds a tool on PATH; missing, it fails under CI and is a visible skip elsewhere.
pub fn tool(name: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|candidate| candidate.is_file())
    });
    if found.is_none() {
        if std::env::var_os("CI").is_some() {
            panic!("{name} not found");
        }
        skip(&format!("{name} not found"));
    }
    found
}

/// Runs curl on `url` with `args` (e.g. `--http2-prior-knowledge`, `-I`, `-r 0-9`) and
/// returns the last response it received, or `None` when curl is not installed or got none.
pub fn curl(args: &[&str], url: &str) -> Option<H2Response> {
    let curl = tool("curl")?;
    let dir = TempDir::new("curl");
    let head = dir.path().join("head");
    let body = dir.path().join("body");
    let _ = Command::new(curl)
        .args(["-s", "--max-time", "10", "-D"])
        .arg(&head)
        .arg("-o")
        .arg(&body)
        .args(args)
        .arg(url)
        .status()
        .expect("run curl");
    let head = fs::read_to_string(&head).ok()?;
    // With 100 Continue or redirects there may be several heads: the last one counts.
    let last = head
        .split("\r\n\r\n")
        .filter(|h| h.starts_with("HTTP/"))
        .last()?;
    let mut lines = last.split("\r\n");
    let status_line = lines.next()?;
    let mut words = status_line.split_whitespace();
    let version = words.next()?.trim_start_matches("HTTP/").to_string();
    let status = words.next()?.parse().ok()?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Some(H2Response {
        version,
        status,
        headers,
        // With -I, curl writes the head where the body would go.
        body: if args.contains(&"-I") {
            Vec::new()
        } else {
            fs::read(&body).unwrap_or_default()
        },
    })
}

/// What h2load reported.
#[derive(Debug, Default)]
pub struct Load {
    pub succeeded: u64,
    pub failed: u64,
    pub errored: u64,
    /// The status classes line, e.g. "1000 2xx, 0 3xx, 0 4xx, 0 5xx".
    pub statuses: String,
    pub requests_per_second: f64,
}

/// Runs `h2load -n requests -c clients -m streams url` (prior knowledge on http://).
pub fn h2load(requests: u64, clients: u32, streams: u32, url: &str) -> Option<Load> {
    let h2load = tool("h2load")?;
    let out = Command::new(h2load)
        .args(["-n", &requests.to_string()])
        .args(["-c", &clients.to_string()])
        .args(["-m", &streams.to_string()])
        .arg(url)
        .output()
        .expect("run h2load");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut load = Load::default();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("requests: ") {
            for part in rest.split(", ") {
                let mut it = part.split_whitespace();
                let n: u64 = it.next().and_then(|n| n.parse().ok()).unwrap_or(0);
                match it.next() {
                    Some("succeeded") => load.succeeded = n,
                    Some("failed") => load.failed = n,
                    Some("errored") => load.errored = n,
                    _ => {}
                }
            }
        } else if let Some(rest) = line.strip_prefix("status codes: ") {
            load.statuses = rest.to_string();
        } else if line.starts_with("finished in") {
            load.requests_per_second = line
                .split(", ")
                .nth(1)
                .and_then(|s| s.split_whitespace().next())
                .and_then(|n| n.parse().ok())
                .unwrap_or(0.0);
        }
    }
    Some(load)
}
