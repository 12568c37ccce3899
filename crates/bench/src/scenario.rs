//! The seeds' scenarios and the configuration files each one runs on.
//!
//! A scenario is what the load generator asks for (one URL, keepalive or one request per
//! connection, an `Authorization` header or not) and what the system under test must do to
//! answer it (serve a file itself, or proxy to the upstream file servers over HTTP or HTTPS,
//! with or without the API gateway's rewrite and JWT check). Every scenario generates one
//! nginx.conf that nginx and portcullis both run unchanged, the upstream file servers'
//! nginx.conf, and where HAProxy can do the same work, an equivalent haproxy.cfg.

use std::fmt::Write;
use std::path::{Path, PathBuf};

/// The certificate of a TLS listener, as the seeds chose them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cert {
    /// ECDSA P-256 with ECDHE-ECDSA-AES256-GCM-SHA384: seeds 000 and 001.
    Ecdsa,
    /// RSA-2048 with ECDHE-RSA-AES256-GCM-SHA384: seed 004.
    Rsa,
}

impl Cert {
    /// The file stem of the certificate and key (`ecdsa.crt`, `ecdsa.key`).
    pub fn name(self) -> &'static str {
        match self {
            Cert::Ecdsa => "ecdsa",
            Cert::Rsa => "rsa",
        }
    }

    fn cipher(self) -> &'static str {
        match self {
            Cert::Ecdsa => "ECDHE-ECDSA-AES256-GCM-SHA384",
            Cert::Rsa => "ECDHE-RSA-AES256-GCM-SHA384",
        }
    }
}

/// How the system under test finds the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Content {
    /// It serves the file from its own root.
    Files,
    /// It proxies to the upstream file servers, over TLS when `tls` is set.
    Proxy { tls: bool },
    /// It passes the request to php-fpm over FastCGI (a unix-domain socket), which runs a
    /// PHP script.
    Php,
    /// It is an ingress controller proxying seed 003's Ingress to three upstream file
    /// servers over HTTP: each system on what its own controller generates
    /// ([`crate::ingress`]).
    Ingress,
}

/// The JWT algorithm the API gateway verifies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Jwt {
    Hs256,
    Rs256,
}

impl Jwt {
    pub fn alg(self) -> &'static str {
        match self {
            Jwt::Hs256 => "HS256",
            Jwt::Rs256 => "RS256",
        }
    }
}

/// One scenario of the seeds' method.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scenario {
    pub name: &'static str,
    pub about: &'static str,
    /// The path wrk requests.
    pub path: &'static str,
    /// TLS on the listener the load generator talks to.
    pub tls: Option<Cert>,
    pub content: Content,
    /// One request per connection (`Connection: close`): connections or TLS handshakes per
    /// second rather than requests.
    pub close: bool,
    pub jwt: Option<Jwt>,
    /// wrk sends a different valid token with every request (see
    /// [`crate::assets::wrk_token_cycle_script`]) instead of one token on all of them.
    pub distinct_tokens: bool,
    /// wrk sends the `jwt` token, but the gateway has no `auth_jwt`: what carrying the token
    /// costs, against which the scenario that checks it measures the check alone.
    pub bearer_only: bool,
    /// Every request goes through `limit_req` with a key per client, at a rate and burst
    /// no request reaches: the cost of the limit itself.
    pub limit_req: bool,
    /// `gzip` at this level, for `text/html`; wrk sends `Accept-Encoding: gzip`.
    pub gzip: Option<u32>,
    /// The proxy keeps the upstream's answers in a `proxy_cache`: after the first request
    /// every one is a cache hit.
    pub cache: bool,
}

const fn web(name: &'static str, path: &'static str, tls: Option<Cert>) -> Scenario {
    Scenario {
        name,
        about: "web server: GET of a file over keepalive connections (seed 004)",
        path,
        tls,
        content: Content::Files,
        close: false,
        jwt: None,
        distinct_tokens: false,
        bearer_only: false,
        limit_req: false,
        gzip: None,
        cache: false,
    }
}

const fn rp_http(path: &'static str) -> Scenario {
    Scenario {
        name: "rp-http",
        about: "reverse proxy as rp, plain HTTP in and to the upstreams",
        path,
        tls: None,
        content: Content::Proxy { tls: false },
        close: false,
        jwt: None,
        distinct_tokens: false,
        bearer_only: false,
        limit_req: false,
        gzip: None,
        cache: false,
    }
}

const fn apigw(name: &'static str, about: &'static str, jwt: Option<Jwt>) -> Scenario {
    Scenario {
        name,
        about,
        path: "/api_old/1kb",
        tls: Some(Cert::Ecdsa),
        content: Content::Proxy { tls: true },
        close: false,
        jwt,
        distinct_tokens: false,
        bearer_only: false,
        limit_req: false,
        gzip: None,
        cache: false,
    }
}

