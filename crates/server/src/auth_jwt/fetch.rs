//! `auth_jwt_key_request`: a key set fetched by a subrequest (see [`crate::subrequest`]). A
//! status other than 2xx, a body over [`MAX_BODY`] or one that is no JWK set is a failure,
//! described for the error log.

use bytes::Bytes;
use portcullis_jwt::KeySet;

use crate::request::Request;
use crate::subrequest::{self, Keep};

/// The largest key set response read; a provider's JWKS is a few kilobytes.
const MAX_BODY: usize = 1 << 20;

/// Runs the key request for `uri` on behalf of `req`: the response body and the keys in it.
pub(super) async fn fetch(req: &Request<'_>, uri: &[u8]) -> Result<(Bytes, KeySet), String> {
    let (_, answer) = subrequest::run(req, uri, Keep::Body(MAX_BODY)).await?;
    if !(200..300).contains(&answer.status) {
        return Err(format!("the response status is {}", answer.status));
    }
    let body = answer.body?;
    let keys = KeySet::parse(&body).map_err(|e| format!("invalid JWK set in the response: {e}"))?;
    Ok((body, keys))
}
