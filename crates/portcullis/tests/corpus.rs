//! A corpus of real-shaped configurations (tests/corpus/*.conf), each served side by side by
//! nginx and portcullis on the same document root and compared request by request.
//!
//! Every corpus file is the body of an `http {}` block, written in the shape configurations
//! have in the wild (a single-page app, a docker-compose front door, CORS, h5bp headers, ...).
//! Its first comment lines say what to send and compare:
//!
//! ```text
//! # shape: what the configuration is for
//! #   (a continuation of the text above)
//! # GET /path
//! # POST /upload | body=1000 | Content-Type: application/json
//! # GET / | Host: www.example.test | port=1 | ignore-body
//! # headers: cache-control expires
//! ```
//!
//! A request line is a method, a target and `|`-separated extras: a header (`Host:` replaces
//! the default `localhost`), `body=N` (N bytes with a Content-Length), `port=N` (the Nth
//! listener instead of `{PORT0}`), `ignore-body` (a body that differs on every request, such
//! as stub_status counters). `headers:` names the headers compared on every request of the
//! file, beside content-type, location and content-length. Placeholders: `{PORT0}`,
//! `{PORT1}`, ... and `{PREFIX}` (filled by the harness, different for the two servers) and
//! `{DOCROOT}` (the document root filled here, shared by both).
//!
//! Both outcomes are held to two tables: [`REFUSED`], the configurations portcullis refuses
//! on purpose, with its exact message, and [`KNOWN_DIFFERENCES`], each request whose answer
//! differs from nginx's, with what differs and why. The test fails when a file is refused
//! or differs in a way the tables do not say, and when a listed refusal or difference is
//! gone, so that the tables stay true.

mod support;

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

use support::{Client, Kind, Response, Server, TempDir};

/// Modification time of every document-root file, so that ETag and Last-Modified are fixed.
const MTIME_SECS: u64 = 1_577_836_800;
/// Headers compared on every request, beside the ones a file names.
const ALWAYS_COMPARED: &[&str] = &["content-type", "location", "content-length"];
/// How far apart two `Expires` dates may be: the two servers answer in different seconds.
const EXPIRES_SLACK_SECS: i64 = 2;
/// Set, every answer of both servers is printed, to check the corpus against nginx by eye.
const DUMP_ENV: &str = "PORTCULLIS_CORPUS_DUMP";

/// Configurations portcullis refuses on purpose: the file, the `[emerg]` message without its
/// ` in file:line` suffix, and why it is refused.
const REFUSED: &[(&str, &str, &str)] = &[];

/// Answers of portcullis that differ from nginx's on a configuration it loads: the file,
/// the request line as written in the file, what differs (`status`, `body`, `response` for
/// one side closing without an answer, and headers' names, in the order compared) and why.
const KNOWN_DIFFERENCES: &[(&str, &str, &str, &str)] = &[];

/// One request of a corpus file.
#[derive(Debug)]
struct Request {
    /// The request's line in the file, without `# `: names it in the tables.
    spec: String,
    method: String,
    target: String,
    headers: Vec<(String, String)>,
    body: Option<usize>,
    port: usize,
    compare_body: bool,
}

impl Request {
    fn parse(spec: &str) -> Result<Request, String> {
        let mut parts = spec.split(" | ");
        let first = parts.next().unwrap_or_default();
        let (method, target) = first
            .split_once(' ')
            .ok_or_else(|| format!("no target in {spec:?}"))?;
        let mut request = Request {
            spec: spec.to_owned(),
            method: method.to_owned(),
            target: target.to_owned(),
            headers: Vec::new(),
            body: None,
            port: 0,
            compare_body: true,
        };
        for part in parts {
            if let Some(n) = part.strip_prefix("body=") {
                request.body = Some(n.parse().map_err(|_| format!("bad {part:?}"))?);
            } else if let Some(n) = part.strip_prefix("port=") {
                request.port = n.parse().map_err(|_| format!("bad {part:?}"))?;
            } else if part == "ignore-body" {
                request.compare_body = false;
            } else if let Some((name, value)) = part.split_once(": ") {
                request.headers.push((name.to_owned(), value.to_owned()));
            } else {
                return Err(format!("unknown part {part:?} in {spec:?}"));
            }
        }
        Ok(request)
    }