/// The gateway as apigw, wrk sending the token of the `jwt` scenario, which nothing checks:
/// the cost of carrying it, to measure the check against.
const fn bearer(name: &'static str, jwt: Jwt) -> Scenario {
    Scenario {
        bearer_only: true,
        ..apigw(
            name,
            "API gateway as apigw, wrk sending the token of apigw-jwt-* with the same \
             algorithm, which nothing checks: the cost of carrying the token",
            Some(jwt),
        )
    }
}

/// Every scenario, in the order `--scenarios all` runs them.
pub const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "rp",
        about: "reverse proxy: HTTPS in, HTTPS to two upstream ports, least_conn, keepalive, \
                1 KB file (seeds 000/001 Appendix D)",
        path: "/1kb",
        tls: Some(Cert::Ecdsa),
        content: Content::Proxy { tls: true },
        close: false,
        jwt: None,
        distinct_tokens: false,
        bearer_only: false,
        limit_req: false,
        gzip: None,
        cache: false,
    },
    rp_http("/1kb"),
    Scenario {
        name: "rp-cache-1k",
        about: "reverse proxy as rp-http with proxy_cache: the 1 KB file answered from the \
                cache on disk (a hit) rather than from the upstreams",
        cache: true,
        ..rp_http("/1kb")
    },
    Scenario {
        name: "rp-cache-100k",
        about: "reverse proxy as rp-cache-1k, a 100 KB file from the cache",
        cache: true,
        ..rp_http("/100kb")
    },
    apigw(
        "apigw",
        "API gateway: regex location, rewrite ... last to an internal location, proxy_pass to \
         an upstream named by a variable (seed 000 Appendix D)",
        None,
    ),
    apigw(
        "apigw-jwt-hs256",
        "API gateway with auth_jwt, HS256 token checked against a JWK file (seed 001)",
        Some(Jwt::Hs256),
    ),
    apigw(
        "apigw-jwt-rs256",
        "API gateway with auth_jwt, RS256 token checked against a JWK file (seed 002)",
        Some(Jwt::Rs256),
    ),
    bearer("apigw-bearer-hs256", Jwt::Hs256),
    bearer("apigw-bearer-rs256", Jwt::Rs256),
    Scenario {
        distinct_tokens: true,
        ..apigw(
            "apigw-jwt-rs256-unique",
            "API gateway as apigw-jwt-rs256, but every request carries a different valid token \
             (--jwt-tokens of them): an RS256 signature verification on every request, the \
             cost of auth_jwt without portcullis's verified-token cache",
            Some(Jwt::Rs256),
        )
    },
    web("web-0k", "/0kb", None),
    web("web-1k", "/1kb", None),
    Scenario {
        name: "web-1k-limit-req",
        about: "web server as web-1k, every request through limit_req with a key per client \
                (a rate and burst it never reaches): the cost of the limit",
        limit_req: true,
        ..web("web-1k", "/1kb", None)
    },
    web("web-10k", "/10kb", None),
    Scenario {
        name: "web-10k-gzip-1",
        about: "web server: GET of a 10 KB HTML page compressed on the way with gzip at level 1 \
                (nginx's default level), for a client that sends Accept-Encoding: gzip",
        gzip: Some(1),
        ..web("web-10k", "/10kb.html", None)
    },
    Scenario {
        name: "web-10k-gzip-6",
        about: "web server as web-10k-gzip-1 with gzip_comp_level 6",
        gzip: Some(6),
        ..web("web-10k", "/10kb.html", None)
    },
    web("web-100k", "/100kb", None),
    Scenario {
        name: "web-php",
        about: "web server with PHP: a 1 KB page made by a PHP script, through php-fpm on a \
                unix-domain socket (FastCGI, Debian's fastcgi_params)",
        content: Content::Php,
        ..web("web-php", "/1kb.php", None)
    },
    Scenario {
        name: "ingress-1k",
        about: "ingress controller: seed 003's RPS, HTTP, keepalive, a 1 KB file through the \
                Ingress to three backends; each system on its controller's configuration",
        content: Content::Ingress,
        ..web("ingress-1k", "/1kb", None)
    },
    Scenario {
        name: "ingress-tps-rsa",
        about: "ingress controller: seed 003's SSL TPS, HTTPS with RSA-2048 and \
                ECDHE-RSA-AES256-GCM-SHA384, one request per connection, a 0 KB answer \
                through the Ingress",
        content: Content::Ingress,
        close: true,
        ..web("ingress-tps-rsa", "/0kb", Some(Cert::Rsa))
    },
    web("web-https-0k", "/0kb", Some(Cert::Rsa)),
    web("web-https-1k", "/1kb", Some(Cert::Rsa)),
    web("web-https-10k", "/10kb", Some(Cert::Rsa)),
    web("web-https-100k", "/100kb", Some(Cert::Rsa)),
    Scenario {
        name: "cps",
        about: "connections per second: HTTP, one request per connection, empty file (seed 004)",
        path: "/0kb",
        tls: None,
        content: Content::Files,
        close: true,
        jwt: None,
        distinct_tokens: false,
        bearer_only: false,
        limit_req: false,
        gzip: None,
        cache: false,
    },
    Scenario {
        name: "tps-ecdsa",
        about: "SSL TPS: HTTPS, one request per connection, ECDSA P-256 certificate",
        path: "/0kb",
        tls: Some(Cert::Ecdsa),
        content: Content::Files,
        close: true,
        jwt: None,
        distinct_tokens: false,
        bearer_only: false,
        limit_req: false,
        gzip: None,
        cache: false,
    },
    Scenario {
        name: "tps-rsa",
        about: "SSL TPS: HTTPS, one request per connection, RSA-2048 certificate (seed 004)",
        path: "/0kb",
        tls: Some(Cert::Rsa),
        content: Content::Files,
        close: true,
        jwt: None,
        distinct_tokens: false,
        bearer_only: false,
        limit_req: false,
        gzip: None,
        cache: false,
    },
    Scenario {
        name: "throughput-100k",
        about: "throughput: HTTP, keepalive, 100 KB file (seed 004)",
        path: "/100kb",
        tls: None,
        content: Content::Files,
        close: false,
        jwt: None,
        distinct_tokens: false,
        bearer_only: false,
        limit_req: false,
        gzip: None,
        cache: false,
    },
    Scenario {
        name: "throughput-1m",
        about: "throughput: HTTP, keepalive, 1 MB file (seed 004)",
        path: "/1mb",
        tls: None,
        content: Content::Files,
        close: false,
        jwt: None,
        distinct_tokens: false,
        bearer_only: false,
        limit_req: false,
        gzip: None,
        cache: false,
    },
    Scenario {
        name: "throughput-10m",
        about: "throughput: HTTP, keepalive, 10 MB file (seed 004)",
        path: "/10mb",
        tls: None,
        content: Content::Files,
        close: false,
        jwt: None,
        distinct_tokens: false,
        bearer_only: false,
        limit_req: false,
        gzip: None,
        cache: false,
    },
];

