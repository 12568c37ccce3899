//! Nanoseconds per verification for the seeds' algorithms and per cache hit.
//!
//!     cargo run --release -p portcullis-jwt --example bench
//!
//! Tokens and keys are the test fixtures (made by PyJWT); "now" is the fixtures' time.

use std::hint::black_box;
use std::time::{Duration, Instant, UNIX_EPOCH};

use portcullis_jwt::{verify, Json, KeySet, VerifiedCache};

const KEYS: &str = include_str!("../tests/fixtures/keys.jwk");
const TOKENS: &str = include_str!("../tests/fixtures/tokens.json");

/// Each figure is the best of this many rounds, to keep other load on the machine out of it.
const ROUNDS: usize = 5;
/// How long one round runs, roughly.
const ROUND_TIME: Duration = Duration::from_millis(200);

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let keys = KeySet::parse(KEYS.as_bytes())?;
    let doc = Json::parse(TOKENS.as_bytes())?;
    let now = match doc.get("now") {
        Some(Json::Number(n)) => UNIX_EPOCH + Duration::from_secs(n.parse()?),
        _ => return Err("tokens.json has no \"now\"".into()),
    };
    let token = |name: &str| -> Result<Vec<u8>, Box<dyn std::error::Error>> {
        let text = doc
            .get("tokens")
            .and_then(|t| t.get(name))
            .and_then(Json::as_str);
        Ok(text.ok_or(format!("no token {name}"))?.as_bytes().to_vec())
    };

    for name in ["HS256", "RS256", "ES256", "EdDSA"] {
        let token = token(name)?;
        verify(&token, &keys, now, Duration::ZERO)?;
        let ns = measure(|| {
            let verified = verify(black_box(&token), &keys, now, Duration::ZERO);
            black_box(verified.is_ok());
        });
        println!(
            "verify {name:<6} {ns:>9.0} ns  ({} byte token)",
            token.len()
        );
    }

    let token = token("RS256")?;
    let mut cache = VerifiedCache::new(1024);
    cache.verify(&token, &keys, now, Duration::ZERO)?;
    let ns = measure(|| {
        let hit = cache.get(black_box(&token), &keys, now, Duration::ZERO);
        black_box(hit.is_some());
    });
    println!("cache hit     {ns:>9.1} ns");
    Ok(())
}

/// The best per-call time in nanoseconds over [`ROUNDS`] rounds.
fn measure(mut f: impl FnMut()) -> f64 {
    let mut calls = 1u64;
    loop {
        let start = Instant::now();
        for _ in 0..calls {
            f();
        }
        if start.elapsed() >= ROUND_TIME / 10 {
            break;
        }
        calls *= 2;
    }
    calls *= 10;
    (0..ROUNDS)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..calls {
                f();
            }
            start.elapsed().as_nanos() as f64 / calls as f64
        })
        .fold(f64::INFINITY, f64::min)
}
