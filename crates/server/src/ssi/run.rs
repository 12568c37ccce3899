//! The SSI commands run as nginx's SSI filter runs them, on one body at a time: `include`,
//! `echo`, `config`, `set`, `if`/`elif`/`else`/`endif` and `block`/`endblock`.
//!
//! A body's own state (whether its text goes out, its `config`, the echo encoding) is its
//! own; `set` variables, blocks and the captures of the last `if` regex are the main
//! request's, shared by every body an include brings in ([`Shared`]). A command that fails
//! is logged and replaced by the error message, unless `ssi_silent_errors` is on.

use std::cell::RefCell;
use std::sync::Arc;

use crate::location::{Captures, LocationRegex};
use crate::request::Request;
use crate::subrequest::{self, Keep};
use crate::Level;

use super::parse::{self, Command, Piece};
use super::Conf;

/// The most parameters a command takes (`NGX_HTTP_SSI_MAX_PARAMS`).
const MAX_PARAMS: usize = 16;
/// How deep subrequests nest below the main request before nginx refuses the next one.
const MAX_DEPTH: usize = 51;
/// The most bytes all the includes of one main request bring in: past them, the response
/// fails (nginx streams them; here they are held).
const MAX_INCLUDED: usize = 64 * 1024 * 1024;
/// The `config errmsg` and `timefmt` before any `config`.
const ERRMSG: &[u8] = b"[an error occurred while processing the directive]";
pub(super) const TIMEFMT: &[u8] = b"%A, %d-%b-%Y %H:%M:%S %Z";

/// What the bodies of one main request share.
#[derive(Default)]
pub(super) struct Shared(RefCell<State>);

#[derive(Default)]
struct State {
    /// `set` variables (and named captures), names lowercase, in the order made.
    vars: Vec<(Vec<u8>, Vec<u8>)>,
    /// `block`s by name, with the text they hold.
    blocks: Vec<(Vec<u8>, Vec<u8>)>,
    /// The last `if` regex that matched (`$0` to `$9`), and its subject.
    captures: Option<(Vec<u8>, Captures)>,
    /// Bytes the includes brought in so far.
    included: usize,
    /// Something failed that nginx fails the whole response for (logged then).
    aborted: bool,
}

/// The response cannot be made: nginx ends it without an answer.
pub(super) struct Abort;

/// `echo`'s encoding, which a command's `encoding=` changes for the commands after it.
#[derive(Clone, Copy)]
enum Encoding {
    None,
    Url,
    Entity,
}

/// Where `if` commands are: nginx's `NGX_HTTP_SSI_COND_IF` and `_ELSE`.
const IF: u8 = 1;
const ELSE: u8 = 2;

/// One body's state.
struct Doc {
    /// The type of the response the body is of.
    content_type: Option<Arc<str>>,
    out: Vec<u8>,
    /// Its text goes out (not in an `if` branch that is not taken, nor in a block).
    output: bool,
    /// A branch of the current `if` was taken.
    chosen: bool,
    /// 0 outside an `if`, [`IF`] after `if` or `elif`, [`ELSE`] after `else`.
    conditional: u8,
    /// Inside a `block`.
    block: bool,
    encoding: Encoding,
    errmsg: Vec<u8>,
    timefmt: Vec<u8>,
}

/// A command nginx knows: its parameters (name, mandatory), where it may stand, and whether
/// it is the one a block ends with.
struct Spec {
    name: &'static [u8],
    params: &'static [(&'static [u8], bool)],
    conditional: u8,
    ends_block: bool,
}

const COMMANDS: &[Spec] = &[
    Spec {
        name: b"include",
        params: &[
            (b"virtual", false),
            (b"file", false),
            (b"wait", false),
            (b"set", false),
            (b"stub", false),
        ],
        conditional: 0,
        ends_block: false,
    },
    Spec {
        name: b"echo",
        params: &[(b"var", true), (b"default", false), (b"encoding", false)],
        conditional: 0,
        ends_block: false,
    },
    Spec {
        name: b"config",
        params: &[(b"errmsg", false), (b"timefmt", false)],
        conditional: 0,
        ends_block: false,
    },
    Spec {
        name: b"set",
        params: &[(b"var", true), (b"value", true)],
        conditional: 0,
        ends_block: false,
    },
    Spec {
        name: b"if",
        params: &[(b"expr", true)],
        conditional: 0,
        ends_block: false,
    },
    Spec {
        name: b"elif",
        params: &[(b"expr", true)],
        conditional: IF,
        ends_block: false,
    },
    Spec {
        name: b"else",
        params: &[],
        conditional: IF,
        ends_block: false,
    },
    Spec {
        name: b"endif",
        params: &[],
        conditional: ELSE,
        ends_block: false,
    },
    Spec {
        name: b"block",
        params: &[(b"name", true)],
        conditional: 0,
        ends_block: false,
    },
    Spec {
        name: b"endblock",
        params: &[],
        conditional: 0,
        ends_block: true,
    },
];