/// The files every docroot holds, made as the seeds' `dd if=/dev/urandom ... bs=1024`:
/// name and size in bytes.
pub const FILES: &[(&str, usize)] = &[
    ("0kb", 0),
    ("1kb", 1024),
    ("10kb", 10 * 1024),
    ("100kb", 100 * 1024),
    ("1mb", 1024 * 1024),
    ("10mb", 10 * 1024 * 1024),
];

/// The HTML page of the gzip scenarios: text that compresses as a web page does.
pub const PAGE: (&str, usize) = ("10kb.html", 10 * 1024);

/// The PHP script of `web-php`, and the length of the page it makes.
pub const PHP_SCRIPT: (&str, &str, usize) =
    ("1kb.php", "<?php echo str_repeat('x', 1024);\n", 1024);

/// The FastCGI params of `web-php`: Debian's `fastcgi_params`, with the script's file.
const FASTCGI_PARAMS: &[(&str, &str)] = &[
    ("QUERY_STRING", "$query_string"),
    ("REQUEST_METHOD", "$request_method"),
    ("CONTENT_TYPE", "$content_type"),
    ("CONTENT_LENGTH", "$content_length"),
    ("SCRIPT_NAME", "$fastcgi_script_name"),
    ("REQUEST_URI", "$request_uri"),
    ("DOCUMENT_URI", "$document_uri"),
    ("DOCUMENT_ROOT", "$document_root"),
    ("SERVER_PROTOCOL", "$server_protocol"),
    ("REQUEST_SCHEME", "$scheme"),
    ("GATEWAY_INTERFACE", "CGI/1.1"),
    ("SERVER_SOFTWARE", "nginx/$nginx_version"),
    ("REMOTE_ADDR", "$remote_addr"),
    ("REMOTE_PORT", "$remote_port"),
    ("SERVER_ADDR", "$server_addr"),
    ("SERVER_PORT", "$server_port"),
    ("SERVER_NAME", "$server_name"),
    ("REDIRECT_STATUS", "200"),
    ("HTTP_HOST", "$host"),
    ("SCRIPT_FILENAME", "$document_root$fastcgi_script_name"),
];

/// The scenario named `name`.
pub fn find(name: &str) -> Option<&'static Scenario> {
    SCENARIOS.iter().find(|s| s.name == name)
}

/// Connections each system may hold per worker, as nginx's `worker_connections`: above
/// wrk's connections plus the upstream keepalive pool, with room to spare.
const WORKER_CONNECTIONS: u32 = 16384;
/// HAProxy's `maxconn`: its FD limit must hold two descriptors per connection, and a
/// container's hard limit may be as low as 20000.
const HAPROXY_MAXCONN: u32 = 8000;
/// Idle keepalive connections to the upstreams each worker keeps (seed 000's value).
const UPSTREAM_KEEPALIVE: u32 = 512;

