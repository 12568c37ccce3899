//! A request body's DATA frames as the server reads them, for the proxy (read whole) and
//! gRPC (relayed as they come).

use ::h2::RecvStream;
use bytes::Bytes;

use crate::request::Request;
use crate::Level;

/// The next DATA frame of a request body (`None` at its end), within client_body_timeout,
/// with `total` (the body's bytes so far) kept within client_max_body_size. The caller
/// gives the frame's window back once it has used it. `Err` is the status to answer, the
/// failure logged as nginx logs it: 408, 413, 499 for a client that reset its stream, 400
/// for any other broken stream.
pub(crate) async fn next_frame(
    req: &Request<'_>,
    body: &mut RecvStream,
    total: &mut u64,
) -> Result<Option<Bytes>, u16> {
    let max = req.loc().client_max_body_size;
    match tokio::time::timeout(req.loc().client_body_timeout, body.data()).await {
        Err(_) => {
            req.log(
                Level::Info,
                "client timed out (110: Connection timed out) while reading client request body",
            );
            Err(408)
        }
        Ok(None) => Ok(None),
        Ok(Some(Err(e))) if e.is_reset() && e.is_remote() => {
            req.log(
                Level::Info,
                "client prematurely closed stream while reading client request body",
            );
            Err(crate::upstream::CLIENT_CLOSED)
        }
        Ok(Some(Err(_))) => Err(400),
        Ok(Some(Ok(data))) => {
            *total += data.len() as u64;
            if max != 0 && *total > max {
                // A declared length was checked before; nginx names a body without one
                // as HTTP/1.1 names its chunked kind.
                req.log(
                    Level::Error,
                    &format!("client intended to send too large chunked body: {total} bytes"),
                );
                return Err(413);
            }
            Ok(Some(data))
        }
    }
}
