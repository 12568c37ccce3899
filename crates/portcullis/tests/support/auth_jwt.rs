//! Helpers for the `auth_jwt` tests: keys and tokens made by PyJWT (an implementation
//! independent of portcullis), and an upstream that echoes the request head it got.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use crate::support::{skip, TempDir};

/// The generator, kept beside its description in the fixtures directory.
const MAKE_TOKENS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/jwt/make_tokens.py"
);

/// Keys (`hs.jwk`, `rsa.jwk`) in `dir` and tokens by name, fresh for this run.
pub struct Material {
    pub dir: TempDir,
    tokens: HashMap<String, String>,
}

impl Material {
    /// Runs the generator. Without python3 and PyJWT this is a visible skip (`None`), and a
    /// failure when `CI` is set.
    pub fn generate() -> Option<Material> {
        let dir = TempDir::new("jwt-keys");
        let out = Command::new("python3")
            .arg(MAKE_TOKENS)
            .arg(dir.path())
            .output();
        let failure = match out {
            Ok(out) if out.status.success() => None,
            Ok(out) => Some(String::from_utf8_lossy(&out.stderr).into_owned()),
            Err(e) => Some(format!("python3: {e}")),
        };
        if let Some(why) = failure {
            let message = format!(
                "JWT tokens need python3 with PyJWT (pip install pyjwt cryptography): {why}"
            );
            if std::env::var_os("CI").is_some() {
                panic!("{message}");
            }
            skip(&message);
            return None;
        }
        let text = std::fs::read_to_string(dir.path().join("tokens.json")).expect("tokens.json");
        Some(Material {
            tokens: parse_flat_object(&text),
            dir,
        })
    }

    /// The token called `name` by the generator.
    pub fn token(&self, name: &str) -> &str {
        self.tokens
            .get(name)
            .unwrap_or_else(|| panic!("no token {name:?}"))
    }

    /// A key file's absolute path.
    pub fn key(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// Parses `{"name": "value", ...}` whose strings hold no escapes (tokens are base64url and
/// dots), which is all the generator writes.
fn parse_flat_object(text: &str) -> HashMap<String, String> {
    let strings: Vec<&str> = text.split('"').skip(1).step_by(2).collect();
    strings
        .chunks(2)
        .filter_map(|pair| match pair {
            [k, v] => Some((k.to_string(), v.to_string())),
            _ => None,
        })
        .collect()
}

/// An upstream that answers every request with 200 and the request head it received as the
/// body. Returns its port.
pub fn echo_upstream() -> u16 {
    crate::support::head_upstream(|_, head| {
        let mut resp = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n",
            head.len()
        )
        .into_bytes();
        resp.extend_from_slice(head);
        resp
    })
}
