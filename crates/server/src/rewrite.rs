//! nginx's rewrite module: `rewrite`, `set`, `if`, `return` and `break`, compiled once per
//! level (server, location) into one [`Program`] that keeps the order they were written in, and
//! run per request in the rewrite phase.
//!
//! nginx compiles a level's rewrite directives into one code array; an `if` is a jump over the
//! codes of its block. Here an `if` holds its block's program, which runs in the same pass: a
//! `break`, `return` or a `rewrite ... last` inside it stops the whole level, as in nginx. An
//! `if` at location level also carries the location configuration its block defines (nginx
//! makes a nameless nested location of it); when the condition holds, the request switches to
//! that configuration, so `root`, `add_header` or `proxy_pass` inside the block apply.
//!
//! As a module: it declares the `set` targets and the named groups of its regexes as
//! variables, compiles each level's program when the level ends ([`Module::finish`]), and
//! runs it as the rewrite phases' handler, for the server before the location search and for
//! the location after it.

use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;

use portcullis_config::{ConfigError, Directive};
use regex::bytes::Regex;

use bytes::Bytes;

use crate::conf::LocConf;
use crate::location::Captures;
use crate::module::{self, Finish, Load, Module, NestedConf, Slot};
use crate::request::{Body, Handlers, Request, Response, Rewritten, Step};
use crate::vars::{compile_set, variable_name, Names, SetVar, Template, Var};
use crate::Level;

/// The module.
pub(crate) struct RewriteModule;

pub(crate) static MODULE: RewriteModule = RewriteModule;

impl Module for RewriteModule {
    fn name(&self) -> &'static str {
        "http_rewrite_module"
    }

    /// Its directives but `uninitialized_variable_warn`, which the core's variables read.
    fn owns(&self, directive: &str) -> bool {
        directive != "uninitialized_variable_warn" && module::in_table(self.name(), directive)
    }

    fn declare(
        &self,
        http: &[Directive],
        names: &mut Names,
        _me: usize,
    ) -> Result<(), ConfigError> {
        collect_variables(http, names);
        Ok(())
    }

    fn defaults(&self) -> Slot {
        Arc::new(RewriteConf::default())
    }

    fn directive(
        &self,
        conf: &mut Slot,
        d: &Directive,
        _cx: &mut Load<'_>,
    ) -> Result<(), ConfigError> {
        // The others make up the program, compiled when the level ends.
        if d.name == "rewrite_log" {
            module::edit::<RewriteConf>(conf).log = portcullis_config::value::flag(d, 0)?;
        }
        Ok(())
    }

    fn finish(
        &self,
        conf: &mut Slot,
        block: &[Directive],
        cx: &mut Finish<'_>,
    ) -> Result<(), ConfigError> {
        let nested = cx.nested.as_deref_mut();
        let program = compile(block, nested, cx.names)?;
        module::edit::<RewriteConf>(conf).program = Arc::new(program);
        Ok(())
    }

    fn is_active(&self, conf: &Slot) -> bool {
        !module::get::<RewriteConf>(conf).program.ops.is_empty()
    }

    fn handlers(&self) -> &'static (dyn std::any::Any + Send + Sync) {
        static HANDLERS: Handlers = Handlers {
            rewrite: Some(rewrite_phase),
            ..Handlers::NONE
        };
        &HANDLERS
    }
}

/// The rewrite module's settings of a level.
#[derive(Clone, Default)]
pub(crate) struct RewriteConf {
    /// This level's own program; not inherited by nested locations.
    pub program: Arc<Program>,
    /// `rewrite_log`: regex matches and rewritten URIs at notice level.
    pub log: bool,
}