/// A command failed: nginx's log message of why.
type Failed = String;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Runs the commands of `body`, a response to `req` of type `content_type`, and returns
/// what goes out; `depth`: how many subrequests deep `req` is.
pub(super) async fn run(
    req: &Request<'_>,
    conf: &Conf,
    body: &[u8],
    content_type: Option<&Arc<str>>,
) -> Result<Vec<u8>, Abort> {
    let shared = req.main_ctx::<Shared>();
    let mut doc = Doc {
        content_type: content_type.cloned(),
        out: Vec::with_capacity(body.len()),
        output: true,
        chosen: false,
        conditional: 0,
        block: false,
        encoding: Encoding::Entity,
        errmsg: ERRMSG.to_vec(),
        timefmt: TIMEFMT.to_vec(),
    };
    for piece in parse::parse(body, conf.value_len) {
        if shared.0.borrow().aborted {
            return Err(Abort);
        }
        let done = match piece {
            Piece::Text(t) => {
                doc.text(&shared, t);
                Ok(())
            }
            Piece::Error(why) => Err(why),
            Piece::Command(c) => doc.command(req, &shared, c).await,
        };
        if let Err(why) = done {
            req.log(Level::Error, &why);
            // Whether or not the text around goes out, as nginx does.
            if !conf.silent_errors {
                doc.out.extend_from_slice(&doc.errmsg);
            }
        }
    }
    if shared.0.borrow().aborted {
        return Err(Abort);
    }
    Ok(doc.out)
}

impl Doc {
    fn text(&mut self, shared: &Shared, t: &[u8]) {
        if self.output {
            self.out.extend_from_slice(t);
        } else if self.block {
            if let Some((_, held)) = shared.0.borrow_mut().blocks.last_mut() {
                held.extend_from_slice(t);
            }
        }
    }

