//! Whether a response may be stored, and for how long: nginx 1.22's upstream rules for
//! `X-Accel-Expires`, `Cache-Control`, `Expires`, `Set-Cookie` and `Vary`, each field acted on
//! in the order the upstream sent it, then `proxy_cache_valid` for a response that named no
//! time.

use std::time::Duration;

use portcullis_http::ResponseHead;

use super::{ignore, CacheSettings};

/// The longest `Vary` value an entry keeps, as nginx's header has room for.
pub(super) const VARY_LEN: usize = 128;

/// The time now, in seconds since the epoch.
pub(crate) fn now_secs() -> i64 {
    crate::files::date::unix_secs(std::time::SystemTime::now())
}

/// How long an entry stays fresh, and how long after that it may still be served.
pub(crate) struct Fresh {
    pub valid_sec: i64,
    /// `stale-while-revalidate=`.
    pub updating_sec: i64,
    /// `stale-if-error=`.
    pub error_sec: i64,
    /// When the response was stored.
    pub date: i64,
}

/// The freshness of `head` if it may be stored: its fields' time, else `proxy_cache_valid`'s
/// for its status.
pub(super) fn freshness(head: &ResponseHead, s: &CacheSettings) -> Option<Fresh> {
    match named(head, s) {
        Ok(Some(fresh)) => Some(fresh),
        Ok(None) => valid_for(head.status(), s),
        Err(NotStored) => None,
    }
}

/// The fields of a response say it is not to be stored.
pub(super) struct NotStored;

/// The freshness the fields of `head` name, if they name one.
pub(super) fn named(head: &ResponseHead, s: &CacheSettings) -> Result<Option<Fresh>, NotStored> {
    let now = now_secs();
    let mut valid_sec = 0i64;
    let mut updating_sec = 0;
    let mut error_sec = 0;
    let mut x_accel = false;
    for f in head.fields() {
        let is = |n: &str| f.name.eq_ignore_ascii_case(n.as_bytes());
        if is("x-accel-expires") && s.ignore & ignore::X_ACCEL_EXPIRES == 0 {
            x_accel = true;
            match f.value.strip_prefix(b"@") {
                Some(abs) => {
                    if let Some(t) = atoi(abs) {
                        valid_sec = t;
                    }
                }
                None => match atoi(f.value) {
                    Some(0) => return Err(NotStored),
                    Some(n) => valid_sec = now + n,
                    None => {}
                },
            }
        } else if is("cache-control") && s.ignore & ignore::CACHE_CONTROL == 0 {
            if valid_sec != 0 && x_accel {
                continue;
            }
            let v = f.value;
            if find(v, b"no-cache").is_some()
                || find(v, b"no-store").is_some()
                || find(v, b"private").is_some()
            {
                return Err(NotStored);
            }
            let age = match find(v, b"s-maxage=") {
                Some(at) => Some(&v[at + 9..]),
                None => find(v, b"max-age=").map(|at| &v[at + 8..]),
            };
            if let Some(rest) = age {
                match seconds(rest) {
                    Some(n) if n > 0 => valid_sec = now + n,
                    _ => return Err(NotStored),
                }
            }
            if let Some(at) = find(v, b"stale-while-revalidate=") {
                let n = seconds(&v[at + 23..]).ok_or(NotStored)?;
                updating_sec = n;
                error_sec = n;
            }
            if let Some(at) = find(v, b"stale-if-error=") {
                error_sec = seconds(&v[at + 15..]).ok_or(NotStored)?;
            }
        } else if is("expires") && s.ignore & ignore::EXPIRES == 0 {
            if valid_sec != 0 {
                continue;
            }
            let t = crate::files::date::parse_http_date(f.value)
                .map(crate::files::date::unix_secs)
                .filter(|t| *t >= now)
                .ok_or(NotStored)?;
            valid_sec = t;
        } else if is("set-cookie") && s.ignore & ignore::SET_COOKIE == 0 {
            return Err(NotStored);
        }
    }
    if valid_sec == 0 {
        return Ok(None);
    }
    Ok(Some(Fresh {
        valid_sec,
        updating_sec,
        error_sec,
        date: now,
    }))
}

/// The freshness `proxy_cache_valid` gives a response of `status`.
pub(super) fn valid_for(status: u16, s: &CacheSettings) -> Option<Fresh> {
    let now = now_secs();
    let t = valid_for_status(status, s)?;
    Some(Fresh {
        valid_sec: now + i64::try_from(t.as_secs()).ok()?,
        updating_sec: 0,
        error_sec: 0,
        date: now,
    })
}

/// The first `proxy_cache_valid` that names `status` (or `any`), if its time is not zero.
fn valid_for_status(status: u16, s: &CacheSettings) -> Option<Duration> {
    s.valid
        .iter()
        .find(|v| v.codes.is_empty() || v.codes.contains(&status))
        .map(|v| v.time)
        .filter(|t| !t.is_zero())
}

/// The `Vary` names of `head` (the last field's, as nginx 1.22 keeps), or `None` when the
/// response varies too much to be stored (`*`, or longer than nginx keeps).
pub(super) fn vary(head: &ResponseHead, ignored: u8) -> Option<Vec<u8>> {
    if ignored & ignore::VARY != 0 {
        return Some(Vec::new());
    }
    let mut vary: &[u8] = b"";
    for f in head.fields() {
        if f.name.eq_ignore_ascii_case(b"vary") {
            // Each field is looked at: one that varies too much is enough.
            if f.value.len() > VARY_LEN || f.value == b"*" {
                return None;
            }
            vary = f.value;
        }
    }
    Some(vary.to_vec())
}

/// Where `needle` (lower case) is in `hay`, ASCII case-insensitively: nginx looks for the
/// directives as substrings.
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len())
        .position(|w| w.eq_ignore_ascii_case(needle))
}

/// The seconds a directive's value starts with, up to `,`, `;` or a space; `None` when
/// something else comes first.
fn seconds(rest: &[u8]) -> Option<i64> {
    let mut n: i64 = 0;
    for &b in rest {
        match b {
            b',' | b';' | b' ' => break,
            b'0'..=b'9' => n = n.checked_mul(10)?.checked_add(i64::from(b - b'0'))?,
            _ => return None,
        }
    }
    Some(n)
}

/// nginx's `ngx_atoi`: digits only, at least one.
fn atoi(v: &[u8]) -> Option<i64> {
    if v.is_empty() {
        return None;
    }
    let mut n: i64 = 0;
    for &b in v {
        if !b.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_add(i64::from(b - b'0'))?;
    }
    Some(n)
}