/// The rewrite phase of a level: its program, and what the request does next.
fn rewrite_phase(req: &mut Request<'_>, conf: &Slot) -> Rewritten {
    let conf = module::get::<RewriteConf>(conf);
    match req.run_rewrite(&conf.program, conf.log) {
        Outcome::Next => Rewritten::Next,
        Outcome::Reroute => Rewritten::Reroute,
        Outcome::Return(ret) => Rewritten::Stop(do_return(req, ret)),
        Outcome::Redirect { code, location } => {
            Rewritten::Stop(req.redirect_response(code, &location))
        }
        Outcome::Status(code) => Rewritten::Stop(Step::Status(code)),
    }
}

#[derive(Clone)]
pub(crate) enum Return {
    /// `return code [text]`, also the 444 close.
    Text { code: u16, text: Option<Template> },
    /// `return 301|302|303|307|308 URL` or `return URL`.
    Redirect { code: u16, url: Template },
}

pub(crate) fn compile_return(d: &Directive, names: &Names) -> Result<Return, ConfigError> {
    let first = d.arg(0);
    match first.parse::<u16>() {
        Ok(code) if d.args.len() == 1 || !matches!(code, 301 | 302 | 303 | 307 | 308) => {
            if code > 999 {
                return Err(ConfigError::at(
                    d,
                    format!("invalid return code \"{first}\""),
                ));
            }
            let text = d
                .args
                .get(1)
                .map(|a| Template::compile(&a.value, d, names))
                .transpose()?;
            Ok(Return::Text { code, text })
        }
        Ok(code) => Ok(Return::Redirect {
            code,
            url: Template::compile(d.arg(1), d, names)?,
        }),
        Err(_)
            if d.args.len() == 1
                && (first.starts_with("http://")
                    || first.starts_with("https://")
                    || first.starts_with('$')) =>
        {
            Ok(Return::Redirect {
                code: 302,
                url: Template::compile(first, d, names)?,
            })
        }
        Err(_) => Err(ConfigError::at(
            d,
            format!("invalid return code \"{first}\""),
        )),
    }
}

/// `return`: the response it makes, or the error status nginx answers with its page.
fn do_return(req: &mut Request<'_>, ret: &Return) -> Step {
    match ret {
        Return::Text { code, text: None } => {
            if *code == 204 {
                // nginx sends it as a response of its own, not an error page: it keeps
                // an error_page's status when it answers one.
                // The type and length go with the 204 (nginx's header filter drops them),
                // and show when an error_page gives it another status.
                let mut r = Response::new(204);
                r.content_type = Some(req.content_type());
                r.content_length = Some(0);
                Step::Done(r)
            } else if *code >= 400 || ((300..400).contains(code) && *code != 304) {
                Step::Status(*code)
            } else {
                let mut r = Response::new(*code);
                r.content_type = Some(req.content_type());
                r.content_length = Some(0);
                Step::Done(r)
            }
        }
        Return::Text {
            code,
            text: Some(t),
        } => {
            req.set_status(*code);
            let body = Bytes::from(req.eval(t));
            if (301..=308).contains(code) && *code != 304 && *code != 305 && *code != 306 {
                return req.redirect_response(*code, &body);
            }
            let mut r = Response::new(*code);
            r.content_type = Some(req.content_type());
            r.content_length = Some(body.len() as u64);
            r.body = Body::Bytes(body);
            Step::Done(r)
        }
        Return::Redirect { code, url } => {
            let url = req.eval(url);
            req.redirect_response(*code, &url)
        }
    }
}

/// The rewrite directives of one level (or one `if` block), in the order written.
#[derive(Default)]
pub(crate) struct Program {
    ops: Vec<Op>,
}

