//! Every input kept for the fuzz targets (`fuzz/corpus/<target>/`, the seeds a run starts
//! from, and `fuzz/regressions/<target>/`, inputs that once failed) through the same checks
//! the targets run, so that `cargo test` catches a parser that breaks one again without a
//! fuzzing run. `fuzz/run` does the fuzzing itself.

use std::path::{Path, PathBuf};

/// The fuzz crate's directory.
fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// A fuzz target's check of one input.
type Check = Box<dyn Fn(&[u8])>;

/// Each target and its check, as `fuzz/fuzz_targets/` runs them.
fn targets() -> Vec<(&'static str, Check)> {
    vec![
        ("config", Box::new(portcullis_config::fuzz::config)),
        ("http_head", Box::new(portcullis_http::fuzz::request_head)),
        ("chunked", Box::new(portcullis_http::fuzz::chunked)),
        (
            "normalize_path",
            Box::new(portcullis_http::fuzz::normalize_path),
        ),
        ("jwt", Box::new(portcullis_jwt::fuzz::jwt)),
        (
            "proxy_protocol",
            Box::new(portcullis_server::fuzz::proxy_protocol),
        ),
        ("h2_frames", Box::new(portcullis_server::fuzz::h2_frames)),
    ]
}

#[test]
fn every_kept_input_passes_its_targets_checks() {
    let dir = fuzz_dir();
    let listed = std::fs::read_to_string(dir.join("Cargo.toml")).expect("fuzz/Cargo.toml");
    let mut replayed = 0;
    for (target, check) in targets() {
        // A target here is one the fuzz crate builds, and it has seeds.
        assert!(listed.contains(&format!("name = \"{target}\"")), "{target}");
        let mut seeds = 0;
        for kind in ["corpus", "regressions"] {
            let Ok(entries) = std::fs::read_dir(dir.join(kind).join(target)) else {
                continue;
            };
            for entry in entries {
                let path = entry.expect("an entry").path();
                let data = std::fs::read(&path).expect("an input");
                let caught =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(&data)));
                assert!(caught.is_ok(), "{target}: {} fails", path.display());
                seeds += usize::from(kind == "corpus");
                replayed += 1;
            }
        }
        assert!(seeds > 0, "no seeds in fuzz/corpus/{target}");
    }
    // Every target the fuzz crate builds is replayed here.
    assert_eq!(listed.matches("[[bin]]").count(), targets().len());
    assert!(replayed > 0);
}
