//! Upstreams: the groups of servers a `proxy_pass` sends requests to, how a peer is chosen,
//! and the per-worker keepalive pools of idle connections to them.
//!
//! Modules: `upstream` (groups, peers, balancers), `pool` (idle connections per peer, generic
//! over plain and TLS streams), `stream` (an upstream connection, plain or TLS), `sock` (a
//! plain socket that enters the reactor only when a call on it would block), `tls` (the
//! handshake of `proxy_pass https://`), `timer` (a connection's timeouts on one timer entry).

pub mod pool;
mod sock;
mod stream;
mod timer;
mod tls;
pub mod upstream;

pub use pool::{Conn, Pool, PoolLimits};
pub use sock::Sock;
pub use stream::{tls_pieces, write_two, MaybeTls, OverTcp, Stream, Tcp, TLS_PIECES};
pub use timer::{Run, TimedOut, Timer};
pub use tls::{HandshakeError, UpstreamTls};
pub use upstream::{
    Change, ChangeError, CheckedPeer, Keepalive, Key, KeyKind, LocalState, NoLive, Outcome, Peer,
    PeerAddr, PeerId, ServerParams, Tried, Upstream,
};