enum Op {
    Rewrite(Box<Rewrite>),
    Set(SetVar),
    /// `set $limit_rate`: the response's rate.
    SetLimitRate(Template),
    /// `set $args`: the request's arguments.
    SetArgs(Template),
    If(Box<If>),
    Return(Return),
    Break,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flag {
    /// No flag: go on with the level's next directive, then search the location again.
    None,
    Last,
    Break,
}

/// A regex of the rewrite module: its named groups set variables when it matches.
struct ScriptRegex {
    regex: Regex,
    /// The regex as written, for rewrite_log.
    source: String,
    /// Each named group's index and the slot of the variable it sets.
    named: Box<[(usize, usize)]>,
}

struct Rewrite {
    regex: ScriptRegex,
    replacement: Replacement,
    /// `redirect`, `permanent`, or a replacement that is an absolute URL: the status.
    redirect: Option<u16>,
    flag: Flag,
}

/// A rewrite's replacement, split at its first literal `?` as nginx's script compiler does.
#[derive(Debug)]
struct Replacement {
    path: Template,
    args: Option<Template>,
    /// The request's arguments are appended, unless the replacement ends with `?`.
    add_args: bool,
}

struct If {
    cond: Cond,
    body: Program,
    /// The block's configuration, for an `if` in a location.
    conf: Option<Arc<LocConf>>,
}

enum Cond {
    /// `($var)`: true unless empty or "0".
    Truth(Template),
    Equal {
        value: Template,
        other: Template,
        negate: bool,
    },
    Regex {
        value: Template,
        regex: ScriptRegex,
        negate: bool,
    },
    File {
        path: Template,
        test: FileTest,
        negate: bool,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FileTest {
    Plain,
    Dir,
    Exists,
    Exec,
}

/// Compiles the rewrite directives among `directives` into a program. `if_conf` builds the
/// configuration of an `if` block at location level; at server level it is `None`.
fn compile(
    directives: &[Directive],
    mut if_conf: Option<&mut NestedConf<'_>>,
    names: &Names,
) -> Result<Program, ConfigError> {
    let mut ops = Vec::new();
    for d in directives {
        let op = match d.name.as_str() {
            "rewrite" => Op::Rewrite(Box::new(compile_rewrite(d, names)?)),
            "set" if d.arg(0).eq_ignore_ascii_case("$limit_rate") => {
                Op::SetLimitRate(Template::compile(d.arg(1), d, names)?)
            }
            "set" if d.arg(0).eq_ignore_ascii_case("$args") => {
                Op::SetArgs(Template::compile(d.arg(1), d, names)?)
            }
            "set" => Op::Set(compile_set(d, names)?),
            "return" => Op::Return(compile_return(d, names)?),
            "break" => Op::Break,
            "if" => {
                let conf = match if_conf.as_mut() {
                    Some(f) => {
                        let conf = f(d)?.downcast::<LocConf>();
                        Some(conf.map_err(|_| {
                            ConfigError::at(d, "an \"if\" block without its settings")
                        })?)
                    }
                    None => None,
                };
                Op::If(Box::new(If {
                    cond: compile_condition(d, names)?,
                    body: compile(d.children(), None, names)?,
                    conf,
                }))
            }
            _ => continue,
        };
        ops.push(op);
    }
    Ok(Program { ops })
}

/// A regex of the rewrite module, with nginx's error text.
fn compile_regex(
    d: &Directive,
    source: &str,
    caseless: bool,
    names: &Names,
) -> Result<ScriptRegex, ConfigError> {
    let regex = crate::location::bytes_regex(source, caseless)
        .map_err(|e| ConfigError::at(d, crate::location::regex_error(source, &e)))?;
    // Every named group was declared before compiling, by `collect_named_groups`.
    let named = regex
        .capture_names()
        .enumerate()
        .filter_map(|(i, n)| Some((i, names.set_slot(n?)?)))
        .collect();
    Ok(ScriptRegex {
        regex,
        source: source.to_string(),
        named,
    })
}

fn compile_rewrite(d: &Directive, names: &Names) -> Result<Rewrite, ConfigError> {
    let regex = compile_regex(d, d.arg(0), false, names)?;
    let mut text = d.arg(1);
    let mut redirect = if text.starts_with("http://")
        || text.starts_with("https://")
        || text.starts_with("$scheme")
    {
        Some(302)
    } else {
        None
    };
    let flag = match d.args.get(2).map(|a| a.value.as_str()) {
        None => {
            if redirect.is_some() {
                Flag::Last
            } else {
                Flag::None
            }
        }
        Some("last") => Flag::Last,
        Some("break") => Flag::Break,
        Some("redirect") => {
            redirect = Some(302);
            Flag::Last
        }
        Some("permanent") => {
            redirect = Some(301);
            Flag::Last
        }
        Some(other) => return Err(ConfigError::at(d, format!("invalid parameter \"{other}\""))),
    };
    // A final "?" drops the request's arguments and is not part of the replacement.
    let add_args = match text.strip_suffix('?') {
        Some(rest) => {
            text = rest;
            false
        }
        None => true,
    };
    let replacement = match text.split_once('?') {
        Some((path, args)) => Replacement {
            path: Template::compile(path, d, names)?,
            args: Some(Template::compile(args, d, names)?),
            add_args,
        },
        None => Replacement {
            path: Template::compile(text, d, names)?,
            args: None,
            add_args,
        },
    };
    Ok(Rewrite {
        regex,
        replacement,
        redirect,
        flag,
    })
}

/// `if (...)`: the loader has checked the parentheses; this reads the condition's parts.
fn compile_condition(d: &Directive, names: &Names) -> Result<Cond, ConfigError> {
    let mut args: Vec<(&str, bool)> = d
        .args
        .iter()
        .map(|a| (a.value.as_str(), a.quoted))
        .collect();
    if let Some((first, _)) = args.first_mut().filter(|(_, q)| !q) {
        *first = first.strip_prefix('(').unwrap_or(first);
    }
    if let Some((last, _)) = args.last_mut().filter(|(_, q)| !q) {
        *last = last.strip_suffix(')').unwrap_or(last);
    }
    // What is left of a lone `(` or `)` goes; an empty quoted string (`$x = ""`) stays.
    args.retain(|(a, quoted)| *quoted || !a.is_empty());
    let args: Vec<&str> = args.into_iter().map(|(a, _)| a).collect();
    let invalid = |s: &str| ConfigError::at(d, format!("invalid condition \"{s}\""));
    let variable = |s: &str| {
        if s.len() > 1 && s.starts_with('$') {
            Template::compile(s, d, names)
        } else {
            Err(invalid(s))
        }
    };
    match args.as_slice() {
        [v] => Ok(Cond::Truth(variable(v)?)),
        [op, path] if op.trim_start_matches('!').starts_with('-') => {
            let negate = op.starts_with('!');
            let test = match op.trim_start_matches('!') {
                "-f" => FileTest::Plain,
                "-d" => FileTest::Dir,
                "-e" => FileTest::Exists,
                "-x" => FileTest::Exec,
                _ => return Err(invalid(op)),
            };
            Ok(Cond::File {
                path: Template::compile(path, d, names)?,
                test,
                negate,
            })
        }
        [v, op, other] => {
            let value = variable(v)?;
            match *op {
                "=" | "!=" => Ok(Cond::Equal {
                    value,
                    other: Template::compile(other, d, names)?,
                    negate: *op == "!=",
                }),
                "~" | "~*" | "!~" | "!~*" => Ok(Cond::Regex {
                    value,
                    regex: compile_regex(d, other, op.ends_with('*'), names)?,
                    negate: op.starts_with('!'),
                }),
                _ => Err(ConfigError::at(
                    d,
                    format!("unexpected \"{op}\" in condition"),
                )),
            }
        }
        [first, ..] => Err(invalid(first)),
        [] => Err(invalid("")),
    }
}

/// The variables of the rewrite module among `directives` and their blocks: `set` targets,
/// and the named groups of its regexes (quiet while unset).
fn collect_variables(directives: &[Directive], names: &mut Names) {
    for d in directives {
        match d.name.as_str() {
            "set" => {
                // `$limit_rate` and `$args` are the request's own, not variables of the
                // configuration.
                if let Some(name) =
                    d.args
                        .first()
                        .and_then(|a| variable_name(&a.value))
                        .filter(|n| {
                            !["limit_rate", "args"]
                                .iter()
                                .any(|r| n.eq_ignore_ascii_case(r))
                        })
                {
                    names.set.push(name.to_string());
                }
            }
            "rewrite" => names.add_named_groups(d.arg(0)),
            "if" => {
                for a in &d.args {
                    names.add_named_groups(a.value.trim_end_matches(')'));
                }
            }
            _ => {}
        }
        collect_variables(d.children(), names);
    }
}

/// How a level's program ended.
enum Outcome<'p> {
    /// On to the next phase, in the current location.
    Next,
    /// The URI changed: search the location again.
    Reroute,
    Return(&'p Return),
    Redirect {
        code: u16,
        location: Vec<u8>,
    },
    Status(u16),
}

enum Flow<'p> {
    Continue,
    Stop(Outcome<'p>),
}

impl Request<'_> {
    /// Runs a level's program: nginx's rewrite phase for that level. `log` is its
    /// `rewrite_log`.
    fn run_rewrite<'p>(&mut self, program: &'p Program, log: bool) -> Outcome<'p> {
        let mut uri_changed = false;
        match self.run_ops(&program.ops, log, &mut uri_changed) {
            Flow::Stop(outcome) => outcome,
            Flow::Continue if uri_changed => Outcome::Reroute,
            Flow::Continue => Outcome::Next,
        }
    }