    async fn command(
        &mut self,
        req: &Request<'_>,
        shared: &Shared,
        c: Command,
    ) -> Result<(), Failed> {
        let Some(spec) = COMMANDS.iter().find(|s| s.name == c.name.as_slice()) else {
            if self.output {
                return Err(format!("invalid SSI command: \"{}\"", text(&c.name)));
            }
            return Ok(());
        };
        if !self.output && !spec.ends_block {
            if self.block {
                // Kept as written, for the `include` that shows the block.
                let held = rewritten(&c);
                if let Some((_, b)) = shared.0.borrow_mut().blocks.last_mut() {
                    b.extend_from_slice(&held);
                }
                return Ok(());
            }
            if spec.conditional == 0 {
                return Ok(());
            }
        }
        if spec.conditional != 0 && (self.conditional == 0 || self.conditional > spec.conditional) {
            return Err(format!(
                "invalid context of SSI command: \"{}\"",
                text(&c.name)
            ));
        }
        if c.params.len() > MAX_PARAMS {
            return Err(format!(
                "too many SSI command parameters: \"{}\"",
                text(&c.name)
            ));
        }
        let mut params: Vec<Option<Vec<u8>>> = vec![None; spec.params.len()];
        for (key, value) in c.params {
            let Some(i) = spec.params.iter().position(|(n, _)| *n == key.as_slice()) else {
                return Err(format!(
                    "invalid parameter name: \"{}\" in \"{}\" SSI command",
                    text(&key),
                    text(&c.name)
                ));
            };
            if params[i].is_some() {
                return Err(format!(
                    "duplicate \"{}\" parameter in \"{}\" SSI command",
                    text(&key),
                    text(&c.name)
                ));
            }
            params[i] = Some(value);
        }
        for ((name, mandatory), p) in spec.params.iter().zip(&params) {
            if *mandatory && p.is_none() {
                return Err(format!(
                    "mandatory \"{}\" parameter is absent in \"{}\" SSI command",
                    text(name),
                    text(&c.name)
                ));
            }
        }
        let mut params = params.into_iter();
        let mut next = || params.next().flatten();
        match spec.name {
            b"include" => {
                let (virt, file, wait, set, stub) = (next(), next(), next(), next(), next());
                self.include(
                    req,
                    shared,
                    Include {
                        virt,
                        file,
                        wait,
                        set,
                        stub,
                    },
                )
                .await
            }
            b"echo" => {
                let (var, default, encoding) = (next(), next(), next());
                self.echo(req, shared, var.unwrap_or_default(), default, encoding)
            }
            b"config" => {
                let (errmsg, timefmt) = (next(), next());
                if let Some(t) = timefmt {
                    self.timefmt = t;
                }
                if let Some(e) = errmsg {
                    self.errmsg = e;
                }
                Ok(())
            }
            b"set" => {
                let (var, value) = (next(), next());
                let value = self.evaluate(req, shared, &value.unwrap_or_default(), false)?;
                set_var(shared, &lowercase(&var.unwrap_or_default()), value);
                Ok(())
            }
            b"if" | b"elif" => {
                if spec.name == b"if" && self.conditional != 0 {
                    return Err("the \"if\" command inside the \"if\" command".to_owned());
                }
                if self.chosen {
                    self.output = false;
                    return Ok(());
                }
                let holds = self.condition(req, shared, &next().unwrap_or_default())?;
                self.output = holds;
                self.chosen = holds;
                self.conditional = IF;
                Ok(())
            }
            b"else" => {
                self.output = !self.chosen;
                self.conditional = ELSE;
                Ok(())
            }
            b"endif" => {
                self.output = true;
                self.chosen = false;
                self.conditional = 0;
                Ok(())
            }
            b"block" => {
                let name = next().unwrap_or_default();
                shared.0.borrow_mut().blocks.push((name, Vec::new()));
                self.output = false;
                self.block = true;
                Ok(())
            }
            _ => {
                // endblock
                self.output = true;
                self.block = false;
                Ok(())
            }
        }
    }

    /// `echo`: the variable's value, encoded; its `default` (as written) or `(none)` when
    /// there is no such variable.
    fn echo(
        &mut self,
        req: &Request<'_>,
        shared: &Shared,
        var: Vec<u8>,
        default: Option<Vec<u8>>,
        encoding: Option<Vec<u8>>,
    ) -> Result<(), Failed> {
        let value = match self.variable(req, shared, &lowercase(&var))? {
            Some(v) => v,
            None => default.unwrap_or_else(|| b"(none)".to_vec()),
        };
        if value.is_empty() {
            return Ok(());
        }
        match encoding.as_deref() {
            None => {}
            Some(b"none") => self.encoding = Encoding::None,
            Some(b"url") => self.encoding = Encoding::Url,
            Some(b"entity") => self.encoding = Encoding::Entity,
            Some(other) => req.log(
                Level::Error,
                &format!(
                    "unknown encoding \"{}\" in the \"echo\" command",
                    text(other)
                ),
            ),
        }
        match self.encoding {
            Encoding::None => self.out.extend_from_slice(&value),
            Encoding::Url => crate::vars::escape(&value, &mut self.out, crate::vars::Escape::Html),
            Encoding::Entity => escape_html(&value, &mut self.out),
        }
        Ok(())
    }

    /// `if` and `elif`: `$a` (not empty), `$a = text`, `$a != text`, `$a = /regex/`,
    /// `$a != /regex/`, as nginx reads the expression.
    fn condition(
        &mut self,
        req: &Request<'_>,
        shared: &Shared,
        expr: &[u8],
    ) -> Result<bool, Failed> {
        let invalid = || format!("invalid expression in \"{}\"", text(expr));
        let left_end = expr
            .iter()
            .position(|&b| !(b.is_ascii_alphanumeric() || b"${}_\"'".contains(&b)))
            .unwrap_or(expr.len());
        let left = lowercase(&expr[..left_end]);
        let mut p = left_end;
        while expr.get(p) == Some(&b' ') {
            p += 1;
        }
        let left = self.evaluate(req, shared, &left, false)?;
        if p == expr.len() {
            return Ok(!left.is_empty());
        }
        let negative = if expr[p] == b'=' {
            p += 1;
            false
        } else if expr[p..].starts_with(b"!=") {
            p += 2;
            true
        } else {
            return Err(invalid());
        };
        while expr.get(p) == Some(&b' ') {
            p += 1;
        }
        let last = expr.len();
        let matched = if p + 1 < last && expr[p] == b'/' {
            if expr[last - 1] != b'/' {
                return Err(invalid());
            }
            let pattern = self.evaluate(req, shared, &expr[p + 1..last - 1], false)?;
            regex_match(shared, &pattern, &left)?
        } else {
            if p + 1 < last && expr[p] == b'\\' && expr[p + 1] == b'/' {
                p += 1;
            }
            self.evaluate(req, shared, &expr[p..], false)? == left
        };
        Ok(matched != negative)
    }

