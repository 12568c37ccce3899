//! Response heads and nginx's built-in error pages.
//!
//! Status lines always say "HTTP/1.1", as nginx's do whatever the request's version. The
//! reason phrases and page texts are nginx 1.22's, including its older wording ("Moved
//! Temporarily", "Request Time-out"); a status nginx has no phrase for gets an empty one.

use bytes::{BufMut, Bytes, BytesMut};

/// nginx's reason phrase for `status`; empty when it has none.
///
/// 494 to 497 are nginx's internal codes for variants of 400 and read "Bad Request".
pub fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        206 => "Partial Content",
        301 => "Moved Permanently",
        302 => "Moved Temporarily",
        303 => "See Other",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 | 494..=497 => "Bad Request",
        401 => "Unauthorized",
        402 => "Payment Required",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Not Allowed",
        406 => "Not Acceptable",
        408 => "Request Time-out",
        409 => "Conflict",
        410 => "Gone",
        411 => "Length Required",
        412 => "Precondition Failed",
        413 => "Request Entity Too Large",
        414 => "Request-URI Too Large",
        415 => "Unsupported Media Type",
        416 => "Requested Range Not Satisfiable",
        421 => "Misdirected Request",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Temporarily Unavailable",
        504 => "Gateway Time-out",
        505 => "HTTP Version Not Supported",
        507 => "Insufficient Storage",
        _ => "",
    }
}

/// The status sent on the wire for `status`: nginx's internal 494-497 go out as 400.
fn wire_status(status: u16) -> u16 {
    match status {
        494..=497 => 400,
        other => other,
    }
}

/// Appends "HTTP/1.1 <status> <reason>\r\n". A status without a phrase keeps the space
/// before the line end, as nginx writes it.
pub fn write_status_line(out: &mut BytesMut, status: u16) {
    let status = wire_status(status);
    out.put_slice(b"HTTP/1.1 ");
    put_status_code(out, status);
    out.put_u8(b' ');
    out.put_slice(reason(status).as_bytes());
    out.put_slice(b"\r\n");
}

/// Writes a status as three digits; values outside 100..=999 are not HTTP statuses and are
/// clamped rather than written with the wrong width.
fn put_status_code(out: &mut BytesMut, status: u16) {
    let status = status.clamp(100, 999);
    out.put_slice(&[
        b'0' + (status / 100) as u8,
        b'0' + (status / 10 % 10) as u8,
        b'0' + (status % 10) as u8,
    ]);
}

/// Appends "<name>: <value>\r\n". Callers pass names and values that are already valid
/// field content; this does not check them, so that forwarding raw values costs a copy only.
pub fn write_header(out: &mut BytesMut, name: &str, value: &[u8]) {
    out.reserve(name.len() + value.len() + 4);
    out.put_slice(name.as_bytes());
    out.put_slice(b": ");
    out.put_slice(value);
    out.put_slice(b"\r\n");
}

/// The text of nginx's built-in page for `status`, and whether it is one of nginx's 400
/// variants (494-497), whose page puts the text under a "400 Bad Request" heading.
fn page_text(status: u16) -> Option<(&'static str, bool)> {
    Some(match status {
        301 => ("301 Moved Permanently", false),
        302 => ("302 Found", false),
        303 => ("303 See Other", false),
        307 => ("307 Temporary Redirect", false),
        308 => ("308 Permanent Redirect", false),
        400 => ("400 Bad Request", false),
        401 => ("401 Authorization Required", false),
        402 => ("402 Payment Required", false),
        403 => ("403 Forbidden", false),
        404 => ("404 Not Found", false),
        405 => ("405 Not Allowed", false),
        406 => ("406 Not Acceptable", false),
        408 => ("408 Request Time-out", false),
        409 => ("409 Conflict", false),
        410 => ("410 Gone", false),
        411 => ("411 Length Required", false),
        412 => ("412 Precondition Failed", false),
        413 => ("413 Request Entity Too Large", false),
        414 => ("414 Request-URI Too Large", false),
        415 => ("415 Unsupported Media Type", false),
        416 => ("416 Requested Range Not Satisfiable", false),
        421 => ("421 Misdirected Request", false),
        429 => ("429 Too Many Requests", false),
        494 => ("Request Header Or Cookie Too Large", true),
        495 => ("The SSL certificate error", true),
        496 => ("No required SSL certificate was sent", true),
        497 => ("The plain HTTP request was sent to HTTPS port", true),
        500 => ("500 Internal Server Error", false),
        501 => ("501 Not Implemented", false),
        502 => ("502 Bad Gateway", false),
        503 => ("503 Service Temporarily Unavailable", false),
        504 => ("504 Gateway Time-out", false),
        505 => ("505 HTTP Version Not Supported", false),
        507 => ("507 Insufficient Storage", false),
        _ => return None,
    })
}