    fn run_ops<'p>(&mut self, ops: &'p [Op], log: bool, uri_changed: &mut bool) -> Flow<'p> {
        for op in ops {
            match op {
                Op::Set(set) => {
                    let value = self.eval(&set.value);
                    self.set_var(set.slot, value);
                }
                Op::SetLimitRate(value) => {
                    let value = self.eval(value);
                    self.set_limit_rate(&value);
                }
                Op::SetArgs(value) => {
                    let value = self.eval(value);
                    self.set_args_variable(value);
                }
                Op::Return(ret) => return Flow::Stop(Outcome::Return(ret)),
                Op::Break => return Flow::Stop(Outcome::Next),
                Op::If(i) => {
                    if self.condition(&i.cond, log) {
                        if let Some(conf) = &i.conf {
                            self.enter_if(conf);
                        }
                        if let Flow::Stop(o) = self.run_ops(&i.body.ops, log, uri_changed) {
                            return Flow::Stop(o);
                        }
                    }
                }
                Op::Rewrite(rw) => {
                    if let Some(outcome) = self.rewrite(rw, log, uri_changed) {
                        return Flow::Stop(outcome);
                    }
                }
            }
        }
        Flow::Continue
    }

    /// Matches `regex` against `subject` as nginx's script regex code does: a match replaces
    /// the captures (with none, for a regex without groups); a failed match clears them.
    fn regex_match(&mut self, script: &ScriptRegex, subject: Vec<u8>, log: bool) -> bool {
        let (regex, source) = (&script.regex, &script.source);
        let caps = regex.captures(&subject);
        if log {
            let verb = if caps.is_some() {
                "matches"
            } else {
                "does not match"
            };
            self.log(
                Level::Notice,
                &format!(
                    "\"{source}\" {verb} \"{}\"",
                    String::from_utf8_lossy(&subject)
                ),
            );
        }
        let Some(caps) = caps else {
            self.set_captures(None);
            return false;
        };
        if regex.captures_len() > 1 {
            let named: Vec<(usize, Vec<u8>)> = script
                .named
                .iter()
                .map(|&(group, slot)| {
                    let value = caps.get(group).map_or(&[][..], |m| m.as_bytes());
                    (slot, value.to_vec())
                })
                .collect();
            let captures = Captures::from_match(&caps);
            drop(caps);
            for (slot, value) in named {
                self.set_var(slot, value);
            }
            self.set_captures(Some((captures, subject)));
        } else {
            // As in nginx, a match of a regex without groups leaves no `$1` of an earlier one.
            self.set_captures(None);
        }
        true
    }

    fn condition(&mut self, cond: &Cond, log: bool) -> bool {
        match cond {
            Cond::Truth(t) => {
                let v = self.eval(t);
                !v.is_empty() && v != b"0"
            }
            Cond::Equal {
                value,
                other,
                negate,
            } => (self.eval(value) == self.eval(other)) != *negate,
            Cond::Regex {
                value,
                regex,
                negate,
            } => {
                let subject = self.eval(value);
                self.regex_match(regex, subject, log) != *negate
            }
            Cond::File { path, test, negate } => {
                let path = self.eval(path);
                file_test(
                    std::path::Path::new(std::ffi::OsStr::from_bytes(&path)),
                    *test,
                ) != *negate
            }
        }
    }

    /// One `rewrite`: `None` when the level goes on with its next directive.
    fn rewrite<'p>(
        &mut self,
        rw: &Rewrite,
        log: bool,
        uri_changed: &mut bool,
    ) -> Option<Outcome<'p>> {
        let subject = self.uri().to_vec();
        if !self.regex_match(&rw.regex, subject, log) {
            return None;
        }
        // nginx escapes captures for the arguments (and all of a redirect) only when the
        // request's own URI was escaped or had a "+": their decoded form would change meaning.
        let raw = self.head().path();
        let quoted = raw.contains(&b'%') || raw.contains(&b'+');
        let redirect = rw.redirect.is_some();
        let rep = &rw.replacement;
        let path = self.expand(&rep.path, redirect && quoted);
        let args = rep.args.as_ref().map(|t| self.expand(t, quoted));
        let old_args = self.take_args().filter(|a| !a.is_empty());
        if let Some(code) = rw.redirect {
            let mut location = path;
            if let Some(a) = args {
                location.push(b'?');
                location.extend_from_slice(&a);
            }
            let mut location = unescape_redirect(&location);
            if let Some(old) = old_args.filter(|_| rep.add_args) {
                location.push(if rep.args.is_some() { b'&' } else { b'?' });
                location.extend_from_slice(&old);
            }
            if log {
                self.log(
                    Level::Notice,
                    &format!(
                        "rewritten redirect: \"{}\"",
                        String::from_utf8_lossy(&location)
                    ),
                );
            }
            return Some(Outcome::Redirect { code, location });
        }
        self.set_args(new_args(args, old_args, rep.add_args));
        if log {
            self.log(
                Level::Notice,
                &format!(
                    "rewritten data: \"{}\", args: \"{}\"",
                    String::from_utf8_lossy(&path),
                    String::from_utf8_lossy(self.args().unwrap_or(b""))
                ),
            );
        }
        if path.is_empty() {
            self.log(Level::Error, "the rewritten URI has a zero length");
            return Some(Outcome::Status(500));
        }
        self.rewrite_uri(path);
        match rw.flag {
            Flag::None => {
                *uri_changed = true;
                None
            }
            Flag::Last => Some(Outcome::Reroute),
            Flag::Break => {
                *uri_changed = false;
                Some(Outcome::Next)
            }
        }
    }

    /// A replacement part; `escape` escapes the captures as nginx's NGX_ESCAPE_ARGS does.
    fn expand(&self, t: &Template, escape: bool) -> Vec<u8> {
        let mut out = Vec::new();
        t.eval_into(&mut out, &mut |v, out| match v {
            Var::Capture(n) if escape => {
                crate::vars::escape(self.capture(*n), out, crate::vars::Escape::Args);
            }
            _ => self.var(v, out, None),
        });
        out
    }
}