    fn is_head(&self) -> bool {
        self.method == "HEAD"
    }

    /// The raw bytes: Host (localhost unless given), the extra headers, Connection: close.
    fn raw(&self) -> Vec<u8> {
        let mut head = format!("{} {} HTTP/1.1\r\n", self.method, self.target);
        if !self
            .headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case("host"))
        {
            head.push_str("Host: localhost\r\n");
        }
        for (name, value) in &self.headers {
            let _ = write!(head, "{name}: {value}\r\n");
        }
        if let Some(len) = self.body {
            let _ = write!(head, "Content-Length: {len}\r\n");
        }
        head.push_str("Connection: close\r\n\r\n");
        let mut raw = head.into_bytes();
        raw.extend((0..self.body.unwrap_or(0)).map(|i| b'a' + (i % 26) as u8));
        raw
    }
}

/// One configuration of the corpus.
#[derive(Debug)]
struct Entry {
    name: String,
    /// The `http {}` body, `{DOCROOT}` filled in.
    http: String,
    requests: Vec<Request>,
    headers: Vec<String>,
    nports: usize,
}

impl Entry {
    fn parse(name: &str, text: &str, docroot: &Path) -> Result<Entry, String> {
        let mut requests = Vec::new();
        let mut headers: Vec<String> = ALWAYS_COMPARED.iter().map(|h| h.to_string()).collect();
        let mut shape = false;
        for line in text.lines() {
            let Some(comment) = line.strip_prefix('#') else {
                break;
            };
            let comment = comment.strip_prefix(' ').unwrap_or(comment);
            if let Some(rest) = comment.strip_prefix("shape:") {
                shape = !rest.trim().is_empty();
            } else if let Some(rest) = comment.strip_prefix("headers:") {
                headers.extend(rest.split_whitespace().map(str::to_ascii_lowercase));
            } else if comment.starts_with("  ") {
                // The description goes on.
            } else if comment
                .split(' ')
                .next()
                .is_some_and(|m| !m.is_empty() && m.bytes().all(|b| b.is_ascii_uppercase()))
            {
                if requests.iter().any(|r: &Request| r.spec == comment) {
                    return Err(format!("request {comment:?} twice: the tables name it"));
                }
                requests.push(Request::parse(comment)?);
            } else {
                return Err(format!("unknown comment line {line:?}"));
            }
        }
        if !shape {
            return Err("no `# shape:` line".into());
        }
        if requests.is_empty() {
            return Err("no request lines".into());
        }
        let nports = (0..10)
            .filter(|i| text.contains(&format!("{{PORT{i}}}")))
            .max()
            .map_or(1, |i| i + 1);
        Ok(Entry {
            name: name.to_owned(),
            http: text.replace("{DOCROOT}", &docroot.display().to_string()),
            requests,
            headers,
            nports,
        })
    }
}

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus")
}