    /// The value of a variable (the name lowercase): a capture of the last `if` regex, a
    /// `set` variable, `$date_local`/`$date_gmt` by this body's `timefmt`, then the
    /// server's variables; `None` when there is none of the name, or its value is missing;
    /// an error for a date its `timefmt` makes nothing of.
    fn variable(
        &self,
        req: &Request<'_>,
        shared: &Shared,
        name: &[u8],
    ) -> Result<Option<Vec<u8>>, Failed> {
        let state = shared.0.borrow();
        if let [d @ b'0'..=b'9'] = name {
            let n = usize::from(d - b'0');
            if let Some((subject, caps)) = state.captures.as_ref().filter(|(_, c)| n < c.count()) {
                return Ok(Some(caps.get(subject, n).to_vec()));
            }
        }
        if let Some((_, v)) = state.vars.iter().find(|(n, _)| n == name) {
            return Ok(Some(v.clone()));
        }
        drop(state);
        if let Some(gmt) = match name {
            b"date_local" => Some(false),
            b"date_gmt" => Some(true),
            _ => None,
        } {
            let date = super::date(&self.timefmt, gmt);
            return date.map(Some).ok_or_else(|| {
                format!("the \"timefmt\" \"{}\" makes no date", text(&self.timefmt))
            });
        }
        let var = std::str::from_utf8(name)
            .ok()
            .and_then(|n| crate::vars::Var::from_name(n, &req.server().names));
        let Some(var) = var else {
            return Ok(None);
        };
        let mut out = Vec::new();
        req.var(&var, &mut out, None);
        Ok((!out.is_empty() || req.has_var(&var)).then_some(out))
    }

    /// nginx's `ngx_http_ssi_evaluate_string`: `$name` and `${name}` replaced by their
    /// values, a backslash before `\`, `'`, `"` or `$` dropped; with `prefix`, a value not
    /// starting with `/` is taken relative to the request's URI.
    fn evaluate(
        &self,
        req: &Request<'_>,
        shared: &Shared,
        text_in: &[u8],
        prefix: bool,
    ) -> Result<Vec<u8>, Failed> {
        let mut parts: Vec<Vec<u8>> = Vec::new();
        let mut i = 0;
        let has_vars = text_in.contains(&b'$');
        while i < text_in.len() {
            if has_vars && text_in[i] == b'$' {
                let invalid = || format!("invalid variable name in \"{}\"", text(text_in));
                i += 1;
                if i == text_in.len() {
                    return Err(invalid());
                }
                let bracket = text_in[i] == b'{';
                if bracket {
                    i += 1;
                    if i == text_in.len() {
                        return Err(invalid());
                    }
                }
                let start = i;
                while i < text_in.len()
                    && (text_in[i].is_ascii_alphanumeric() || text_in[i] == b'_')
                {
                    i += 1;
                }
                let name = &text_in[start..i];
                if bracket {
                    if text_in.get(i) != Some(&b'}') {
                        return Err(format!(
                            "the closing bracket in \"{}\" variable is missing",
                            text(&text_in[start..i])
                        ));
                    }
                    i += 1;
                }
                if name.is_empty() {
                    return Err(invalid());
                }
                if let Some(v) = self.variable(req, shared, &lowercase(name))? {
                    parts.push(v);
                }
                continue;
            }
            let mut part = Vec::new();
            let mut quoted = false;
            while i < text_in.len() {
                let ch = text_in[i];
                if !quoted {
                    if ch == b'\\' {
                        quoted = true;
                        i += 1;
                        continue;
                    }
                    if has_vars && ch == b'$' {
                        break;
                    }
                } else {
                    quoted = false;
                    if !b"\\'\"$".contains(&ch) {
                        part.push(b'\\');
                    }
                }
                part.push(ch);
                i += 1;
            }
            parts.push(part);
        }
        let mut out = Vec::new();
        if prefix {
            let first = parts.iter().find(|p| !p.is_empty());
            let relative = match first {
                Some(p) => p[0] != b'/',
                None => !has_vars && text_in.first() != Some(&b'/'),
            };
            if relative {
                // The URI is decoded: escaped again, as it goes into a request line.
                let uri = req.uri();
                if let Some(slash) = uri.iter().rposition(|&b| b == b'/') {
                    crate::vars::escape(&uri[..=slash], &mut out, crate::vars::Escape::Uri);
                }
            }
        }
        for p in parts {
            out.extend_from_slice(&p);
        }
        Ok(out)
    }