/// The arguments after an internal rewrite: the replacement's own, then `&` and the request's
/// unless the replacement ended with `?`; without its own, the request's or none.
fn new_args(own: Option<Vec<u8>>, old: Option<Vec<u8>>, add_args: bool) -> Option<Vec<u8>> {
    let args = match (own, old.filter(|_| add_args)) {
        (Some(mut own), Some(old)) => {
            own.push(b'&');
            own.extend_from_slice(&old);
            own
        }
        (Some(own), None) => own,
        (None, old) => old?,
    };
    (!args.is_empty()).then_some(args)
}

/// nginx's NGX_UNESCAPE_REDIRECT over a rewritten redirect: before the first `?`, `%XX` is
/// decoded when it stands for a printable byte above `%`; everything else stays as written.
fn unescape_redirect(s: &[u8]) -> Vec<u8> {
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        match s[i] {
            b'?' => {
                out.extend_from_slice(&s[i..]);
                return out;
            }
            b'%' => {
                if let (Some(h), Some(l)) = (
                    s.get(i + 1).copied().and_then(hex),
                    s.get(i + 2).copied().and_then(hex),
                ) {
                    let c = h << 4 | l;
                    if c > b'%' && c < 0x7f {
                        out.push(c);
                    } else {
                        out.extend_from_slice(&s[i..i + 3]);
                    }
                    i += 3;
                    continue;
                }
                out.push(b'%');
            }
            b => out.push(b),
        }
        i += 1;
    }
    out
}

