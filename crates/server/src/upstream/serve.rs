//! The exchange a plan runs: over HTTP/2 for a gRPC server (`grpc`), else over the
//! protocol's own connection (`exchange`).

use super::downstream::Downstream;
use super::exchange::{Finish, ReqBody};
use super::Plan;
use crate::request::Request;

/// Runs the exchange for `plan` on behalf of `req`, its response sent to `down`.
pub(crate) async fn serve<D: Downstream>(
    down: &mut D,
    req: &Request<'_>,
    plan: Box<Plan>,
    body: ReqBody,
) -> Finish {
    if plan.grpc.is_some() {
        // Boxed: gRPC's exchange is a large future, which the proxy's should not carry.
        Box::pin(super::grpc::serve(down, req, plan, body)).await
    } else {
        super::exchange::serve(down, req, plan, body).await
    }
}