/// nginx's built-in HTML page for `status`, signed "portcullis/VERSION" when `server_tokens`
/// is `Some("portcullis/VERSION")` and "portcullis" when it is `None`. Statuses nginx has no
/// page for (2xx, 304, unknown codes) give an empty body. 494-497 give nginx's 400 variants,
/// whose title names the problem and whose heading says "400 Bad Request".
pub fn error_page_body(status: u16, server_tokens: Option<&str>) -> Bytes {
    let Some((text, bad_request_variant)) = page_text(status) else {
        return Bytes::new();
    };
    let signature = server_tokens.unwrap_or("portcullis");
    let mut page = String::with_capacity(256);
    if bad_request_variant {
        page.push_str("<html>\r\n<head><title>400 ");
        page.push_str(text);
        page.push_str(
            "</title></head>\r\n<body>\r\n<center><h1>400 Bad Request</h1></center>\r\n<center>",
        );
        page.push_str(text);
        page.push_str("</center>\r\n");
    } else {
        page.push_str("<html>\r\n<head><title>");
        page.push_str(text);
        page.push_str("</title></head>\r\n<body>\r\n<center><h1>");
        page.push_str(text);
        page.push_str("</h1></center>\r\n");
    }
    page.push_str("<hr><center>");
    page.push_str(signature);
    page.push_str("</center>\r\n</body>\r\n</html>\r\n");
    Bytes::from(page)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status_line(status: u16) -> BytesMut {
        let mut out = BytesMut::new();
        write_status_line(&mut out, status);
        out
    }

    #[test]
    fn status_lines_as_nginx_writes_them() {
        assert_eq!(&status_line(200)[..], b"HTTP/1.1 200 OK\r\n");
        assert_eq!(&status_line(302)[..], b"HTTP/1.1 302 Moved Temporarily\r\n");
        assert_eq!(
            &status_line(503)[..],
            b"HTTP/1.1 503 Service Temporarily Unavailable\r\n"
        );
        assert_eq!(&status_line(599)[..], b"HTTP/1.1 599 \r\n");
        assert_eq!(&status_line(494)[..], b"HTTP/1.1 400 Bad Request\r\n");
        assert_eq!(&status_line(7)[..], b"HTTP/1.1 100 \r\n");
    }

    #[test]
    fn headers() {
        let mut out = BytesMut::new();
        write_header(&mut out, "Content-Length", b"12");
        write_header(&mut out, "X", b"");
        assert_eq!(&out[..], b"Content-Length: 12\r\nX: \r\n");
    }

    /// Byte-for-byte the page nginx 1.22 sends for a 404, with the signature swapped.
    #[test]
    fn error_pages_match_nginx() {
        let page = error_page_body(404, Some("portcullis/0.1.0"));
        assert_eq!(
            &page[..],
            &b"<html>\r\n<head><title>404 Not Found</title></head>\r\n<body>\r\n<center><h1>404 Not Found</h1></center>\r\n<hr><center>portcullis/0.1.0</center>\r\n</body>\r\n</html>\r\n"[..]
        );
        let page = error_page_body(494, None);
        assert_eq!(
            &page[..],
            &b"<html>\r\n<head><title>400 Request Header Or Cookie Too Large</title></head>\r\n<body>\r\n<center><h1>400 Bad Request</h1></center>\r\n<center>Request Header Or Cookie Too Large</center>\r\n<hr><center>portcullis</center>\r\n</body>\r\n</html>\r\n"[..]
        );
        assert!(std::str::from_utf8(&error_page_body(302, None))
            .unwrap()
            .contains("<title>302 Found</title>"));
        assert!(std::str::from_utf8(&error_page_body(401, None))
            .unwrap()
            .contains("401 Authorization Required"));
        assert!(error_page_body(200, None).is_empty());
        assert!(error_page_body(418, None).is_empty());
    }
}