    async fn include(
        &mut self,
        req: &Request<'_>,
        shared: &Shared,
        inc: Include,
    ) -> Result<(), Failed> {
        if let (Some(v), Some(f)) = (&inc.virt, &inc.file) {
            return Err(format!(
                "inclusion may be either virtual=\"{}\" or file=\"{}\"",
                text(v),
                text(f)
            ));
        }
        let Some(uri) = inc.virt.as_ref().or(inc.file.as_ref()) else {
            return Err("no parameter in \"include\" SSI command".to_owned());
        };
        if inc.set.is_some() && inc.stub.is_some() {
            return Err(
                "\"set\" and \"stub\" cannot be used together in \"include\" SSI command"
                    .to_owned(),
            );
        }
        if let Some(wait) = &inc.wait {
            if inc.virt.is_none() {
                let file = inc.file.as_deref().unwrap_or_default();
                return Err(format!(
                    "\"wait\" cannot be used with file=\"{}\"",
                    text(file)
                ));
            }
            if !wait.eq_ignore_ascii_case(b"no") && !wait.eq_ignore_ascii_case(b"yes") {
                return Err(format!(
                    "invalid value \"{}\" in the \"wait\" parameter",
                    text(wait)
                ));
            }
        }
        let uri = self.evaluate(req, shared, uri, true)?;
        // Values of variables are decoded too: what a request line cannot carry is escaped
        // (a `%XX` written in the value stays, decoded by the subrequest as nginx decodes it).
        let uri: Vec<u8> = uri
            .iter()
            .flat_map(|&b| match b {
                b'\0'..=b' ' | 0x7f.. => format!("%{b:02X}").into_bytes(),
                _ => vec![b],
            })
            .collect();
        if unsafe_uri(&uri) {
            return Err(format!("unsafe URI \"{}\" was detected", text(&uri)));
        }
        let stub = match &inc.stub {
            None => None,
            Some(name) => {
                let state = shared.0.borrow();
                match state.blocks.iter().find(|(n, _)| n == name) {
                    Some((_, held)) => Some(held.clone()),
                    None => {
                        return Err(format!(
                            "\"stub\"=\"{}\" for \"include\" not found",
                            text(name)
                        ))
                    }
                }
            }
        };
        if req.depth() >= MAX_DEPTH {
            let path = uri.split(|&b| b == b'?').next().unwrap_or_default();
            return Err(format!(
                "subrequests cycle while processing \"{}\"",
                text(path)
            ));
        }
        let left = MAX_INCLUDED.saturating_sub(shared.0.borrow().included);
        // On the heap: includes nest, each with a request of its own.
        let (sub, answer) = Box::pin(subrequest::run(req, &uri, Keep::Body(left))).await?;
        let body = match answer.body {
            Ok(b) => b,
            Err(why) => {
                abort(
                    req,
                    shared,
                    &format!("the include of \"{}\" failed: {why}", text(&uri)),
                );
                return Ok(());
            }
        };
        shared.0.borrow_mut().included += body.len();
        if let Some(name) = inc.set {
            // Kept in memory up to `subrequest_output_buffer_size`, as nginx keeps it.
            let max = sub.loc().subrequest_output_buffer_size;
            if body.len() > max && answer.status < 300 {
                abort(
                    req,
                    shared,
                    &format!("too big subrequest response: {}", body.len()),
                );
                return Ok(());
            }
            let value = if answer.status < 300 {
                body.to_vec()
            } else {
                Vec::new()
            };
            set_var(shared, &lowercase(&name), value);
            return Ok(());
        }
        // A block stands in for a response with no body, or an error of the server's own:
        // then as a response of the included request with this one's type, whose commands
        // its location's SSI runs (not for an empty response, which nginx's SSI passes by).
        let out = match stub {
            Some(held) if answer.status >= 300 && !answer.proxied => {
                let mut resp = crate::request::Response::new(answer.status);
                resp.content_type = self.content_type.clone();
                resp.body = crate::request::Body::Bytes(held.into());
                Box::pin(sub.body_filters(&mut resp)).await;
                match resp.body {
                    crate::request::Body::Bytes(b) => b,
                    _ => bytes::Bytes::new(),
                }
            }
            Some(held) if body.is_empty() => held.into(),
            _ => body,
        };
        self.out.extend_from_slice(&out);
        Ok(())
    }
}

