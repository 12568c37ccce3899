//! `grpc_pass` against a real gRPC server (tonic's, `portcullis-grpc-echo`) and a real gRPC
//! client, compared with nginx on the same configuration: `grpc://` and `grpcs://` (through
//! a second server of the same configuration serving TLS), unary calls with the fields the
//! module sets and passes, a status the server fails with (a trailers-only answer),
//! streaming from the server, from the client (with a body larger than HTTP/2's windows),
//! both ways at once (each answer read before the next message goes, which a proxy that
//! reads the body whole would hang), a body over client_max_body_size (413), a group
//! balanced round robin, connections kept with `keepalive`, `grpc_pass $variable` naming the
//! scheme, a client streaming for longer than grpc_read_timeout (which runs once its body
//! went out whole), a server slower than grpc_read_timeout (504), a server that is down (a 502 page, which the client reads as no
//! gRPC answer), and nginx's `error_page` recipe that answers it with a `grpc-status` of
//! its own.

mod support;

// Only the certificate helpers are used here.
#[allow(dead_code)]
#[path = "support/tls.rs"]
mod tls_support;

use std::time::Duration;

use portcullis_grpc_echo::{EchoClient, Msg, Server as Echo};
use support::{compare, expect_lines, kinds, main_config, Server};
use tonic::transport::Channel;

fn msg(text: &str) -> Msg {
    Msg {
        text: text.to_owned(),
        ..Msg::default()
    }
}