fn load_corpus(docroot: &Path) -> Vec<Entry> {
    let mut names: Vec<String> = fs::read_dir(corpus_dir())
        .expect("read tests/corpus")
        .map(|e| {
            e.expect("dir entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|n| n.ends_with(".conf"))
        .collect();
    names.sort();
    names
        .iter()
        .map(|name| {
            let text = fs::read_to_string(corpus_dir().join(name)).expect("read corpus file");
            Entry::parse(name, &text, docroot).unwrap_or_else(|e| panic!("{name}: {e}"))
        })
        .collect()
}

/// The document root every configuration serves: pages, assets, dot files, directories with
/// and without an index, a 2 KB binary, a compressible text.
fn fill_docroot(dir: &TempDir) {
    let big_text: String = (0..60)
        .map(|i| format!("line {i:02} of a text that compresses well\n"))
        .collect();
    let binary: Vec<u8> = (0..2048u32).map(|i| (i * 7 % 251) as u8).collect();
    let files: &[(&str, &[u8])] = &[
        ("index.html", b"<html><body>home page</body></html>\n"),
        ("404.html", b"<html><body>custom not found</body></html>\n"),
        (
            "50x.html",
            b"<html><body>custom server error</body></html>\n",
        ),
        ("maintenance.html", b"<html><body>back soon</body></html>\n"),
        ("maintenance.on", b""),
        ("css/site.css", b"body { color: #333; margin: 0 auto; }\n"),
        ("js/app.js", b"console.log('app started');\n"),
        ("assets/app.3f2a9c.js", b"var bundle = 1;\n"),
        ("assets/logo.png", b"\x89PNG\r\n\x1a\nnot really a png\n"),
        ("data/api.json", b"{\"items\":[1,2,3]}\n"),
        ("data/big.txt", big_text.as_bytes()),
        ("data/robots-disallow.txt", b"User-agent: *\nDisallow: /\n"),
        ("files/report.bin", &binary),
        ("feed.xml", b"<?xml version=\"1.0\"?><rss></rss>\n"),
        ("page.md", b"# A page\n"),
        ("noext", b"no extension\n"),
        (".htaccess", b"Deny from all\n"),
        // "user" with the password "secret".
        (".htpasswd", b"user:$apr1$rSiP3vYa$nm/ZreXK/j2l5TkCLqoTA.\n"),
        ("admin/index.html", b"<html><body>admin</body></html>\n"),
        (".git/config", b"[core]\n"),
        (
            ".well-known/security.txt",
            b"Contact: mailto:security@example.test\n",
        ),
        (".well-known/acme-challenge/token1", b"token1.thumbprint\n"),
        ("sub/index.html", b"<html><body>sub index</body></html>\n"),
        ("sub/page.html", b"<html><body>sub page</body></html>\n"),
        ("sub/.hidden", b"hidden\n"),
        ("noindex/readme.txt", b"a directory without an index\n"),
        ("docs/README.txt", b"read me first\n"),
        ("legacy/old.txt", b"old\n"),
    ];
    dir.write_files(
        files,
        SystemTime::UNIX_EPOCH + Duration::from_secs(MTIME_SECS),
    );
}

/// Runs `-t` on the configuration in a scratch prefix: `Ok` when it loads, else the first
/// `[emerg]` message without its ` in file:line` suffix.
fn config_test(kind: Kind, entry: &Entry) -> Result<(), String> {
    let binary = kind.binary().expect("binary");
    let prefix = TempDir::new("corpus-t");
    let text = support::render(
        &support::main_config(&entry.http),
        prefix.path(),
        &support::free_ports(entry.nports),
    );
    let conf = prefix.write("server.conf", text);
    let out = support::test_config(Command::new(binary), prefix.path(), &conf);
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let emerg = stderr
        .lines()
        .find_map(|l| l.split_once("[emerg] ").map(|(_, m)| m))
        .unwrap_or(&stderr);
    let message = match emerg.rfind(" in ") {
        Some(at) if emerg[at..].contains(&conf.display().to_string()) => &emerg[..at],
        _ => emerg,
    };
    Err(message.to_owned())
}

/// What one server answered to one request.
#[derive(Debug)]
enum Outcome {
    Answer(Response),
    /// Closed without a (whole) answer, as `return 444` does.
    NoAnswer(String),
}

impl Outcome {
    fn describe(&self) -> String {
        match self {
            Outcome::Answer(r) => format!("{} {:?}", r.status, r.body_text()),
            Outcome::NoAnswer(why) => format!("no answer ({why})"),
        }
    }
}

fn send(server: &Server, request: &Request) -> Outcome {
    let mut client = Client::connect(server.port(request.port));
    if let Err(e) = client.send(&request.raw()) {
        return Outcome::NoAnswer(format!("send: {e}"));
    }
    match client.read_response(request.is_head()) {
        Ok(r) => Outcome::Answer(r),
        Err(e) => Outcome::NoAnswer(e.kind().to_string()),
    }
}

/// Replaces what legitimately differs between the two servers: their ports and prefixes,
/// and the signature line of built-in error pages.
fn normalise(text: &str, server: &Server, nports: usize) -> String {
    let mut text = text.replace(&server.prefix().display().to_string(), "{PREFIX}");
    // Longest ports first, so that no port is replaced inside another.
    let mut ports: Vec<(usize, String)> = (0..nports)
        .map(|i| (i, server.port(i).to_string()))
        .collect();
    ports.sort_by_key(|(_, p)| std::cmp::Reverse(p.len()));
    for (i, port) in ports {
        text = text.replace(&port, &format!("{{PORT{i}}}"));
    }
    if let Some(start) = text.find("<hr><center>") {
        if let Some(len) = text[start..].find("</center>") {
            text.replace_range(start..start + len, "<hr><center>SERVER");
        }
    }
    text
}

fn is_error_page(body: &[u8]) -> bool {
    body.windows(12).any(|w| w == b"<hr><center>")
}

/// All values of header `name`, in order, joined by newlines; `None` when absent.
fn header_values(r: &Response, name: &str) -> Option<String> {
    let values: Vec<&str> = r
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
        .collect();
    (!values.is_empty()).then(|| values.join("\n"))
}

/// Seconds since the epoch of an IMF-fixdate (`Thu, 01 Jan 1970 00:00:01 GMT`).
fn parse_http_date(text: &str) -> Option<i64> {
    let fields: Vec<&str> = text.split_whitespace().collect();
    let [_, day, month, year, time, "GMT"] = fields.as_slice() else {
        return None;
    };
    let months = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let month = months.iter().position(|m| m == month)? as i64 + 1;
    let (day, year): (i64, i64) = (day.parse().ok()?, year.parse().ok()?);
    let hms: Vec<i64> = time.split(':').filter_map(|f| f.parse().ok()).collect();
    let [h, m, s] = hms.as_slice() else {
        return None;
    };
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + h * 3600 + m * 60 + s)
}

/// How the two servers' answers to one request differ.
#[derive(Debug)]
struct Difference {
    file: String,
    request: String,
    /// What differs, each with nginx's and portcullis's side, in the order compared.
    aspects: Vec<(String, String, String)>,
}

impl Difference {
    /// The names of what differs, as [`KNOWN_DIFFERENCES`] writes them.
    fn what(&self) -> String {
        let names: Vec<&str> = self.aspects.iter().map(|(w, _, _)| w.as_str()).collect();
        names.join(" ")
    }

    fn details(&self) -> String {
        let mut out = String::new();
        for (what, n, p) in &self.aspects {
            let _ = write!(
                out,
                "\n    {what}:\n      nginx:      {}\n      portcullis: {}",
                shorten(n),
                shorten(p)
            );
        }
        out
    }
}

/// A value cut to a readable length for a failure message.
fn shorten(text: &str) -> String {
    const MAX: usize = 300;
    match text.char_indices().nth(MAX) {
        Some((at, _)) => format!("{}... ({} bytes)", &text[..at], text.len()),
        None => text.to_owned(),
    }
}

/// A body for comparison: text with the servers' ports and prefix replaced, or the bytes.
fn comparable_body(body: &[u8], server: &Server, nports: usize) -> Result<String, Vec<u8>> {
    match std::str::from_utf8(body) {
        Ok(text) => Ok(normalise(text, server, nports)),
        Err(_) => Err(body.to_vec()),
    }
}

/// Compares the two answers to one request; `None` when they agree.
fn compare(
    entry: &Entry,
    request: &Request,
    (nginx, n_server): (&Outcome, &Server),
    (ours, p_server): (&Outcome, &Server),
) -> Option<Difference> {
    let mut aspects = Vec::new();
    match (nginx, ours) {
        (Outcome::Answer(n), Outcome::Answer(p)) => {
            compare_answers(entry, request, (n, n_server), (p, p_server), &mut aspects);
        }
        (Outcome::NoAnswer(_), Outcome::NoAnswer(_)) => {}
        (n, p) => aspects.push(("response".to_owned(), n.describe(), p.describe())),
    }
    (!aspects.is_empty()).then(|| Difference {
        file: entry.name.clone(),
        request: request.spec.clone(),
        aspects,
    })
}

fn compare_answers(
    entry: &Entry,
    request: &Request,
    (n, n_server): (&Response, &Server),
    (p, p_server): (&Response, &Server),
    aspects: &mut Vec<(String, String, String)>,
) {
    if n.status != p.status {
        aspects.push(("status".into(), n.status.to_string(), p.status.to_string()));
    }
    let error_page = is_error_page(&n.body) || is_error_page(&p.body);
    for name in &entry.headers {
        if name == "content-length" && (error_page || (request.is_head() && n.status >= 300)) {
            // A built-in page's signature differs in length; its body is compared without it.
            continue;
        }
        let nv = header_values(n, name).map(|v| normalise(&v, n_server, entry.nports));
        let pv = header_values(p, name).map(|v| normalise(&v, p_server, entry.nports));
        let same = match (&nv, &pv) {
            (Some(a), Some(b)) if name == "expires" => {
                match (parse_http_date(a), parse_http_date(b)) {
                    (Some(x), Some(y)) => (x - y).abs() <= EXPIRES_SLACK_SECS,
                    _ => a == b,
                }
            }
            (a, b) => a == b,
        };
        if !same {
            aspects.push((name.clone(), format!("{nv:?}"), format!("{pv:?}")));
        }
    }
    if request.compare_body && !request.is_head() {
        let nb = comparable_body(&decoded(n), n_server, entry.nports);
        let pb = comparable_body(&decoded(p), p_server, entry.nports);
        if nb != pb {
            let show = |b: &Result<String, Vec<u8>>| match b {
                Ok(text) => format!("{text:?}"),
                Err(bytes) => format!("{} bytes of binary", bytes.len()),
            };
            aspects.push(("body".into(), show(&nb), show(&pb)));
        }
    }
}

/// The body as the client reads it: a gzip body decompressed (the compressed bytes depend on
/// the compressor, which is not the same library; the `Content-Encoding` is compared as a
/// header).
fn decoded(r: &Response) -> Vec<u8> {
    if r.header("content-encoding") != Some("gzip") {
        return r.body.clone();
    }
    let mut out = Vec::new();
    match std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&r.body[..]), &mut out) {
        Ok(_) => out,
        Err(_) => r.body.clone(),
    }
}