/// The parameters of an `include`.
struct Include {
    virt: Option<Vec<u8>>,
    file: Option<Vec<u8>>,
    wait: Option<Vec<u8>>,
    set: Option<Vec<u8>>,
    stub: Option<Vec<u8>>,
}

/// The whole response fails, as nginx fails it (the error logged once, where it happened).
fn abort(req: &Request<'_>, shared: &Shared, why: &str) {
    req.log(Level::Error, why);
    shared.0.borrow_mut().aborted = true;
}

fn lowercase(b: &[u8]) -> Vec<u8> {
    b.to_ascii_lowercase()
}

fn set_var(shared: &Shared, name: &[u8], value: Vec<u8>) {
    let mut state = shared.0.borrow_mut();
    match state.vars.iter_mut().find(|(n, _)| n == name) {
        Some((_, v)) => *v = value,
        None => state.vars.push((name.to_vec(), value)),
    }
}

/// A command inside a block, written again as nginx keeps it there.
fn rewritten(c: &Command) -> Vec<u8> {
    let mut out = b"<!--#".to_vec();
    out.extend_from_slice(&c.name);
    for (k, v) in &c.params {
        out.push(b' ');
        out.extend_from_slice(k);
        out.extend_from_slice(b"=\"");
        out.extend_from_slice(v);
        out.push(b'"');
    }
    out.extend_from_slice(b" -->");
    out
}

/// Whether `subject` matches the regex `pattern` (PCRE's look-around and backreferences
/// too): its groups become `$0` to `$9`, and its named groups `set` variables.
fn regex_match(shared: &Shared, pattern: &[u8], subject: &[u8]) -> Result<bool, Failed> {
    let pattern =
        std::str::from_utf8(pattern).map_err(|_| format!("invalid regex \"{}\"", text(pattern)))?;
    let re = LocationRegex::new(pattern, false)?;
    let caps = re.captures(subject).map_err(|_| {
        format!(
            "pcre2_match() failed on \"{}\" using \"{pattern}\"",
            text(subject)
        )
    })?;
    let Some(caps) = caps else {
        return Ok(false);
    };
    for (i, name) in re.capture_names().enumerate() {
        if let Some(name) = name {
            set_var(
                shared,
                &lowercase(name.as_bytes()),
                caps.get(subject, i).to_vec(),
            );
        }
    }
    shared.0.borrow_mut().captures = Some((subject.to_vec(), caps));
    Ok(true)
}

/// nginx's `ngx_escape_html`: `<`, `>`, `&` and `"` as entities.
fn escape_html(value: &[u8], out: &mut Vec<u8>) {
    for &b in value {
        match b {
            b'<' => out.extend_from_slice(b"&lt;"),
            b'>' => out.extend_from_slice(b"&gt;"),
            b'&' => out.extend_from_slice(b"&amp;"),
            b'"' => out.extend_from_slice(b"&quot;"),
            _ => out.push(b),
        }
    }
}

/// nginx's `ngx_http_parse_unsafe_uri` on an include's URI: empty, or a `..` segment or a
/// NUL in its path (up to a `?`). A `..` written as `%2E%2E` is not looked for: the
/// subrequest's path is normalized as a client's, so it cannot leave the root either.
fn unsafe_uri(uri: &[u8]) -> bool {
    let path = uri.split(|&b| b == b'?').next().unwrap_or_default();
    path.is_empty() || path.contains(&0) || path.split(|&b| b == b'/').any(|seg| seg == b"..")
}
