//! Black-box tests of `load`: the seeds' configurations, `include`, `-T` output, and
//! robustness against arbitrary input.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use portcullis_config::{is_known, load, load_str, Directive, LoadOptions, MIME_TYPES};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// A fresh directory under the system temp dir, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("portcullis-config-{}-{n}", std::process::id()));
        fs::create_dir_all(&dir).expect("create temp dir");
        TempDir(dir)
    }

    fn write(&self, rel: &str, text: &str) -> PathBuf {
        let path = self.0.join(rel);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).expect("create dir");
        }
        fs::write(&path, text).expect("write file");
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn find<'a>(ds: &'a [Directive], name: &str) -> &'a Directive {
    ds.iter()
        .find(|d| d.name == name)
        .unwrap_or_else(|| panic!("no {name}"))
}

/// Every directive in the tree, depth first.
fn walk<'a>(ds: &'a [Directive], out: &mut Vec<&'a Directive>) {
    for d in ds {
        out.push(d);
        walk(d.children(), out);
    }
}

#[test]
fn seed_configs_load() {
    for seed in [
        "seed000-upstream",
        "seed000-gateway",
        "seed001-upstream",
        "seed001-gateway",
    ] {
        let path = fixtures().join(seed).join("nginx.conf");
        let loaded = load(&path, &LoadOptions::default()).unwrap_or_else(|e| panic!("{seed}: {e}"));
        // Main file, mime.types, the conf.d file.
        assert_eq!(loaded.files.len(), 3, "{seed}");
        assert_eq!(loaded.files[0].path, path);
        let http = find(&loaded.directives, "http");
        let types = find(http.children(), "types");
        assert!(types.children().len() > 50, "{seed}: mime types included");
        let servers: Vec<_> = http
            .children()
            .iter()
            .filter(|d| d.name == "server")
            .collect();
        assert_eq!(servers.len(), 1, "{seed}");
        let mut all = Vec::new();
        walk(&loaded.directives, &mut all);
        assert!(
            all.iter().all(|d| d.name != "include"),
            "{seed}: includes expanded"
        );
    }
}

#[test]
fn seed_gateway_details() {
    let path = fixtures().join("seed000-gateway/nginx.conf");
    let loaded = load(&path, &LoadOptions::default()).expect("loads");
    let http = find(&loaded.directives, "http");
    let upstreams: Vec<_> = http.children_named("upstream").map(|d| d.arg(0)).collect();
    assert_eq!(
        upstreams,
        ["ssl_file_server_com", "api_ssl_file_server_com"]
    );
    let server = find(http.children(), "server");
    let locations: Vec<_> = server.children_named("location").collect();
    assert_eq!(locations[0].arg(0), "~");
    assert_eq!(locations[0].arg(1), "^/api_old/(.*)*$");
    let header = find(locations[1].children(), "proxy_set_header");
    assert_eq!(header.arg(1), "");
    assert!(header.args[1].quoted);
    // The span of a directive from an included file names that file.
    assert!(header.span.file.ends_with("conf.d/default.conf"));
    assert_eq!(header.span.line, 38);

    let jwt = load(
        &fixtures().join("seed001-gateway/nginx.conf"),
        &LoadOptions::default(),
    )
    .expect("loads");
    let http = find(&jwt.directives, "http");
    assert_eq!(
        find(http.children(), "auth_jwt").arg(0),
        "Performance Test API"
    );
    assert_eq!(jwt.warnings.len(), 1, "ssl on;");
}

#[test]
fn fixture_mime_types_is_the_shipped_one() {
    let text = fs::read_to_string(fixtures().join("mime.types")).expect("read");
    assert_eq!(text, MIME_TYPES);
}

#[test]
fn include_globs_and_relative_paths() {
    let dir = TempDir::new();
    let main = dir.write(
        "nginx.conf",
        "events {}\nhttp {\n    include conf.d/*.conf;\n    include empty/*.conf;\n    include extra.conf;\n}\n",
    );
    dir.write("conf.d/b.conf", "server { listen 2; }\n");
    dir.write("conf.d/a.conf", "server { listen 1; }\n");
    dir.write("conf.d/ignored.txt", "this is not a config\n");
    // A wildcard skips dotfiles, as glob(3) does: this is how a site is turned off.
    dir.write("conf.d/.disabled.conf", "this would not parse\n");
    dir.write("extra.conf", "# nothing but a comment\n");
    let loaded = load(&main, &LoadOptions::default()).expect("loads");
    let http = find(&loaded.directives, "http");
    let listens: Vec<_> = http
        .children_named("server")
        .map(|s| find(s.children(), "listen").arg(0))
        .collect();
    assert_eq!(listens, ["1", "2"], "glob matches in sorted order");
    let names: Vec<_> = loaded
        .files
        .iter()
        .map(|f| f.path.strip_prefix(&dir.0).expect("inside").to_path_buf())
        .collect();
    assert_eq!(
        names,
        ["nginx.conf", "conf.d/a.conf", "conf.d/b.conf", "extra.conf"].map(PathBuf::from)
    );

    let dump = loaded.dump();
    let expected = format!(
        "# configuration file {}:\n{}\n# configuration file {}:\nserver {{ listen 1; }}\n\n",
        main.display(),
        fs::read_to_string(&main).expect("read"),
        dir.0.join("conf.d/a.conf").display()
    );
    assert!(dump.starts_with(&expected), "{dump}");
    assert!(dump.ends_with("# nothing but a comment\n\n"));

    // Named with its dot, it is included.
    let dotted = dir.write(
        "dotted.conf",
        "events {}\nhttp {\n    include conf.d/.*.conf;\n}\n",
    );
    let err = load(&dotted, &LoadOptions::default()).expect_err("the dotfile is read");
    assert!(err.to_string().contains("conf.d/.disabled.conf:"), "{err}");
}