/// Where a scenario's files are and which ports it uses: everything a generated config
/// names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// The work directory; configs, docroot (`html/`), certificates (`ssl/`), JWK (`jwk/`)
    /// and logs (`logs/`) live under it.
    pub dir: PathBuf,
    /// The port the system under test listens on.
    pub port: u16,
    /// Another port it may listen on, which the load does not use (an ingress controller
    /// listens for HTTP and HTTPS both).
    pub second_port: u16,
    /// The upstream file servers' ports: two for the reverse proxy's group, two for the API
    /// gateway's, as seed 000's 443-446.
    pub upstream_ports: [u16; 4],
}

impl Layout {
    pub fn html(&self) -> PathBuf {
        self.dir.join("html")
    }

    pub fn cert(&self, cert: Cert) -> PathBuf {
        self.dir.join("ssl").join(format!("{}.crt", cert.name()))
    }

    pub fn key(&self, cert: Cert) -> PathBuf {
        self.dir.join("ssl").join(format!("{}.key", cert.name()))
    }

    /// Certificate and key in one file, as HAProxy's `crt` takes them.
    pub fn pem(&self, cert: Cert) -> PathBuf {
        self.dir.join("ssl").join(format!("{}.pem", cert.name()))
    }

    pub fn jwk(&self) -> PathBuf {
        self.dir.join("jwk").join("keys.jwk")
    }

    /// The RS256 public key as PEM, for HAProxy's `jwt_verify`.
    pub fn jwt_public_pem(&self) -> PathBuf {
        self.dir.join("jwk").join("rs256.pub.pem")
    }

    /// php-fpm's socket (`web-php`).
    pub fn php_socket(&self) -> PathBuf {
        self.dir.join("php-fpm.sock")
    }

    pub fn logs(&self) -> PathBuf {
        self.dir.join("logs")
    }
}

/// The seeds' http settings (seed 000 Appendix D), shared by the system under test and the
/// upstream file servers.
const HTTP_SETTINGS: &str = "    default_type application/octet-stream;
    access_log off;

    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;

    keepalive_timeout 65;
    keepalive_requests 1000000000;
";

/// The per-client limit of the `limit_req` scenarios, at the http level.
const LIMIT_REQ: &str = "
    limit_req_zone $binary_remote_addr zone=per_client:10m rate=100000000r/s;
    limit_req zone=per_client burst=100000000 nodelay;
";