fn file_test(path: &std::path::Path, test: FileTest) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let Ok(m) = std::fs::metadata(path) else {
        return false;
    };
    match test {
        FileTest::Plain => m.is_file(),
        FileTest::Dir => m.is_dir(),
        FileTest::Exists => true,
        FileTest::Exec => m.permissions().mode() & 0o100 != 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::location::named_groups;
    use std::path::Path;

    fn directive(name: &str, args: &[&str]) -> Directive {
        Directive {
            name: name.into(),
            args: args
                .iter()
                .map(|a| portcullis_config::Arg {
                    value: (*a).into(),
                    quoted: false,
                })
                .collect(),
            span: portcullis_config::Span {
                file: Arc::from(Path::new("/x.conf")),
                line: 3,
            },
            block: None,
        }
    }

    fn literal(t: &Template) -> &str {
        t.as_literal().unwrap_or("<vars>")
    }

    #[test]
    fn replacement_splits_at_the_first_question_mark() {
        let rw =
            compile_rewrite(&directive("rewrite", &["^", "/a?b=1?c"]), &Names::default()).unwrap();
        assert_eq!(literal(&rw.replacement.path), "/a");
        assert_eq!(rw.replacement.args.as_ref().map(literal), Some("b=1?c"));
        assert!(rw.replacement.add_args);
        let rw = compile_rewrite(&directive("rewrite", &["^", "/a?"]), &Names::default()).unwrap();
        assert!(rw.replacement.args.is_none());
        assert!(!rw.replacement.add_args);
        let rw =
            compile_rewrite(&directive("rewrite", &["^", "/a?x=1?"]), &Names::default()).unwrap();
        assert_eq!(rw.replacement.args.as_ref().map(literal), Some("x=1"));
        assert!(!rw.replacement.add_args);
    }

    #[test]
    fn flags_and_absolute_replacements() {
        let c = |args: &[&str]| {
            compile_rewrite(&directive("rewrite", args), &Names::default()).unwrap()
        };
        let rw = c(&["^", "/a"]);
        assert_eq!((rw.redirect, rw.flag), (None, Flag::None));
        let rw = c(&["^", "/a", "break"]);
        assert_eq!((rw.redirect, rw.flag), (None, Flag::Break));
        let rw = c(&["^", "/a", "permanent"]);
        assert_eq!((rw.redirect, rw.flag), (Some(301), Flag::Last));
        let rw = c(&["^", "http://x/", "last"]);
        assert_eq!((rw.redirect, rw.flag), (Some(302), Flag::Last));
        let rw = c(&["^", "$scheme://x/"]);
        assert_eq!(rw.redirect, Some(302));
        let e = compile_rewrite(
            &directive("rewrite", &["^", "/a", "lats"]),
            &Names::default(),
        )
        .err();
        assert_eq!(
            e.map(|e| e.to_string()).as_deref(),
            Some("invalid parameter \"lats\" in /x.conf:3")
        );
    }

    #[test]
    fn bad_regex_is_a_config_error_with_place() {
        let e = compile_rewrite(&directive("rewrite", &["(", "/a"]), &Names::default())
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.starts_with("pcre2_compile() failed: "), "{e}");
        assert!(e.ends_with(" in \"(\" in /x.conf:3"), "{e}");
        assert!(!e.contains('\n'), "{e}");
    }

    #[test]
    fn conditions_parse_like_nginx() {
        let c = |args: &[&str]| compile_condition(&directive("if", args), &Names::default());
        assert!(matches!(c(&["($uri)"]), Ok(Cond::Truth(_))));
        assert!(matches!(
            c(&["($uri", "!=", "/a)"]),
            Ok(Cond::Equal { negate: true, .. })
        ));
        assert!(matches!(
            c(&["(", "$uri", "~*", "^/A", ")"]),
            Ok(Cond::Regex { negate: false, .. })
        ));
        assert!(matches!(
            c(&["(!-d", "/tmp)"]),
            Ok(Cond::File {
                test: FileTest::Dir,
                negate: true,
                ..
            })
        ));
        let msg = |r: Result<Cond, ConfigError>| r.err().map(|e| e.message).unwrap_or_default();
        assert_eq!(msg(c(&["(abc)"])), "invalid condition \"abc\"");
        assert_eq!(
            msg(c(&["($uri", "<", "x)"])),
            "unexpected \"<\" in condition"
        );
        assert_eq!(msg(c(&["(-q", "x)"])), "invalid condition \"-q\"");
    }

    #[test]
    fn args_after_an_internal_rewrite() {
        let v = |s: &str| Some(s.as_bytes().to_vec());
        assert_eq!(new_args(None, v("a=1"), true), v("a=1"));
        assert_eq!(new_args(None, v("a=1"), false), None);
        assert_eq!(new_args(v("b=2"), v("a=1"), true), v("b=2&a=1"));
        assert_eq!(new_args(v("b=2"), v("a=1"), false), v("b=2"));
        assert_eq!(new_args(v("b=2"), None, true), v("b=2"));
        assert_eq!(new_args(v(""), None, true), None);
    }

    #[test]
    fn escapes_and_unescapes_as_nginx() {
        let mut out = Vec::new();
        crate::vars::escape(
            b"a b&c+d;e?f#g%h/i=j\x01\xc3",
            &mut out,
            crate::vars::Escape::Args,
        );
        assert_eq!(out, b"a%20b%26c%2Bd%3Be%3Ff%23g%25h/i=j%01%C3");
        assert_eq!(
            unescape_redirect(b"/a%41%20%2F%7e?x=%41"),
            b"/aA%20/~?x=%41"
        );
        assert_eq!(unescape_redirect(b"/100%"), b"/100%");
        assert_eq!(unescape_redirect(b"/%zz"), b"/%zz");
    }

    #[test]
    fn named_groups_are_found() {
        let mut out = Vec::new();
        named_groups("^/(?<id>\\d+)/(?P<rest>.*)$", &mut out);
        named_groups("^/(plain)$", &mut out);
        named_groups("(", &mut out);
        assert_eq!(out, ["id", "rest"]);
    }

    #[test]
    fn file_tests() {
        let dir = std::env::temp_dir();
        assert!(file_test(&dir, FileTest::Dir));
        assert!(file_test(&dir, FileTest::Exists));
        assert!(!file_test(&dir, FileTest::Plain));
        assert!(!file_test(&dir.join("no-such-file-here"), FileTest::Exists));
    }
}