/// Serves one loaded entry with the servers of `kinds` (nginx first) and compares their
/// answers when both run.
fn serve_entry(entry: &Entry, kinds: &[Kind]) -> Vec<Difference> {
    let template = support::main_config(&entry.http);
    let servers: Vec<Server> = kinds
        .iter()
        .filter_map(|&kind| Server::start(kind, entry.nports, &template))
        .collect();
    let dump = std::env::var_os(DUMP_ENV).is_some();
    let mut diffs = Vec::new();
    for request in &entry.requests {
        let outcomes: Vec<Outcome> = servers.iter().map(|s| send(s, request)).collect();
        for (server, outcome) in servers.iter().zip(&outcomes).filter(|_| dump) {
            let head = match outcome {
                Outcome::Answer(r) => format!("{:?}", r.headers),
                Outcome::NoAnswer(_) => String::new(),
            };
            let _ = writeln!(
                std::io::stderr(),
                "{} {:?} {}: {}\n    {head}",
                entry.name,
                request.spec,
                server.kind,
                shorten(&outcome.describe())
            );
        }
        if let ([n, p], [n_server, p_server]) = (outcomes.as_slice(), servers.as_slice()) {
            diffs.extend(compare(entry, request, (n, n_server), (p, p_server)));
        }
    }
    diffs
}