fn main_context(out: &mut String, workers: u32, logs: &Path, name: &str) {
    let logs = logs.display();
    let _ = write!(
        out,
        "worker_processes {workers};
worker_rlimit_nofile 1000000;
error_log {logs}/{name}-error.log crit;
pid {logs}/{name}.pid;

events {{
    worker_connections {WORKER_CONNECTIONS};
}}

http {{
{HTTP_SETTINGS}"
    );
}

/// The ssl_* lines of a server block. The protocol is named because the defaults differ
/// (nginx 1.22 offers up to TLS 1.2, portcullis and later nginx also 1.3) and a comparison
/// must negotiate the same; TLS 1.2 is what the seeds' cipher names select.
fn ssl_lines(out: &mut String, layout: &Layout, cert: Cert) {
    let _ = write!(
        out,
        "        ssl_certificate {};
        ssl_certificate_key {};
        ssl_ciphers {};
        ssl_protocols TLSv1.2;
",
        layout.cert(cert).display(),
        layout.key(cert).display(),
        cert.cipher()
    );
}

impl Scenario {
    /// The algorithm of the token the gateway checks, if it checks one.
    pub fn checked_jwt(&self) -> Option<Jwt> {
        self.jwt.filter(|_| !self.bearer_only)
    }

    /// The URL wrk and the readiness probe request.
    pub fn url(&self, port: u16) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{port}{}", self.path)
    }

    /// Bytes of a successful answer's body.
    pub fn body_len(&self) -> usize {
        let file = self.path.rsplit('/').next().unwrap_or_default();
        if file == PHP_SCRIPT.0 {
            return PHP_SCRIPT.2;
        }
        FILES
            .iter()
            .chain([&PAGE])
            .find(|(name, _)| *name == file)
            .map_or(0, |&(_, len)| len)
    }

    pub fn needs_upstreams(&self) -> bool {
        matches!(self.content, Content::Proxy { .. } | Content::Ingress)
    }

    /// The `Host` the load sends, where the system routes by it.
    pub fn host(&self) -> Option<&'static str> {
        (self.content == Content::Ingress).then_some(crate::ingress::HOST)
    }

    /// The certificates the scenario's configs name.
    pub fn certs(&self) -> Vec<Cert> {
        let mut certs: Vec<Cert> = self.tls.into_iter().collect();
        // An ingress controller's default server has a certificate whatever the load uses.
        if self.content == Content::Ingress && !certs.contains(&Cert::Rsa) {
            certs.push(Cert::Rsa);
        }
        if self.content == (Content::Proxy { tls: true }) && !certs.contains(&Cert::Ecdsa) {
            certs.push(Cert::Ecdsa);
        }
        certs
    }

    /// The nginx.conf portcullis runs where it is not [`Scenario::nginx_conf`]: an ingress
    /// controller's, what `portcullis-ingress` makes of the Ingress.
    pub fn portcullis_conf(&self, layout: &Layout, workers: u32) -> anyhow::Result<Option<String>> {
        if self.content != Content::Ingress {
            return Ok(None);
        }
        let mut out = String::new();
        main_context(&mut out, workers, &layout.logs(), "server");
        self.ingress_tls(&mut out);
        out.push_str(&crate::ingress::portcullis_http(
            &self.site(layout),
            self.tls.is_some(),
        )?);
        out.push_str("}\n");
        Ok(Some(out))
    }

    /// Where an ingress controller serves from: the load's port first (HTTP or HTTPS), the
    /// other one second, the first three upstream file servers its Service's endpoints.
    fn site(&self, layout: &Layout) -> crate::ingress::Site {
        let (http_port, https_port) = match self.tls {
            Some(_) => (layout.second_port, layout.port),
            None => (layout.port, layout.second_port),
        };
        let [a, b, c, _] = layout.upstream_ports;
        crate::ingress::Site {
            dir: layout.dir.clone(),
            cert: layout.cert(Cert::Rsa),
            key: layout.key(Cert::Rsa),
            http_port,
            https_port,
            backends: [a, b, c],
        }
    }

    /// The seed's TLS version and cipher, in `http` as the controllers' ConfigMaps put them.
    fn ingress_tls(&self, out: &mut String) {
        if let Some(cert) = self.tls {
            let _ = write!(
                out,
                "    ssl_protocols TLSv1.2;\n    ssl_ciphers {};\n",
                cert.cipher()
            );
        }
    }

    /// The nginx.conf of the system under test, which nginx and portcullis both run (an
    /// ingress controller's: nginx's, see [`Scenario::portcullis_conf`]).
    pub fn nginx_conf(&self, layout: &Layout, workers: u32) -> String {
        let mut out = String::new();
        main_context(&mut out, workers, &layout.logs(), "server");
        if self.content == Content::Ingress {
            self.ingress_tls(&mut out);
            out.push_str(&crate::ingress::nginx_http(
                &self.site(layout),
                self.tls.is_some(),
            ));
            out.push_str("}\n");
            return out;
        }
        if self.limit_req {
            out.push_str(LIMIT_REQ);
        }
        if let Some(level) = self.gzip {
            let _ = write!(
                out,
                "
    types {{
        text/html html;
    }}
    gzip on;
    gzip_comp_level {level};
"
            );
        }
        if self.cache {
            let _ = write!(
                out,
                "
    proxy_cache_path {} levels=1:2 keys_zone=bench:10m use_temp_path=off;
",
                layout.dir.join("cache").display()
            );
        }
        if let Content::Proxy { tls } = self.content {
            let [a, b, c, d] = layout.upstream_ports;
            for (group, ports) in [("file_servers", [a, b]), ("api_file_servers", [c, d])] {
                let _ = write!(
                    out,
                    "
    upstream {group} {{
        least_conn;
        server 127.0.0.1:{};
        server 127.0.0.1:{};
        keepalive {UPSTREAM_KEEPALIVE};
        keepalive_requests 1000000;
    }}
",
                    ports[0], ports[1]
                );
            }
            let scheme = if tls { "https" } else { "http" };
            if let Some(jwt) = self.checked_jwt() {
                let _ = write!(
                    out,
                    "
    auth_jwt \"Performance Test API {}\";
    auth_jwt_key_file {};
",
                    jwt.alg(),
                    layout.jwk().display()
                );
            }
            let ssl = if self.tls.is_some() { " ssl" } else { "" };
            let cache = if self.cache {
                "\n            proxy_cache bench;\n            proxy_cache_valid 200 1h;"
            } else {
                ""
            };
            let _ = writeln!(
                out,
                "
    server {{
        listen 127.0.0.1:{}{ssl} reuseport backlog=65535;",
                layout.port
            );
            if let Some(cert) = self.tls {
                ssl_lines(&mut out, layout, cert);
            }
            let _ = write!(
                out,
                "
        location ~ ^/api_old/(.*)*$ {{
            limit_except GET {{
                deny all;
            }}
            set $upstream api_file_servers;
            rewrite ^/api_old/(.*)$ /api_new/$1 last;
        }}

        location /api_new {{
            internal;
            proxy_pass {scheme}://$upstream;
            proxy_http_version 1.1;
            proxy_set_header Connection \"\";
        }}

        location / {{
            proxy_pass {scheme}://file_servers;
            proxy_http_version 1.1;
            proxy_set_header Connection \"\";{cache}
        }}
    }}
}}
"
            );
        } else {
            let ssl = if self.tls.is_some() { " ssl" } else { "" };
            let _ = writeln!(
                out,
                "
    server {{
        listen 127.0.0.1:{}{ssl} reuseport backlog=65535;",
                layout.port
            );
            if let Some(cert) = self.tls {
                ssl_lines(&mut out, layout, cert);
            }
            let mut php = String::new();
            if self.content == Content::Php {
                let _ = writeln!(
                    php,
                    "
        location ~ \\.php$ {{
            fastcgi_pass unix:{};",
                    layout.php_socket().display()
                );
                for (name, value) in FASTCGI_PARAMS {
                    let _ = writeln!(php, "            fastcgi_param {name} {value};");
                }
                php.push_str("        }\n");
            }
            let _ = write!(
                out,
                "        root {};

        location / {{
        }}
{php}    }}
}}
",
                layout.html().display()
            );
        }
        out
    }

    /// The upstream file servers' nginx.conf: one nginx, `workers` processes, four ports
    /// serving the docroot to GET only (seed 000 Appendix D), or `None` when the scenario
    /// has no upstreams.
    pub fn upstream_conf(&self, layout: &Layout, workers: u32) -> Option<String> {
        let tls = match self.content {
            Content::Proxy { tls } => tls,
            Content::Ingress => false,
            Content::Files | Content::Php => return None,
        };
        let mut out = String::new();
        main_context(&mut out, workers, &layout.logs(), "upstream");
        let ssl = if tls { " ssl" } else { "" };
        out.push_str("\n    server {\n");
        for port in layout.upstream_ports {
            let _ = writeln!(out, "        listen 127.0.0.1:{port}{ssl} reuseport;");
        }
        if tls {
            ssl_lines(&mut out, layout, Cert::Ecdsa);
        }
        let _ = write!(
            out,
            "        root {};

        location / {{
            limit_except GET {{
                deny all;
            }}
        }}
    }}
}}
",
            layout.html().display()
        );
        Some(out)
    }

    /// The arguments of `portcullis-bench floor` for this scenario, one per line, or `None`
    /// when the floor cannot stand in for the proxy: it passes requests unchanged, so only
    /// a proxy scenario that neither rewrites, checks, limits, compresses nor caches has one.
    /// It spreads clients round robin over the two upstream ports rp and rp-http use.
    pub fn floor_args(&self, layout: &Layout, workers: u32) -> Option<String> {
        let Content::Proxy { tls } = self.content else {
            return None;
        };
        let plain_proxy = self.jwt.is_none()
            && !self.cache
            && !self.limit_req
            && self.gzip.is_none()
            && !self.path.starts_with("/api_old/");
        if !plain_proxy {
            return None;
        }
        let [a, b, _, _] = layout.upstream_ports;
        let mut out = format!(
            "--listen\n127.0.0.1:{}\n--upstream\n127.0.0.1:{a}\n--upstream\n127.0.0.1:{b}\n\
             --workers\n{workers}\n",
            layout.port
        );
        if let Some(cert) = self.tls {
            let _ = write!(
                out,
                "--cert\n{}\n--key\n{}\n--cipher\n{}\n",
                layout.cert(cert).display(),
                layout.key(cert).display(),
                cert.cipher()
            );
        }
        if tls {
            out.push_str("--upstream-tls\n");
        }
        Some(out)
    }

    /// An haproxy.cfg doing the same work as [`Scenario::nginx_conf`], or `None` when the
    /// scenario serves files, which HAProxy does not do, or caches.
    pub fn haproxy_cfg(&self, layout: &Layout, workers: u32, hs256_secret: &str) -> Option<String> {
        let Content::Proxy { tls } = self.content else {
            return None;
        };
        // HAProxy's cache is of another kind (in memory, small objects): not the same work.
        if self.cache {
            return None;
        }
        let mut out = format!(
            "global
    nbthread {workers}
    maxconn {HAPROXY_MAXCONN}
    ssl-default-bind-ciphers {}
    ssl-default-bind-options ssl-max-ver TLSv1.2
    tune.ssl.default-dh-param 2048

defaults
    mode http
    timeout connect 5s
    timeout client 65s
    timeout server 65s
    timeout http-keep-alive 65s
    option http-keep-alive
    http-reuse always

frontend gateway
",
            Cert::Ecdsa.cipher()
        );
        match self.tls {
            Some(cert) => {
                let _ = writeln!(
                    out,
                    "    bind 127.0.0.1:{} ssl crt {}",
                    layout.port,
                    layout.pem(cert).display()
                );
            }
            None => {
                let _ = writeln!(out, "    bind 127.0.0.1:{}", layout.port);
            }
        }
        if let Some(jwt) = self.checked_jwt() {
            let key = match jwt {
                Jwt::Hs256 => format!("\"{hs256_secret}\""),
                Jwt::Rs256 => format!("\"{}\"", layout.jwt_public_pem().display()),
            };
            let _ = write!(
                out,
                "    http-request set-var(txn.bearer) http_auth_bearer
    http-request set-var(txn.jwt_alg) var(txn.bearer),jwt_header_query('$.alg')
    http-request deny deny_status 401 unless {{ var(txn.jwt_alg) -m str {} }}
    http-request deny deny_status 401 unless {{ var(txn.bearer),jwt_verify(txn.jwt_alg,{key}) -m int 1 }}
",
                jwt.alg()
            );
        }
        let server_ssl = if tls { " ssl verify none" } else { "" };
        let [a, b, c, d] = layout.upstream_ports;
        let _ = write!(
            out,
            "    acl api path_reg ^/api_old/
    http-request deny deny_status 403 if api !METH_GET
    http-request replace-path ^/api_old/(.*)$ /api_new/\\1 if api
    use_backend api_file_servers if api
    default_backend file_servers

backend file_servers
    balance leastconn
    server a 127.0.0.1:{a}{server_ssl}
    server b 127.0.0.1:{b}{server_ssl}

backend api_file_servers
    balance leastconn
    server c 127.0.0.1:{c}{server_ssl}
    server d 127.0.0.1:{d}{server_ssl}
"
        );
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> Layout {
        Layout {
            dir: PathBuf::from("/tmp/bench"),
            port: 8443,
            second_port: 8444,
            upstream_ports: [9001, 9002, 9003, 9004],
        }
    }

    #[test]
    fn web_php_passes_scripts_to_php_fpm() {
        let php = find("web-php").unwrap();
        assert_eq!(php.body_len(), 1024);
        assert!(!php.needs_upstreams());
        let conf = php.nginx_conf(&layout(), 1);
        assert!(
            conf.contains(
                "location ~ \\.php$ {\n            fastcgi_pass unix:/tmp/bench/php-fpm.sock;"
            ),
            "{conf}"
        );
        assert!(
            conf.contains("fastcgi_param SCRIPT_FILENAME $document_root$fastcgi_script_name;"),
            "{conf}"
        );
        assert_eq!(php.haproxy_cfg(&layout(), 1, "s"), None);
    }

    #[test]
    fn names_are_unique_and_found() {
        for s in SCENARIOS {
            assert_eq!(find(s.name), Some(s));
            assert!(s.path.starts_with('/'), "{}", s.name);
        }
        assert_eq!(find("web-2k"), None);
    }

    #[test]
    fn urls_and_bodies_follow_the_scenario() {
        let rp = find("rp").unwrap();
        assert_eq!(rp.url(8443), "https://127.0.0.1:8443/1kb");
        assert_eq!(rp.body_len(), 1024);
        assert_eq!(rp.certs(), vec![Cert::Ecdsa]);
        assert_eq!(find("apigw").unwrap().body_len(), 1024);
        assert_eq!(find("cps").unwrap().url(80), "http://127.0.0.1:80/0kb");
        assert_eq!(find("throughput-10m").unwrap().body_len(), 10 << 20);
        assert!(find("web-1k").unwrap().certs().is_empty());
        let cached = find("rp-cache-100k").unwrap();
        assert_eq!(cached.body_len(), 100 * 1024);
        let conf = cached.nginx_conf(&layout(), 1);
        assert!(
            conf.contains("proxy_cache_path /tmp/bench/cache "),
            "{conf}"
        );
        assert!(conf.contains("proxy_cache bench;"), "{conf}");
        assert_eq!(cached.haproxy_cfg(&layout(), 1, "s"), None);
        assert!(!find("rp-http")
            .unwrap()
            .nginx_conf(&layout(), 1)
            .contains("proxy_cache"));
        let limited = find("web-1k-limit-req").unwrap().nginx_conf(&layout(), 1);
        assert!(limited.contains("limit_req zone=per_client"), "{limited}");
        assert!(!find("web-1k")
            .unwrap()
            .nginx_conf(&layout(), 1)
            .contains("limit_req"));
    }

    #[test]
    fn apigw_config_is_seed_000s() {
        let conf = find("apigw").unwrap().nginx_conf(&layout(), 2);
        assert!(conf.starts_with("worker_processes 2;\n"), "{conf}");
        assert!(conf.contains("location ~ ^/api_old/(.*)*$ {"), "{conf}");
        assert!(conf.contains("rewrite ^/api_old/(.*)$ /api_new/$1 last;"));
        assert!(conf.contains("proxy_pass https://$upstream;"));
        assert!(conf.contains("server 127.0.0.1:9003;"));
        assert!(conf.contains("ssl_ciphers ECDHE-ECDSA-AES256-GCM-SHA384;"));
        assert!(!conf.contains("auth_jwt"));
        let jwt = find("apigw-jwt-rs256").unwrap().nginx_conf(&layout(), 1);
        assert!(
            jwt.contains("auth_jwt_key_file /tmp/bench/jwk/keys.jwk;"),
            "{jwt}"
        );
    }

    #[test]
    fn web_configs_serve_the_docroot() {
        let conf = find("web-https-1k").unwrap().nginx_conf(&layout(), 1);
        assert!(
            conf.contains("listen 127.0.0.1:8443 ssl reuseport"),
            "{conf}"
        );
        assert!(conf.contains("root /tmp/bench/html;"));
        assert!(conf.contains("ssl_certificate /tmp/bench/ssl/rsa.crt;"));
        assert!(!conf.contains("upstream"));
        assert_eq!(find("web-1k").unwrap().upstream_conf(&layout(), 1), None);
        assert_eq!(find("web-1k").unwrap().haproxy_cfg(&layout(), 1, "s"), None);
    }

    #[test]
    fn bearer_scenarios_send_the_token_and_check_nothing() {
        for (bearer, checked) in [
            ("apigw-bearer-hs256", "apigw-jwt-hs256"),
            ("apigw-bearer-rs256", "apigw-jwt-rs256"),
        ] {
            let (bearer, checked) = (find(bearer).unwrap(), find(checked).unwrap());
            assert_eq!(bearer.jwt, checked.jwt);
            assert_eq!(bearer.checked_jwt(), None);
            assert_eq!(checked.checked_jwt(), checked.jwt);
            let conf = bearer.nginx_conf(&layout(), 1);
            assert!(!conf.contains("auth_jwt"), "{conf}");
            assert_eq!(conf, find("apigw").unwrap().nginx_conf(&layout(), 1));
            let cfg = bearer.haproxy_cfg(&layout(), 1, "s").unwrap();
            assert!(!cfg.contains("jwt_verify"), "{cfg}");
            assert!(checked.nginx_conf(&layout(), 1).contains("auth_jwt"));
        }
    }

    #[test]
    fn the_floor_stands_in_only_for_a_proxy_that_passes_requests_unchanged() {
        let rp = find("rp").unwrap().floor_args(&layout(), 2).unwrap();
        let lines: Vec<&str> = rp.lines().collect();
        assert_eq!(
            lines[..8],
            [
                "--listen",
                "127.0.0.1:8443",
                "--upstream",
                "127.0.0.1:9001",
                "--upstream",
                "127.0.0.1:9002",
                "--workers",
                "2"
            ]
        );
        assert!(lines.contains(&"--upstream-tls"), "{rp}");
        assert!(lines.contains(&"ECDHE-ECDSA-AES256-GCM-SHA384"), "{rp}");
        let plain = find("rp-http").unwrap().floor_args(&layout(), 1).unwrap();
        assert!(
            !plain.contains("--upstream-tls") && !plain.contains("--cert"),
            "{plain}"
        );
        for name in ["apigw", "apigw-jwt-hs256", "rp-cache-1k", "web-1k", "cps"] {
            assert_eq!(find(name).unwrap().floor_args(&layout(), 1), None, "{name}");
        }
    }

    #[test]
    fn upstream_config_listens_on_four_ports() {
        let conf = find("rp-http")
            .unwrap()
            .upstream_conf(&layout(), 1)
            .unwrap();
        for port in layout().upstream_ports {
            assert!(conf.contains(&format!("listen 127.0.0.1:{port} reuseport;")));
        }
        assert!(!conf.contains("ssl"), "{conf}");
    }

    #[test]
    fn unique_tokens_run_the_rs256_configs() {
        let unique = find("apigw-jwt-rs256-unique").unwrap();
        let rs256 = find("apigw-jwt-rs256").unwrap();
        assert!(unique.distinct_tokens);
        assert!(SCENARIOS
            .iter()
            .all(|s| s.distinct_tokens == (s.name == unique.name)));
        assert_eq!(unique.jwt, Some(Jwt::Rs256));
        assert_eq!(unique.url(8443), rs256.url(8443));
        assert_eq!(
            unique.nginx_conf(&layout(), 2),
            rs256.nginx_conf(&layout(), 2)
        );
        assert_eq!(
            unique.haproxy_cfg(&layout(), 2, ""),
            rs256.haproxy_cfg(&layout(), 2, "")
        );
        assert!(unique.about.contains("every request"), "{}", unique.about);
    }

    #[test]
    fn haproxy_verifies_the_token() {
        let cfg = find("apigw-jwt-hs256")
            .unwrap()
            .haproxy_cfg(&layout(), 2, "sekrit")
            .unwrap();
        assert!(cfg.contains("nbthread 2"), "{cfg}");
        assert!(cfg.contains("jwt_verify(txn.jwt_alg,\"sekrit\")"), "{cfg}");
        assert!(cfg.contains("-m str HS256"));
        assert!(cfg.contains("bind 127.0.0.1:8443 ssl crt /tmp/bench/ssl/ecdsa.pem"));
        assert!(cfg.contains("server c 127.0.0.1:9003 ssl verify none"));
    }
}