#[test]
fn include_errors() {
    let dir = TempDir::new();
    let main = dir.write(
        "nginx.conf",
        "events {}\nhttp {\n\n    include missing.conf;\n}\n",
    );
    let e = load(&main, &LoadOptions::default()).expect_err("missing include");
    assert_eq!(
        e.to_string(),
        format!(
            "open() \"{}\" failed (2: No such file or directory) in {}:4",
            dir.0.join("missing.conf").display(),
            main.display()
        )
    );

    // An error inside an included file is reported at that file's line.
    dir.write("bad.conf", "\n\nfoo bar;\n");
    let main = dir.write(
        "nginx2.conf",
        "events {}\nhttp {\n    include bad.conf;\n}\n",
    );
    let e = load(&main, &LoadOptions::default()).expect_err("bad include");
    assert_eq!(
        e.to_string(),
        format!(
            "unknown directive \"foo\" in {}:3",
            dir.0.join("bad.conf").display()
        )
    );

    // The included file is parsed in the including context.
    dir.write("listen.conf", "listen 80;\n");
    let main = dir.write(
        "nginx3.conf",
        "events {}\nhttp {\n    include listen.conf;\n}\n",
    );
    let e = load(&main, &LoadOptions::default()).expect_err("wrong context");
    assert_eq!(e.message, "\"listen\" directive is not allowed here");

    // A file including itself stops instead of recursing forever.
    dir.write("loop.conf", "include loop.conf;\n");
    let main = dir.write("nginx5.conf", "events {}\ninclude loop.conf;\n");
    let e = load(&main, &LoadOptions::default()).expect_err("include loop");
    assert!(e.message.starts_with("include nesting too deep"), "{e}");

    // A `}` in an included file cannot close the including block.
    dir.write("brace.conf", "}\n");
    let main = dir.write(
        "nginx4.conf",
        "events {}\nhttp {\n    include brace.conf;\n}\n",
    );
    let e = load(&main, &LoadOptions::default()).expect_err("stray brace");
    assert_eq!(e.message, "unexpected \"}\"");
}

#[test]
fn load_str_resolves_includes_against_name() {
    let dir = TempDir::new();
    dir.write("inc/worker.conf", "worker_processes 3;\n");
    let name = dir.0.join("virtual.conf");
    let loaded = load_str(
        "include inc/*.conf;\nevents {}\n",
        &name,
        &LoadOptions::default(),
    )
    .expect("loads");
    assert_eq!(loaded.directives[0].name, "worker_processes");
    assert_eq!(loaded.files[0].path, name);
    assert_eq!(loaded.files.len(), 2);
}

#[test]
fn missing_main_file() {
    let e = load(
        Path::new("/nonexistent/nginx.conf"),
        &LoadOptions::default(),
    )
    .expect_err("no file");
    assert_eq!(
        e.to_string(),
        "open() \"/nonexistent/nginx.conf\" failed (2: No such file or directory)"
    );
}

#[test]
fn table_is_exposed() {
    assert!(is_known("proxy_pass"));
    assert!(is_known("worker_processes"));
    assert!(!is_known("foo"));
}

/// A small deterministic generator (xorshift), so the test needs no dependency and every
/// run feeds the same inputs.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[test]
fn arbitrary_input_never_panics() {
    let name = Path::new("/nonexistent-dir/fuzz.conf");
    let opts = LoadOptions::default();
    // Every prefix of a realistic config, which cuts words, strings and blocks anywhere.
    let seed =
        fs::read_to_string(fixtures().join("seed000-gateway/conf.d/default.conf")).expect("read");
    let text = format!(
        "events {{}}\nhttp {{\n{seed}\nmap $a $b {{ default \"x\\\"y\"; }}\ntypes {{ a/b c; }}\n}}\n"
    );
    for end in 0..=text.len() {
        if text.is_char_boundary(end) {
            let _ = load_str(&text[..end], name, &opts);
        }
    }
    // Random mixes of the characters that drive the tokenizer.
    const ALPHABET: &[u8] = b"ab $;{}#\"'\\\n\t()~^@*?[include server location if http events";
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for _ in 0..20_000 {
        let len = (rng.next() % 80) as usize;
        let bytes: Vec<u8> = (0..len)
            .map(|_| ALPHABET[(rng.next() % ALPHABET.len() as u64) as usize])
            .collect();
        let text = String::from_utf8_lossy(&bytes);
        let _ = load_str(&text, name, &opts);
        let g = LoadOptions {
            global_directives: Some(text.to_string()),
        };
        let _ = load_str("events {}", name, &g);
    }
    // Random bytes, including invalid UTF-8 made lossy.
    for _ in 0..2_000 {
        let len = (rng.next() % 200) as usize;
        let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        let _ = load_str(&String::from_utf8_lossy(&bytes), name, &opts);
    }
}