/// `n` messages, one every `every`.
fn async_stream_of(n: usize, every: Duration) -> impl tokio_stream::Stream<Item = Msg> {
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    tokio::spawn(async move {
        for i in 0..n {
            tokio::time::sleep(every).await;
            if tx.send(msg(&format!("m{i}"))).await.is_err() {
                break;
            }
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}

/// A status as the client sees it.
fn status(s: &tonic::Status) -> String {
    format!("status {:?} {:?}", s.code(), s.message())
}

/// Every call of the transcript, through the proxy on `port` (good upstream), `dead` (a
/// server that is down), `mapped` (the same, answered by error_page), `tls` (to the server
/// through a second proxy, reached by `grpcs://`), `slow` (grpc_read_timeout) and `kept` (a
/// group with `keepalive`).
async fn calls(ports: &[u16]) -> Vec<String> {
    let [port, dead, mapped, tls, slow, kept, by_variable] = ports else {
        panic!("seven ports");
    };
    let (port, dead, mapped, tls, slow, kept, by_variable) =
        (*port, *dead, *mapped, *tls, *slow, *kept, *by_variable);
    let mut lines = Vec::new();
    let channel = |p: u16| async move {
        Channel::from_shared(format!("http://127.0.0.1:{p}"))
            .expect("uri")
            .timeout(Duration::from_secs(10))
            .connect()
            .await
            .expect("connect to the proxy")
    };
    let mut c = EchoClient::new(channel(port).await);

    let mut req = tonic::Request::new(msg("hello"));
    req.metadata_mut().insert("x-id", "42".parse().unwrap());
    match c.unary(req).await {
        Ok(r) => {
            let server = r
                .metadata()
                .get("x-server")
                .map(|v| v.to_str().unwrap_or("?").to_owned());
            lines.push(format!("unary: {} server={server:?}", r.into_inner().text));
        }
        Err(s) => lines.push(format!("unary: {}", status(&s))),
    }
    let failing = Msg {
        fail: 5,
        ..msg("x")
    };
    match c.unary(failing).await {
        Ok(r) => lines.push(format!("fail: ok {}", r.into_inner().text)),
        Err(s) => lines.push(format!("fail: {}", status(&s))),
    }
    // Round robin over the group's two servers.
    let mut served = Vec::new();
    for _ in 0..4 {
        if let Ok(r) = c.unary(msg("rr")).await {
            served.push(
                r.metadata()
                    .get("x-server")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("?")
                    .to_owned(),
            );
        }
    }
    served.sort();
    lines.push(format!("balanced: {}", served.join(",")));

    let asked = Msg {
        count: 5,
        ..msg("item")
    };
    match c.serve(asked).await {
        Ok(r) => {
            let mut stream = r.into_inner();
            let mut got = Vec::new();
            while let Ok(Some(m)) = stream.message().await {
                got.push(m.text);
            }
            lines.push(format!("serve: {}", got.join(",")));
        }
        Err(s) => lines.push(format!("serve: {}", status(&s))),
    }

    // Client streaming: three messages, one of them larger than HTTP/2's default windows;
    // then more than client_max_body_size (1m), refused with 413.
    for blob in [600_000, 2 << 20] {
        let sent = vec![
            msg("a"),
            Msg {
                blob: vec![7; blob],
                ..msg("b")
            },
            msg("c"),
        ];
        match c.collect(tokio_stream::iter(sent)).await {
            Ok(r) => lines.push(format!("collect: {}", r.into_inner().text)),
            Err(s) => lines.push(format!("collect: {}", status(&s))),
        }
    }

    // Both ways: each answer is read before the next message is sent.
    let (tx, rx) = tokio::sync::mpsc::channel::<Msg>(1);
    let outgoing = tokio_stream::wrappers::ReceiverStream::new(rx);
    tx.send(msg("ping 0")).await.expect("first message");
    let chat = tokio::time::timeout(Duration::from_secs(10), async {
        let mut replies = c.chat(outgoing).await?.into_inner();
        let mut got = Vec::new();
        for i in 1..=3 {
            match replies.message().await? {
                Some(m) => got.push(m.text),
                None => break,
            }
            let _ = tx.send(msg(&format!("ping {i}"))).await;
        }
        drop(tx);
        while let Some(m) = replies.message().await? {
            got.push(m.text);
        }
        Ok::<_, tonic::Status>(got)
    })
    .await;
    match chat {
        Ok(Ok(got)) => lines.push(format!("chat: {}", got.join(","))),
        Ok(Err(s)) => lines.push(format!("chat: {}", status(&s))),
        Err(_) => lines.push("chat: hung".to_owned()),
    }

    let mut over_tls = EchoClient::new(channel(tls).await);
    let asked = Msg {
        count: 2,
        ..msg("tls")
    };
    match over_tls.serve(asked).await {
        Ok(r) => {
            let mut stream = r.into_inner();
            let mut got = Vec::new();
            while let Ok(Some(m)) = stream.message().await {
                got.push(m.text);
            }
            lines.push(format!("grpcs: {}", got.join(",")));
        }
        Err(s) => lines.push(format!("grpcs: {}", status(&s))),
    }
    // Connections to the server: one per call, or one for all with `keepalive`.
    for (label, p) in [("new", port), ("kept", kept)] {
        let mut client = EchoClient::new(channel(p).await);
        let mut ports = Vec::new();
        for _ in 0..3 {
            if let Ok(r) = client.unary(msg("which")).await {
                ports.push(
                    r.metadata()
                        .get("x-peer-port")
                        .map(|v| v.as_bytes().to_vec()),
                );
            }
        }
        ports.dedup();
        lines.push(format!("connections {label}: {}", ports.len()));
    }
    // An answer later than grpc_read_timeout: 504.
    let mut slowly = EchoClient::new(channel(slow).await);
    let late = Msg {
        delay_ms: 3000,
        ..msg("late")
    };
    match slowly.unary(late).await {
        Ok(_) => lines.push("slow: ok".to_owned()),
        Err(s) => lines.push(format!("slow: {}", status(&s))),
    }
    // A client that streams for longer than grpc_read_timeout: the timeout runs once its
    // body went out whole.
    let paced = async_stream_of(3, Duration::from_millis(400));
    match slowly.collect(paced).await {
        Ok(r) => lines.push(format!("slow client: {}", r.into_inner().text)),
        Err(s) => lines.push(format!("slow client: {}", status(&s))),
    }
    // `grpc_pass $backend`, the variable naming the scheme.
    let mut named = EchoClient::new(channel(by_variable).await);
    match named.unary(msg("named")).await {
        Ok(r) => lines.push(format!("variable: {}", r.into_inner().text)),
        Err(s) => lines.push(format!("variable: {}", status(&s))),
    }
    let mut down = EchoClient::new(channel(dead).await);
    match down.unary(msg("x")).await {
        Ok(_) => lines.push("dead: ok".to_owned()),
        Err(s) => lines.push(format!("dead: {:?}", s.code())),
    }
    let mut mapped = EchoClient::new(channel(mapped).await);
    match mapped.unary(msg("x")).await {
        Ok(_) => lines.push("mapped: ok".to_owned()),
        Err(s) => lines.push(format!("mapped: {}", status(&s))),
    }
    lines
}

#[test]
fn grpc_calls_pass_as_through_nginx() {
    if !tls_support::openssl_available() {
        support::skip("the openssl command is not installed");
        return;
    }
    let pki = tls_support::Pki::new();
    let pair = pki.self_signed("grpc", tls_support::KeyKind::P256, "localhost");
    let one = Echo::start("one");
    let two = Echo::start("two");
    // A port nobody listens on.
    let gone = support::free_ports(1)[0];
    let http = format!(
        r#"
    upstream echo {{
        server 127.0.0.1:{one};
        server 127.0.0.1:{two};
    }}
    server {{
        listen 127.0.0.1:{{PORT0}} http2;
        location /echo.Echo/Unary {{
            grpc_set_header X-Set "v-$http_x_id";
            grpc_pass grpc://echo;
        }}
        location / {{
            grpc_pass grpc://127.0.0.1:{one};
        }}
    }}
    server {{
        listen 127.0.0.1:{{PORT1}} http2;
        location / {{ grpc_pass 127.0.0.1:{gone}; }}
    }}
    server {{
        listen 127.0.0.1:{{PORT2}} http2;
        location / {{
            grpc_pass grpc://127.0.0.1:{gone};
            error_page 502 = /error502grpc;
        }}
        location = /error502grpc {{
            internal;
            default_type application/grpc;
            add_header grpc-status 14;
            add_header grpc-message "unavailable";
            return 204;
        }}
    }}
    server {{
        listen 127.0.0.1:{{PORT3}} ssl http2;
        ssl_certificate {cert};
        ssl_certificate_key {key};
        location / {{ grpc_pass grpc://127.0.0.1:{one}; }}
    }}
    upstream kept {{
        server 127.0.0.1:{one};
        keepalive 4;
    }}
    server {{
        listen 127.0.0.1:{{PORT6}} http2;
        location / {{ grpc_pass grpc://kept; }}
    }}
    server {{
        listen 127.0.0.1:{{PORT5}} http2;
        location / {{
            grpc_pass grpc://127.0.0.1:{one};
            grpc_read_timeout 300ms;
        }}
    }}
    server {{
        listen 127.0.0.1:{{PORT7}} http2;
        set $backend "grpc://127.0.0.1:{one}";
        location / {{ grpc_pass $backend; }}
    }}
    server {{
        listen 127.0.0.1:{{PORT4}} http2;
        location / {{
            grpc_pass grpcs://127.0.0.1:{{PORT3}};
            grpc_ssl_protocols TLSv1.2 TLSv1.3;
        }}
    }}
"#,
        one = one.addr.port(),
        two = two.addr.port(),
        cert = pair.cert.display(),
        key = pair.key.display(),
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 8, &main_config(&http)) else {
            continue;
        };
        let lines = rt.block_on(calls(&[
            server.port(0),
            server.port(1),
            server.port(2),
            server.port(4),
            server.port(5),
            server.port(6),
            server.port(7),
        ]));
        expect_lines(
            &lines,
            &[
                "unary: hello x-id=42 te=trailers x-set=v-42 content-type=application/grpc server=Some(\"",
                "fail: status NotFound \"asked to fail with 5\"",
                "balanced: one,one,two,two",
                "serve: item 0,item 1,item 2,item 3,item 4",
                "collect: a,b,c blob=600000",
                "collect: status Internal",
                "status: 413 Payload Too Large",
                "chat: re: ping 0,re: ping 1,re: ping 2,re: ping 3",
                // nginx's error page is HTML, which the client takes for no gRPC answer.
                "grpcs: tls 0,tls 1",
                "connections new: 3",
                "connections kept: 1",
                "slow client: m0,m1,m2 blob=0",
                "variable: named x-id=-",
                "status: 504 Gateway Timeout",
                "dead: Internal",
                "mapped: status Unavailable \"unavailable\"",
            ],
        );
        let log = server.error_log();
        assert!(
            log.contains("while connecting to upstream")
                && log.contains("upstream: \"grpc://127.0.0.1:"),
            "{kind}: {log}"
        );
        seen.push((kind, lines));
    }
    compare(&seen);
}

/// `grpc_pass` and the module's directives are checked at load as nginx checks them, with
/// its messages.
#[test]
fn grpc_directives_are_refused_as_nginx_refuses_them() {
    for (location, error) in [
        (
            "grpc_pass grpc://127.0.0.1:1/x;",
            "invalid host in upstream \"127.0.0.1:1/x\"",
        ),
        (
            "grpc_pass http://127.0.0.1:1;",
            "invalid host in upstream \"http://127.0.0.1:1\"",
        ),
        ("grpc_pass grpc://;", "no host in upstream \"\""),
        (
            "grpc_pass unix:;",
            "no path in the unix domain socket in upstream \"unix:\"",
        ),
        (
            "grpc_pass 127.0.0.1:1; grpc_next_upstream bogus;",
            "invalid value \"bogus\"",
        ),
        (
            "grpc_pass 127.0.0.1:1; grpc_set_header A;",
            "invalid number of arguments in \"grpc_set_header\" directive",
        ),
    ] {
        let http = format!("server {{ location / {{ {location} }} }}");
        for kind in kinds() {
            let dir = support::TempDir::new("grpc-t");
            let conf = dir.write(
                "nginx.conf",
                support::render(&main_config(&http), dir.path(), &[]),
            );
            let Some(binary) = kind.binary() else {
                continue;
            };
            let out = support::test_config(std::process::Command::new(binary), dir.path(), &conf);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{kind}: {location} loads");
            assert!(stderr.contains(error), "{kind}: {stderr}");
        }
    }
}

/// The raw answer to a unary call made over HTTP/1.1 (`te` the client's `TE` field),
/// without the lines that change from one run to the next.
fn over_http11(port: u16, method: &str, te: &str) -> String {
    use std::io::{Read, Write};
    // `Msg { text: "hi" }` in one gRPC message: no compression, its length, its bytes.
    let body = [0u8, 0, 0, 0, 4, 0x0a, 2, b'h', b'i'];
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let head = format!(
        "{method} /echo.Echo/Unary HTTP/1.1\r\nHost: x\r\nContent-Type: application/grpc\r\n{te}Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    c.write_all(head.as_bytes()).expect("send");
    c.write_all(&body).expect("send");
    let mut raw = Vec::new();
    let _ = c.read_to_end(&mut raw);
    String::from_utf8_lossy(&raw)
        .split("\r\n")
        .filter(|l| {
            !["Date: ", "Server: ", "x-peer-port: "]
                .iter()
                .any(|p| l.starts_with(p))
        })
        .collect::<Vec<_>>()
        .join("|")
}

/// An HTTP/1.1 client gets the answer chunked, with its trailers, whether or not it asked
/// for them (`TE: trailers` is passed only when it did); a HEAD gets the head alone.
#[test]
fn http11_clients_get_trailers_as_nginx_sends_them() {
    let one = Echo::start("one");
    let http = format!(
        "server {{ listen 127.0.0.1:{{PORT0}}; location / {{ grpc_pass 127.0.0.1:{}; }} }}",
        one.addr.port()
    );
    let mut seen = Vec::new();
    for kind in kinds() {
        let Some(server) = Server::start(kind, 1, &main_config(&http)) else {
            continue;
        };
        let lines = vec![
            over_http11(server.port(0), "POST", "TE: trailers\r\n"),
            over_http11(server.port(0), "POST", ""),
            // HEAD: the head alone.
            over_http11(server.port(0), "HEAD", ""),
        ];
        expect_lines(&lines, &["HTTP/1.1 200 OK", "grpc-status: 0"]);
        seen.push((kind, lines));
    }
    compare(&seen);
}
