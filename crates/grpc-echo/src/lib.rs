//! A gRPC server and client for the tests of `grpc_pass`, made with tonic: the `Echo`
//! service of `proto/echo.proto`, one call of each kind gRPC has (unary, server streaming,
//! client streaming, both ways), served on a port of 127.0.0.1 by a thread of its own.

// tonic's calls answer with its `Status` by value, whatever its size.
#![allow(clippy::result_large_err)]

use std::net::SocketAddr;
use std::pin::Pin;

use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};

/// The generated messages, client and server.
pub mod echo {
    tonic::include_proto!("echo");
}

pub use echo::echo_client::EchoClient;
pub use echo::Msg;

/// The service: its `name` is in every answer's `x-server` field.
#[derive(Clone)]
pub struct Echo {
    name: String,
}

type Messages = Pin<Box<dyn Stream<Item = Result<Msg, Status>> + Send>>;

/// What the server saw of a request: the fields a proxy sets or passes.
fn seen<T>(req: &Request<T>) -> String {
    let field = |name: &str| {
        req.metadata()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("-")
            .to_owned()
    };
    format!(
        "x-id={} te={} x-set={} content-type={}",
        field("x-id"),
        field("te"),
        field("x-set"),
        field("content-type")
    )
}

impl Echo {
    fn answer<T>(&self, msg: T) -> Response<T> {
        let mut r = Response::new(msg);
        if let Ok(v) = self.name.parse() {
            r.metadata_mut().insert("x-server", v);
        }
        r
    }
}

fn failure(msg: &Msg) -> Result<(), Status> {
    match msg.fail {
        0 => Ok(()),
        code => Err(Status::new(
            tonic::Code::from(i32::try_from(code).unwrap_or(2)),
            format!("asked to fail with {code}"),
        )),
    }
}

#[tonic::async_trait]
impl echo::echo_server::Echo for Echo {
    /// The answer's `x-peer-port` is the port of the connection the call came on.
    async fn unary(&self, req: Request<Msg>) -> Result<Response<Msg>, Status> {
        let seen = seen(&req);
        let port = req.remote_addr().map_or(0, |a| a.port());
        let msg = req.into_inner();
        failure(&msg)?;
        tokio::time::sleep(std::time::Duration::from_millis(msg.delay_ms.into())).await;
        let mut r = self.answer(Msg {
            text: format!("{} {seen}", msg.text),
            count: msg.count,
            blob: msg.blob,
            ..Msg::default()
        });
        r.metadata_mut().insert("x-peer-port", port.into());
        Ok(r)
    }

    type ServeStream = Messages;

    async fn serve(&self, req: Request<Msg>) -> Result<Response<Messages>, Status> {
        let msg = req.into_inner();
        failure(&msg)?;
        let text = msg.text;
        let each = (0..msg.count).map(move |i| {
            Ok(Msg {
                text: format!("{text} {i}"),
                count: i,
                ..Msg::default()
            })
        });
        Ok(self.answer(Box::pin(tokio_stream::iter(each)) as Messages))
    }

    async fn collect(&self, req: Request<Streaming<Msg>>) -> Result<Response<Msg>, Status> {
        let mut stream = req.into_inner();
        let mut texts = Vec::new();
        let mut bytes = 0usize;
        while let Some(msg) = stream.next().await {
            let msg = msg?;
            failure(&msg)?;
            bytes += msg.blob.len();
            texts.push(msg.text);
        }
        Ok(self.answer(Msg {
            text: format!("{} blob={bytes}", texts.join(",")),
            count: u32::try_from(texts.len()).unwrap_or(u32::MAX),
            ..Msg::default()
        }))
    }

    type ChatStream = Messages;

    async fn chat(&self, req: Request<Streaming<Msg>>) -> Result<Response<Messages>, Status> {
        let stream = req.into_inner();
        let replies = stream.map(|m| {
            let m = m?;
            failure(&m)?;
            Ok(Msg {
                text: format!("re: {}", m.text),
                count: m.count,
                ..Msg::default()
            })
        });
        Ok(self.answer(Box::pin(replies) as Messages))
    }
}

/// A running server; it stops when the test process ends.
pub struct Server {
    pub addr: SocketAddr,
}

impl Server {
    /// Serves the `Echo` service named `name` on a free port of 127.0.0.1 (cleartext
    /// HTTP/2, as `grpc://` reaches it), from a thread of its own.
    pub fn start(name: &str) -> Server {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local address");
        listener.set_nonblocking(true).expect("non-blocking");
        let service = echo::echo_server::EchoServer::new(Echo {
            name: name.to_owned(),
        });
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
                let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
                let _ = tonic::transport::Server::builder()
                    .add_service(service)
                    .serve_with_incoming(incoming)
                    .await;
            });
        });
        Server { addr }
    }
}
