//! JSON Web Token verification for `auth_jwt`, compatible with NGINX Plus's module.
//!
//! At configuration load, each `auth_jwt_key_file` is parsed by [`KeySet::parse`] into keys
//! ready to verify (HMAC keys and parsed public keys, one per algorithm a key may serve), and
//! several files combine with [`KeySet::extend`]. On a request, the access phase hands the
//! token to [`VerifiedCache::verify`], the worker's cache in front of [`verify`]: a compact
//! JWS whose signature, `exp` and `nbf` pass becomes a [`Verified`], from which the server's
//! variables read claims ([`Verified::claim`]) rendered as NGINX Plus renders them; a token
//! that fails gives a [`JwtError`] whose text is the error log's reason.
//!
//! Supported: HS256/384/512, RS256/384/512, PS256/384/512, ES256/384/512 and EdDSA
//! (Ed25519), all through aws-lc-rs. JWE tokens are not.
//!
//! Modules: `key` (JWKs and key sets), `verify` (tokens and claims), `cache` (the per-worker
//! cache), `json` (a strict JSON parser that refuses duplicate names), `base64url`.

mod base64url;
mod cache;
#[doc(hidden)]
pub mod fuzz;
mod json;
mod key;
mod verify;

pub use cache::VerifiedCache;
pub use json::{Json, JsonError, MAX_DEPTH};
pub use key::{Algorithm, KeyError, KeyProblem, KeySet, MAX_RSA_BITS, MIN_RSA_BITS};
pub use verify::{verify, ClaimValue, JwtError, Part, Verified, MAX_TOKEN_LEN};
