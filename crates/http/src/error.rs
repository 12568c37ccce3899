//! Why a request was refused, and the status nginx answers it with.
//!
//! Every variant closes the connection after the error response: once framing or the head is
//! in doubt, nothing that follows on the connection can be trusted.

/// A request the codec refuses. The `Display` text is the one written to the error log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RequestError {
    /// The request line is malformed: method, target, version or separators.
    #[error("client sent invalid request")]
    BadRequestLine,
    /// The method token holds bytes nginx does not accept (it takes `A-Z`, `_` and `-`).
    #[error("client sent invalid method")]
    BadMethod,
    /// An HTTP version with a major number above 1 (2.0 has its own path, over TLS/ALPN).
    #[error("client sent unsupported HTTP version")]
    VersionNotSupported,
    /// The request line does not fit in one large header buffer.
    #[error("client sent too long URI")]
    UriTooLong,
    /// One header line does not fit in one large header buffer.
    #[error("client sent too long header line")]
    HeaderLineTooLong,
    /// The head needs more large header buffers than configured.
    #[error("client sent too large request")]
    HeadTooLarge,
    /// More header lines than [`crate::HeadLimits::max_headers`] (nginx's `max_headers`).
    #[error("client sent too many header lines")]
    TooManyHeaders,
    /// A header line nginx refuses rather than ignores: an empty name, a space, control byte
    /// or DEL in the name, a NUL anywhere, or a CR not followed by the end of the line.
    #[error("client sent invalid header line")]
    BadHeader,
    /// A header line continued on the next line (obs-fold), forbidden in requests.
    #[error("client sent obsolete line folding")]
    ObsFold,
    /// A header that must appear once (Host, Content-Length, Transfer-Encoding, ...) is repeated.
    #[error("client sent duplicate header line")]
    DuplicateHeader,
    /// An HTTP/1.1 request without a Host header.
    #[error("client sent HTTP/1.1 request without \"Host\" header")]
    MissingHost,
    /// A host (Host header or absolute-form authority) that nginx's validation refuses.
    #[error("client sent invalid host header")]
    BadHost,
    /// A Content-Length that is not a plain decimal number fitting a signed 64-bit length.
    #[error("client sent invalid \"Content-Length\" header")]
    BadContentLength,
    /// Both Content-Length and Transfer-Encoding: the classic request smuggling vector.
    #[error("client sent \"Content-Length\" and \"Transfer-Encoding\" headers at the same time")]
    LengthAndTransferEncoding,
    /// A Transfer-Encoding on an HTTP/1.0 request, where it is not defined.
    #[error("client sent HTTP/1.0 request with \"Transfer-Encoding\" header")]
    TransferEncodingInHttp10,
    /// A Transfer-Encoding other than exactly `chunked`.
    #[error("client sent unknown \"Transfer-Encoding\"")]
    UnknownTransferEncoding,
    /// An HTTP/0.9 request with a method other than GET.
    #[error("client sent invalid HTTP/0.9 request")]
    BadHttp09,
    /// A path with an invalid percent escape, an encoded NUL, or ".." above the root.
    #[error("client sent invalid request URI")]
    BadUri,
    /// Malformed chunked framing or a chunk size that overflows.
    #[error("client sent invalid chunked body")]
    BadChunkedBody,
}

impl RequestError {
    /// The status written on the wire and in the access log.
    pub fn status(&self) -> u16 {
        match self {
            RequestError::VersionNotSupported => 505,
            RequestError::UriTooLong => 414,
            RequestError::UnknownTransferEncoding => 501,
            _ => 400,
        }
    }

    /// The code nginx selects the error page with (`error_page` and the built-in pages):
    /// 494 "Request Header Or Cookie Too Large" for oversized heads, else [`Self::status`].
    pub fn page_code(&self) -> u16 {
        match self {
            RequestError::HeaderLineTooLong
            | RequestError::HeadTooLarge
            | RequestError::TooManyHeaders => 494,
            other => other.status(),
        }
    }

    /// The error log text, as a static string.
    pub fn reason(&self) -> &'static str {
        match self {
            RequestError::BadRequestLine => "client sent invalid request",
            RequestError::BadMethod => "client sent invalid method",
            RequestError::VersionNotSupported => "client sent unsupported HTTP version",
            RequestError::UriTooLong => "client sent too long URI",
            RequestError::HeaderLineTooLong => "client sent too long header line",
            RequestError::HeadTooLarge => "client sent too large request",
            RequestError::TooManyHeaders => "client sent too many header lines",
            RequestError::BadHeader => "client sent invalid header line",
            RequestError::ObsFold => "client sent obsolete line folding",
            RequestError::DuplicateHeader => "client sent duplicate header line",
            RequestError::MissingHost => "client sent HTTP/1.1 request without \"Host\" header",
            RequestError::BadHost => "client sent invalid host header",
            RequestError::BadContentLength => "client sent invalid \"Content-Length\" header",
            RequestError::LengthAndTransferEncoding => {
                "client sent \"Content-Length\" and \"Transfer-Encoding\" headers at the same time"
            }
            RequestError::TransferEncodingInHttp10 => {
                "client sent HTTP/1.0 request with \"Transfer-Encoding\" header"
            }
            RequestError::UnknownTransferEncoding => "client sent unknown \"Transfer-Encoding\"",
            RequestError::BadHttp09 => "client sent invalid HTTP/0.9 request",
            RequestError::BadUri => "client sent invalid request URI",
            RequestError::BadChunkedBody => "client sent invalid chunked body",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_follow_nginx() {
        assert_eq!(RequestError::BadRequestLine.status(), 400);
        assert_eq!(RequestError::UriTooLong.status(), 414);
        assert_eq!(RequestError::UnknownTransferEncoding.status(), 501);
        assert_eq!(RequestError::VersionNotSupported.status(), 505);
        assert_eq!(RequestError::HeadTooLarge.status(), 400);
        assert_eq!(RequestError::HeadTooLarge.page_code(), 494);
        assert_eq!(RequestError::BadHost.page_code(), 400);
        // nginx finalizes with NGX_HTTP_REQUEST_HEADER_TOO_LARGE past `max_headers`.
        assert_eq!(RequestError::TooManyHeaders.status(), 400);
        assert_eq!(RequestError::TooManyHeaders.page_code(), 494);
    }

    #[test]
    fn reason_matches_display() {
        let all = [
            RequestError::BadRequestLine,
            RequestError::BadMethod,
            RequestError::VersionNotSupported,
            RequestError::UriTooLong,
            RequestError::HeaderLineTooLong,
            RequestError::HeadTooLarge,
            RequestError::TooManyHeaders,
            RequestError::BadHeader,
            RequestError::ObsFold,
            RequestError::DuplicateHeader,
            RequestError::MissingHost,
            RequestError::BadHost,
            RequestError::BadContentLength,
            RequestError::LengthAndTransferEncoding,
            RequestError::TransferEncodingInHttp10,
            RequestError::UnknownTransferEncoding,
            RequestError::BadHttp09,
            RequestError::BadUri,
            RequestError::BadChunkedBody,
        ];
        for e in all {
            assert_eq!(e.to_string(), e.reason());
        }
    }
}
