//! What a request to an application server says before its body, made once the body is
//! read (a param may be `$content_length` or `$request_body`): its params and fields in
//! each protocol's encoding (`fastcgi.rs` holds FastCGI's records).

use bytes::{BufMut, BytesMut};

use super::fastcgi::{begin, pair, Params};
use crate::request::Request;

/// Which of the client's fields go to the server as `HTTP_*` params.
#[derive(Clone, Copy)]
pub(crate) struct Fields<'a> {
    /// `fastcgi_pass_request_headers`.
    pub pass: bool,
    /// The response may be cached: the client's conditions and range stay out
    /// ([`DROPPED`](super::cache::DROPPED)).
    pub cacheable: bool,
    /// The cache's own conditions, when it revalidates an entry: header lines
    /// (`If-Modified-Since: ...\r\n`), sent as their params.
    pub conditions: Option<&'a [u8]>,
}

impl Params {
    /// The FastCGI request's records before its body (see [`each`](Self::each)).
    pub fn fastcgi(&self, req: &Request<'_>, fields: Fields<'_>, keep_conn: bool) -> BytesMut {
        let mut pairs = Vec::with_capacity(1024);
        self.each(req, fields, &mut |name, value| {
            pair(&mut pairs, name, value)
        });
        let mut head = BytesMut::new();
        begin(&mut head, keep_conn, &pairs);
        head
    }

    /// The uwsgi packet before the body: its header (`modifier1`, the size of the vars,
    /// `modifier2`), then each var's name and value after its 16-bit length; `Err` when the
    /// vars are longer than a packet holds.
    pub fn uwsgi(
        &self,
        req: &Request<'_>,
        fields: Fields<'_>,
        (modifier1, modifier2): (u8, u8),
    ) -> Result<BytesMut, String> {
        let mut vars = Vec::with_capacity(1024);
        let mut too_long = false;
        self.each(req, fields, &mut |name, value| {
            for part in [name, value] {
                match u16::try_from(part.len()) {
                    Ok(n) => vars.extend_from_slice(&n.to_le_bytes()),
                    Err(_) => too_long = true,
                }
                vars.extend_from_slice(part);
            }
        });
        let size = u16::try_from(vars.len())
            .ok()
            .filter(|_| !too_long)
            .ok_or_else(|| format!("uwsgi request is too big: {}", vars.len()))?;
        let mut head = BytesMut::with_capacity(vars.len() + 4);
        head.put_u8(modifier1);
        head.put_slice(&size.to_le_bytes());
        head.put_u8(modifier2);
        head.put_slice(&vars);
        Ok(head)
    }

    /// The SCGI request before the body: a netstring of `CONTENT_LENGTH` (first, as SCGI
    /// asks; `length` bytes of body), then the params and fields, each name and value
    /// ended by a NUL.
    pub fn scgi(&self, req: &Request<'_>, fields: Fields<'_>, length: usize) -> BytesMut {
        let mut sent = format!("CONTENT_LENGTH\0{length}\0").into_bytes();
        self.each(req, fields, &mut |name, value| {
            sent.extend_from_slice(name);
            sent.push(0);
            sent.extend_from_slice(value);
            sent.push(0);
        });
        let mut head = BytesMut::with_capacity(sent.len() + 16);
        head.put_slice(format!("{}:", sent.len()).as_bytes());
        head.put_slice(&sent);
        head.put_u8(b',');
        head
    }

    /// Each param and field sent, once the body is read (a param may be `$content_length`
    /// or `$request_body`): the params, then the client's fields as `HTTP_*` ones
    /// (`fields`) but those a param hides, then the cache's conditions.
    fn each(&self, req: &Request<'_>, fields: Fields<'_>, out: &mut dyn FnMut(&[u8], &[u8])) {
        let mut value = Vec::new();
        for p in &self.list {
            if p.hide_only {
                continue;
            }
            value.clear();
            req.eval_into(&p.value, &mut value);
            if p.if_not_empty && value.is_empty() {
                continue;
            }
            out(&p.name, &value);
        }
        let mut key = Vec::new();
        let dropped = |name: &str| {
            fields.cacheable
                && super::cache::DROPPED
                    .iter()
                    .any(|d| d.eq_ignore_ascii_case(name))
        };
        if fields.pass {
            for (name, value) in req.head().headers() {
                if name.is_empty() || dropped(name) {
                    continue;
                }
                http_key(&mut key, name);
                if !self.hidden.contains(&key) {
                    out(&key, value);
                }
            }
        }
        let lines = fields.conditions.unwrap_or_default();
        for line in lines.split(|&b| b == b'\n') {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let Some(colon) = line.iter().position(|&b| b == b':') else {
                continue;
            };
            http_key(&mut key, &String::from_utf8_lossy(&line[..colon]));
            out(&key, line[colon + 1..].trim_ascii());
        }
    }
}

/// A field's name as its param's: `HTTP_` and the name in capitals, `-` made `_`.
fn http_key(key: &mut Vec<u8>, name: &str) {
    key.clear();
    key.extend_from_slice(b"HTTP_");
    key.extend(name.bytes().map(|b| match b {
        b'-' => b'_',
        b => b.to_ascii_uppercase(),
    }));
}