/// Checks the configuration test of both programs against [`REFUSED`]: `true` when
/// portcullis loads the entry and it is to be served.
fn check_loading(entry: &Entry, both: bool, failures: &mut Vec<String>) -> bool {
    if let Err(message) = config_test(Kind::Nginx, entry) {
        failures.push(format!("{}: nginx refuses it: {message}", entry.name));
        return false;
    }
    let expected = REFUSED
        .iter()
        .find(|(f, _, _)| *f == entry.name)
        .map(|(_, message, _)| *message);
    if !both {
        // Only nginx runs: it serves what portcullis loads.
        return expected.is_none();
    }
    match (expected, config_test(Kind::Portcullis, entry)) {
        (None, Ok(())) => true,
        (Some(want), Err(got)) if want == got => false,
        (Some(want), Err(got)) => {
            failures.push(format!(
                "{}: refused with {got:?}, REFUSED says {want:?}",
                entry.name
            ));
            false
        }
        (Some(want), Ok(())) => {
            failures.push(format!(
                "{}: loads now; REFUSED says {want:?}: take it off the table",
                entry.name
            ));
            true
        }
        (None, Err(got)) => {
            failures.push(format!(
                "{}: portcullis refuses it: {got:?} (not in REFUSED)",
                entry.name
            ));
            false
        }
    }
}

/// Holds the differences found to [`KNOWN_DIFFERENCES`], both ways.
fn check_differences(differences: &[Difference], failures: &mut Vec<String>) {
    for d in differences {
        let listed = KNOWN_DIFFERENCES
            .iter()
            .find(|(f, r, _, _)| *f == d.file && *r == d.request);
        match listed {
            Some((_, _, what, _)) if *what == d.what() => {}
            Some((_, _, what, _)) => failures.push(format!(
                "{}: {:?}: differs in {:?}, KNOWN_DIFFERENCES says {what:?}{}",
                d.file,
                d.request,
                d.what(),
                d.details()
            )),
            None => failures.push(format!(
                "{}: {:?}: differs in {:?} (not in KNOWN_DIFFERENCES){}",
                d.file,
                d.request,
                d.what(),
                d.details()
            )),
        }
    }
    for (file, request, what, why) in KNOWN_DIFFERENCES {
        if !differences
            .iter()
            .any(|d| d.file == *file && d.request == *request)
        {
            failures.push(format!(
                "{file}: {request:?}: answered as nginx does now, KNOWN_DIFFERENCES says \
                 {what:?} ({why}): take it off the table"
            ));
        }
    }
}

#[test]
fn corpus_serves_as_nginx_serves() {
    let started = Instant::now();
    if support::nginx_binary().is_none() {
        return;
    }
    let kinds = support::kinds();
    let both = kinds == [Kind::Nginx, Kind::Portcullis];
    let docroot = TempDir::new("corpus-docroot");
    fill_docroot(&docroot);
    let corpus = load_corpus(docroot.path());
    assert!(
        (25..=35).contains(&corpus.len()),
        "{} corpus files",
        corpus.len()
    );
    let names: BTreeSet<&str> = corpus.iter().map(|e| e.name.as_str()).collect();
    for (i, (file, _, _)) in REFUSED.iter().enumerate() {
        assert!(
            REFUSED[..i].iter().all(|(f, _, _)| f != file),
            "REFUSED lists {file} twice"
        );
        assert!(
            names.contains(file),
            "REFUSED names {file}, not in the corpus"
        );
    }
    let mut rows = BTreeSet::new();
    for (file, request, _, _) in KNOWN_DIFFERENCES {
        assert!(
            rows.insert((file, request)),
            "KNOWN_DIFFERENCES lists {file} {request:?} twice"
        );
        let entry = corpus.iter().find(|e| e.name == *file);
        assert!(
            entry.is_some_and(|e| e.requests.iter().any(|r| r.spec == *request)),
            "KNOWN_DIFFERENCES names {file} {request:?}, not in the corpus"
        );
    }

    let mut failures = Vec::new();
    let mut differences = Vec::new();
    let (mut loaded, mut identical) = (0, 0);
    for entry in &corpus {
        if !check_loading(entry, both, &mut failures) {
            continue;
        }
        loaded += 1;
        let diffs = serve_entry(entry, &kinds);
        if diffs.is_empty() {
            identical += 1;
        }
        differences.extend(diffs);
    }
    if both {
        check_differences(&differences, &mut failures);
    }
    let compared = if both {
        format!("{identical} served as nginx serves them")
    } else {
        "portcullis not run".to_owned()
    };
    let _ = writeln!(
        std::io::stderr(),
        "corpus: {} files, {loaded} loaded, {compared}, in {:?}",
        corpus.len(),
        started.elapsed()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn http_dates_parse() {
    assert_eq!(parse_http_date("Thu, 01 Jan 1970 00:00:01 GMT"), Some(1));
    assert_eq!(
        parse_http_date("Wed, 01 Jan 2020 00:00:00 GMT"),
        Some(MTIME_SECS as i64)
    );
    assert_eq!(
        parse_http_date("Thu, 31 Dec 2037 23:55:55 GMT"),
        Some(2_145_916_555)
    );
    assert_eq!(parse_http_date("yesterday"), None);
}

#[test]
fn request_lines_parse() {
    let r = Request::parse("POST /up | body=3 | Host: a.test | port=1 | ignore-body").unwrap();
    assert_eq!((r.method.as_str(), r.target.as_str()), ("POST", "/up"));
    assert_eq!((r.body, r.port, r.compare_body), (Some(3), 1, false));
    assert_eq!(
        String::from_utf8(r.raw()).unwrap(),
        "POST /up HTTP/1.1\r\nHost: a.test\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc"
    );
    assert!(Request::parse("GET / | nonsense").is_err());
}
