//! The parser: statements to directives, checked against the directive table as they are
//! read, with `include` expanded in place.
//!
//! Like nginx, a directive is checked when its `;` or `{` is read, before the contents of
//! its block, so the first error in reading order is the one reported.

use std::collections::HashSet;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::ast::{Arg, Directive, Span};
use crate::lexer::{Ending, Lexer, Source, Statement};
use crate::table::{self, ctx, Block};
use crate::{ConfigError, SourceFile, Warning};

/// Deepest nesting of blocks; a location inside a location inside ... past this is refused
/// so that hostile input cannot exhaust the stack.
pub(crate) const MAX_BLOCK_DEPTH: usize = 64;

/// Deepest nesting of `include`; a file that includes itself stops here.
pub(crate) const MAX_INCLUDE_DEPTH: usize = 32;

/// Methods `limit_except` accepts, as nginx's `ngx_methods_names` (in any case).
pub const LIMIT_EXCEPT_METHODS: &[&str] = &[
    "GET",
    "HEAD",
    "POST",
    "PUT",
    "DELETE",
    "MKCOL",
    "COPY",
    "MOVE",
    "OPTIONS",
    "PROPFIND",
    "PROPPATCH",
    "LOCK",
    "UNLOCK",
    "PATCH",
];

/// Directives nginx still accepts but ignores, with a warning naming their replacement.
const OBSOLETE: &[(&str, &str)] = &[
    ("http2_max_requests", "keepalive_requests"),
    ("http2_max_field_size", "large_client_header_buffers"),
    ("http2_max_header_size", "large_client_header_buffers"),
    ("http2_recv_timeout", "client_header_timeout"),
    ("http2_idle_timeout", "keepalive_timeout"),
];

/// Which directives a block may contain.
#[derive(Debug, Clone)]
struct Context {
    /// The table's context bits (`ctx::*`); unused inside a data block.
    bits: u16,
    /// Inside `types`, `map`, `geo`, `split_clients` or `charset_map`, whose entries are data, not
    /// directives.
    data: Option<&'static str>,
    /// The enclosing location, for nginx's nesting rules.
    location: Option<Arc<Location>>,
}

impl Context {
    fn directives(bits: u16, location: Option<Arc<Location>>) -> Context {
        Context {
            bits,
            data: None,
            location,
        }
    }
}

/// What the nesting rules need to know about a location.
#[derive(Debug)]
struct Location {
    name: String,
    exact: bool,
    named: bool,
    regex: bool,
}

/// What a block has seen so far, for nginx's duplicate checks.
#[derive(Debug, Default)]
struct Scope {
    once_seen: HashSet<&'static str>,
    upstreams: HashSet<String>,
}

/// How the statement stream being parsed ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A whole file: ends at end of input.
    File,
    /// A block: ends at `}`.
    Block,
    /// `-g` text.
    Param,
}

/// The statement stream being parsed: where it comes from and what it may contain.
#[derive(Clone, Copy)]
struct Frame<'a> {
    file: &'a Arc<Path>,
    kind: Kind,
    context: &'a Context,
    /// How many blocks enclose this one.
    depth: usize,
}

impl Frame<'_> {
    /// The place of a statement ending at `line`; `-g` text has no lines and prints as
    /// `in command line`.
    fn place(&self, line: u32) -> Span {
        match self.kind {
            Kind::Param => Span::command_line(),
            Kind::File | Kind::Block => Span {
                file: self.file.clone(),
                line,
            },
        }
    }
}

pub(crate) struct Parser {
    /// Directory relative `include` paths resolve against.
    base_dir: PathBuf,
    pub(crate) files: Vec<SourceFile>,
    pub(crate) warnings: Vec<Warning>,
    include_depth: usize,
}

impl Parser {
    pub(crate) fn new(base_dir: PathBuf) -> Self {
        Parser {
            base_dir,
            files: Vec::new(),
            warnings: Vec::new(),
            include_depth: 0,
        }
    }

    /// Parses the main context: `-g` text first, then the main file.
    pub(crate) fn parse_main(
        &mut self,
        global: Option<&str>,
        main: &Path,
        text: &str,
    ) -> Result<Vec<Directive>, ConfigError> {
        let mut out = Vec::new();
        let mut scope = Scope::default();
        let context = Context::directives(ctx::MAIN, None);
        if let Some(global) = global {
            let mut lexer = Lexer::new(global.as_bytes(), Source::CommandLine);
            let file = Span::command_line().file;
            let frame = Frame {
                file: &file,
                kind: Kind::Param,
                context: &context,
                depth: 0,
            };
            self.parse(&mut lexer, frame, &mut scope, &mut out)?;
        }
        self.record(main, text);
        let file: Arc<Path> = Arc::from(main);
        let mut lexer = Lexer::new(text.as_bytes(), Source::File);
        let frame = Frame {
            file: &file,
            kind: Kind::File,
            context: &context,
            depth: 0,
        };
        self.parse(&mut lexer, frame, &mut scope, &mut out)?;
        if !out.iter().any(|d| d.name == "events") {
            return Err(ConfigError {
                message: "no \"events\" section in configuration".into(),
                span: None,
            });
        }
        Ok(out)
    }

    /// Remembers a file for `-T`; nginx dumps each file once however often it is included.
    fn record(&mut self, path: &Path, text: &str) {
        if !self.files.iter().any(|f| f.path == path) {
            self.files.push(SourceFile {
                path: path.to_path_buf(),
                text: text.to_string(),
            });
        }
    }

    /// Parses statements until the frame's end: `}` for a block, end of input otherwise.
    fn parse(
        &mut self,
        lexer: &mut Lexer<'_>,
        frame: Frame<'_>,
        scope: &mut Scope,
        out: &mut Vec<Directive>,
    ) -> Result<(), ConfigError> {
        loop {
            let st = lexer.next_statement().map_err(|e| ConfigError {
                message: e.message,
                span: Some(frame.place(e.line)),
            })?;
            let here = frame.place(st.line);
            match st.end {
                Ending::BlockEnd if frame.kind == Kind::Block => return Ok(()),
                Ending::BlockEnd => return Err(error("unexpected \"}\"", here)),
                Ending::Eof if frame.kind == Kind::Block => {
                    return Err(error("unexpected end of file, expecting \"}\"", here))
                }
                Ending::Eof => return Ok(()),
                Ending::BlockStart if frame.kind == Kind::Param => {
                    return Err(error(
                        "block directives are not supported in -g option",
                        here,
                    ))
                }
                Ending::Semicolon | Ending::BlockStart => {}
            }
            match frame.context.data {
                Some(block) => self.data_entry(st, block, frame, out)?,
                None => self.directive(lexer, st, frame, scope, out)?,
            }
        }
    }

    /// One entry of a `types`/`map`/`geo`/`split_clients`/`charset_map` block: data, or an `include`.
    fn data_entry(
        &mut self,
        st: Statement,
        block: &str,
        frame: Frame<'_>,
        out: &mut Vec<Directive>,
    ) -> Result<(), ConfigError> {
        let here = frame.place(st.line);
        if st.end == Ending::BlockStart {
            return Err(error("unexpected \"{\"", here));
        }
        let n = st.words.len();
        // A charset map's entries are all data: nginx reads an `include` there as one.
        if block == "charset_map" && n != 2 {
            return Err(error("invalid parameters number", here));
        }
        if block != "charset_map" && st.words[0].value == "include" && (block == "types" || n == 2)
        {
            if n != 2 {
                return Err(error(
                    "invalid number of arguments in \"include\" directive",
                    here,
                ));
            }
            let mut scope = Scope::default();
            return self.include(&st.words[1].value, here, frame, &mut scope, out);
        }
        if block == "map" {
            let flag = n == 1 && matches!(st.words[0].value.as_str(), "hostnames" | "volatile");
            if n != 2 && !flag {
                return Err(error("invalid number of the map parameters", here));
            }
        }
        out.push(directive(st, here));
        Ok(())
    }

    /// Checks one directive against the table and, for a block, parses its contents.
    fn directive(
        &mut self,
        lexer: &mut Lexer<'_>,
        st: Statement,
        frame: Frame<'_>,
        scope: &mut Scope,
        out: &mut Vec<Directive>,
    ) -> Result<(), ConfigError> {
        let here = frame.place(st.line);
        let bits = frame.context.bits;
        let name = st.words[0].value.as_str();
        let nargs = st.words.len() - 1;

        if name == "include" {
            if st.end != Ending::Semicolon {
                return Err(error(
                    "directive \"include\" is not terminated by \";\"",
                    here,
                ));
            }
            if nargs != 1 {
                return Err(error(
                    "invalid number of arguments in \"include\" directive",
                    here,
                ));
            }
            return self.include(&st.words[1].value, here, frame, scope, out);
        }

        let Some(spec) = table::entries(name).find(|s| s.contexts & bits != 0) else {
            let message = if table::is_known(name) {
                format!("\"{name}\" directive is not allowed here")
            } else {
                format!("unknown directive \"{name}\"")
            };
            return Err(error(&message, here));
        };
        let is_block = spec.block != Block::No;
        if !is_block && st.end != Ending::Semicolon {
            return Err(error(
                &format!("directive \"{name}\" is not terminated by \";\""),
                here,
            ));
        }
        if is_block && st.end != Ending::BlockStart {
            return Err(error(
                &format!("directive \"{name}\" has no opening \"{{\""),
                here,
            ));
        }
        if !spec.takes(nargs) {
            return Err(error(
                &format!("invalid number of arguments in \"{name}\" directive"),
                here,
            ));
        }
        if spec.args & table::args::FLAG != 0 {
            let value = &st.words[1].value;
            if !value.eq_ignore_ascii_case("on") && !value.eq_ignore_ascii_case("off") {
                return Err(error(
                    &format!(
                        "invalid value \"{value}\" in \"{name}\" directive, it must be \"on\" or \"off\""
                    ),
                    here,
                ));
            }
        }
        if let table::Support::Refuse(unless) = spec.support {
            let asks_nothing = unless.is_some_and(|v| nargs == 1 && st.words[1].value == v);
            if !asks_nothing {
                return Err(error(
                    &format!(
                        "the \"{name}\" directive is not supported yet and cannot be ignored safely"
                    ),
                    here,
                ));
            }
        }
        if spec.once && !scope.once_seen.insert(spec.name) {
            return Err(error(&format!("\"{name}\" directive is duplicate"), here));
        }
        self.check_special(&st, scope, &here)?;

        let inner = match spec.block {
            Block::No => None,
            Block::Data => Some(Context {
                bits: 0,
                data: Some(spec.name),
                location: None,
            }),
            Block::If => {
                let bits = if bits & ctx::SRV != 0 {
                    ctx::SIF
                } else {
                    ctx::LIF
                };
                Some(Context::directives(bits, frame.context.location.clone()))
            }
            Block::Ctx(inner) => {
                let location = match spec.name {
                    "location" => Some(Arc::new(check_location(
                        &st,
                        &frame.context.location,
                        &here,
                    )?)),
                    _ => None,
                };
                Some(Context::directives(inner, location))
            }
        };

        let mut d = directive(st, here);
        if let Some(inner) = inner {
            if frame.depth >= MAX_BLOCK_DEPTH {
                return Err(error("too deep block nesting", d.span));
            }
            let mut children = Vec::new();
            let inner_frame = Frame {
                file: frame.file,
                kind: Kind::Block,
                context: &inner,
                depth: frame.depth + 1,
            };
            self.parse(lexer, inner_frame, &mut Scope::default(), &mut children)?;
            d.block = Some(children);
        }
        out.push(d);
        Ok(())
    }

    /// nginx's checks that go beyond the table: `root`/`alias` exclusion, upstream names,
    /// `limit_except` methods, and the deprecated `ssl on;`.
    fn check_special(
        &mut self,
        st: &Statement,
        scope: &mut Scope,
        here: &Span,
    ) -> Result<(), ConfigError> {
        let name = st.words[0].value.as_str();
        match name {
            "root" | "alias" => {
                let other = if name == "root" { "alias" } else { "root" };
                if scope.once_seen.contains(other) {
                    return Err(error(
                        &format!(
                            "\"{name}\" directive is duplicate, \"{other}\" directive was specified earlier"
                        ),
                        here.clone(),
                    ));
                }
            }
            "upstream" => {
                let upstream = &st.words[1].value;
                if !scope.upstreams.insert(upstream.to_ascii_lowercase()) {
                    return Err(error(
                        &format!("duplicate upstream \"{upstream}\""),
                        here.clone(),
                    ));
                }
            }
            "limit_except" => {
                for method in &st.words[1..] {
                    let known = LIMIT_EXCEPT_METHODS
                        .iter()
                        .any(|m| m.eq_ignore_ascii_case(&method.value));
                    if !known {
                        return Err(error(
                            &format!("invalid method \"{}\"", method.value),
                            here.clone(),
                        ));
                    }
                }
            }
            "if" => {
                let args: Vec<&str> = st.words[1..].iter().map(|w| w.value.as_str()).collect();
                if let Err(message) = check_if_condition(&args) {
                    return Err(error(&message, here.clone()));
                }
            }
            "ssl" => self.warnings.push(Warning {
                message: "the \"ssl\" directive is deprecated, use the \"listen ... ssl\" \
                          directive instead"
                    .into(),
                span: Some(here.clone()),
            }),
            _ => {
                if let Some((_, replacement)) = OBSOLETE.iter().find(|(old, _)| *old == name) {
                    self.warnings.push(Warning {
                        message: format!(
                            "the \"{name}\" directive is obsolete, use the \"{replacement}\" \
                             directive instead"
                        ),
                        span: Some(here.clone()),
                    });
                }
            }
        }
        Ok(())
    }

    /// Expands `include pattern;` in place, in the including block's context and scope.
    fn include(
        &mut self,
        pattern: &str,
        here: Span,
        frame: Frame<'_>,
        scope: &mut Scope,
        out: &mut Vec<Directive>,
    ) -> Result<(), ConfigError> {
        if self.include_depth >= MAX_INCLUDE_DEPTH {
            return Err(error(
                &format!("include nesting too deep at \"{pattern}\""),
                here,
            ));
        }
        // glob(3) has no recursive `**`: it is `*`, as in nginx.
        let mut pattern = pattern.to_string();
        while pattern.contains("**") {
            pattern = pattern.replace("**", "*");
        }
        let pattern = pattern.as_str();
        let full = self.base_dir.join(pattern);
        let paths = if pattern.contains(['*', '?', '[']) {
            let text = full.to_string_lossy();
            // glob(3)'s rules: a wildcard matches no `/`, nor a leading dot (a site disabled
            // as `.default.conf` stays off); the glob crate's own leading-dot option also
            // drops names the pattern spells with their dot, so that part is checked here.
            let options = glob::MatchOptions {
                case_sensitive: true,
                require_literal_separator: true,
                require_literal_leading_dot: false,
            };
            let Ok(matches) = glob::glob_with(&text, options) else {
                return Err(error(&format!("glob() \"{text}\" failed"), here));
            };
            // Entries that cannot be read while listing are skipped, like glob(3) does.
            matches
                .filter_map(Result::ok)
                .filter(|path| !dot_matched_by_wildcard(&full, path))
                .collect()
        } else {
            vec![full]
        };

        self.include_depth += 1;
        let result = paths.iter().try_for_each(|path| {
            let bytes = std::fs::read(path).map_err(|e| {
                error(
                    &format!("open() \"{}\" failed ({})", path.display(), os_error(&e)),
                    here.clone(),
                )
            })?;
            let text = String::from_utf8_lossy(&bytes);
            self.record(path, &text);
            let file: Arc<Path> = Arc::from(path.as_path());
            let mut lexer = Lexer::new(text.as_bytes(), Source::File);
            let file_frame = Frame {
                file: &file,
                kind: Kind::File,
                ..frame
            };
            self.parse(&mut lexer, file_frame, scope, out)
        });
        self.include_depth -= 1;
        result
    }
}

/// Whether a name of `path` starts with a dot that the same component of `pattern` does not
/// spell out: glob(3) matches such a name only literally.
fn dot_matched_by_wildcard(pattern: &Path, path: &Path) -> bool {
    pattern.components().zip(path.components()).any(|(p, m)| {
        m.as_os_str().as_encoded_bytes().starts_with(b".")
            && !p.as_os_str().as_encoded_bytes().starts_with(b".")
    })
}

/// nginx's shape check of an `if` condition (`ngx_http_rewrite_if_condition`): the
/// parentheses, then `($var)`, `($var op value)` or `(-f path)`. Regexes and variables are
/// compiled with the rest of the rewrite rules, not here.
fn check_if_condition(args: &[&str]) -> Result<(), String> {
    let invalid = |s: &str| format!("invalid condition \"{s}\"");
    let mut v = args.to_vec();
    let first = v.first().copied().unwrap_or_default();
    if !first.starts_with('(') {
        return Err(invalid(first));
    }
    let cur = if first.len() == 1 {
        1
    } else {
        v[0] = &first[1..];
        0
    };
    let mut last = v.len() - 1;
    let end = v[last];
    if !end.ends_with(')') {
        return Err(invalid(end));
    }
    if end.len() == 1 {
        // `( )` leaves nothing between the parentheses; nginx then looks at the `)`.
        last = last.saturating_sub(1);
    } else {
        v[last] = &end[..end.len() - 1];
    }

    let p = v.get(cur).copied().unwrap_or_default();
    if p.len() > 1 && p.starts_with('$') {
        if cur == last {
            return Ok(());
        }
        if cur + 2 != last {
            return Err(invalid(p));
        }
        let op = v[cur + 1];
        if matches!(op, "=" | "!=" | "~" | "~*" | "!~" | "!~*") {
            return Ok(());
        }
        return Err(format!("unexpected \"{op}\" in condition"));
    }
    let file_test = matches!(p, "-f" | "-d" | "-e" | "-x" | "!-f" | "!-d" | "!-e" | "!-x");
    if file_test && cur + 1 == last {
        return Ok(());
    }
    Err(invalid(p))
}

/// nginx's rules for a `location`'s arguments and nesting.
fn check_location(
    st: &Statement,
    parent: &Option<Arc<Location>>,
    here: &Span,
) -> Result<Location, ConfigError> {
    let mut loc = Location {
        name: String::new(),
        exact: false,
        named: false,
        regex: false,
    };
    let first = st.words[1].value.as_str();
    if st.words.len() == 3 {
        loc.name = st.words[2].value.clone();
        match first {
            "=" => loc.exact = true,
            "^~" => {}
            "~" | "~*" => loc.regex = true,
            _ => {
                return Err(error(
                    &format!("invalid location modifier \"{first}\""),
                    here.clone(),
                ))
            }
        }
    } else if let Some(rest) = first.strip_prefix('=') {
        loc.exact = true;
        loc.name = rest.to_string();
    } else if let Some(rest) = first.strip_prefix("^~") {
        loc.name = rest.to_string();
    } else if let Some(rest) = first.strip_prefix('~') {
        loc.regex = true;
        loc.name = rest.strip_prefix('*').unwrap_or(rest).to_string();
    } else {
        loc.named = first.starts_with('@');
        loc.name = first.to_string();
    }

    if let Some(parent) = parent {
        let message = if parent.exact {
            Some(format!(
                "location \"{}\" cannot be inside the exact location \"{}\"",
                loc.name, parent.name
            ))
        } else if parent.named {
            Some(format!(
                "location \"{}\" cannot be inside the named location \"{}\"",
                loc.name, parent.name
            ))
        } else if loc.named {
            Some(format!(
                "named location \"{}\" can be on the server level only",
                loc.name
            ))
        } else if !loc.regex && !loc.name.starts_with(parent.name.as_str()) {
            Some(format!(
                "location \"{}\" is outside location \"{}\"",
                loc.name, parent.name
            ))
        } else {
            None
        };
        if let Some(message) = message {
            return Err(error(&message, here.clone()));
        }
    }
    Ok(loc)
}

fn error(message: &str, span: Span) -> ConfigError {
    ConfigError {
        message: message.to_string(),
        span: Some(span),
    }
}

/// A statement as a directive; its first word is the name.
fn directive(st: Statement, span: Span) -> Directive {
    let mut words = st.words.into_iter();
    let name = words.next().map(|w| w.value).unwrap_or_default();
    let args = words
        .map(|w| Arg {
            value: w.value,
            quoted: w.quoted,
        })
        .collect();
    Directive {
        name,
        args,
        span,
        block: None,
    }
}

/// An I/O error as nginx prints it: `2: No such file or directory`.
pub(crate) fn os_error(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(code) => {
            let text = e.to_string();
            let suffix = format!(" (os error {code})");
            let text = text.strip_suffix(&suffix).unwrap_or(&text);
            format!("{code}: {text}")
        }
        None => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use crate::{load_str, ConfigError, LoadOptions, Loaded};
    use std::path::Path;

    const NAME: &str = "/etc/nginx/nginx.conf";

    fn load(text: &str) -> Result<Loaded, ConfigError> {
        load_str(text, Path::new(NAME), &LoadOptions::default())
    }

    /// The error for `text`, as nginx prints it after `[emerg] `.
    fn err(text: &str) -> String {
        load(text).expect_err("must fail").to_string()
    }

    fn in_http(body: &str) -> String {
        format!("events {{}}\nhttp {{\n{body}\n}}\n")
    }

    #[test]
    fn tree_shape_and_spans() {
        let loaded = load(&in_http(
            "server {\n listen 80;\n location / {\n  root /srv;\n }\n}",
        ))
        .expect("loads");
        let http = &loaded.directives[1];
        assert_eq!(http.name, "http");
        let server = &http.children()[0];
        assert_eq!(server.span.line, 3);
        let location = server.child("location").expect("location");
        assert_eq!(location.arg(0), "/");
        assert_eq!(location.span.line, 5);
        let root = location.child("root").expect("root");
        assert_eq!(root.arg(0), "/srv");
        assert_eq!(root.span.to_string(), format!("{NAME}:6"));
        assert!(root.block.is_none());
        assert_eq!(loaded.files.len(), 1);
    }

    #[test]
    fn syntax_errors_in_nginx_words() {
        assert_eq!(
            err(&in_http("foo;")),
            format!("unknown directive \"foo\" in {NAME}:3")
        );
        assert_eq!(
            err(&in_http("root\n/a\n/b;")),
            format!("invalid number of arguments in \"root\" directive in {NAME}:5")
        );
        assert_eq!(
            err("events{}\nhttp{\nroot /a\n"),
            format!("unexpected end of file, expecting \";\" or \"}}\" in {NAME}:4")
        );
        assert_eq!(
            err("events{}\nhttp{\nroot /a;\n"),
            format!("unexpected end of file, expecting \"}}\" in {NAME}:4")
        );
        assert_eq!(
            err("events{}\nhttp{\n}\n}\n"),
            format!("unexpected \"}}\" in {NAME}:4")
        );
        assert_eq!(
            err(&in_http("root /a {\n}")),
            format!("directive \"root\" is not terminated by \";\" in {NAME}:3")
        );
        assert_eq!(
            err(&in_http("server;")),
            format!("directive \"server\" has no opening \"{{\" in {NAME}:3")
        );
        assert_eq!(
            err(&in_http("{\n}")),
            format!("unexpected \"{{\" in {NAME}:3")
        );
        assert_eq!(
            err(&in_http("listen 80;")),
            format!("\"listen\" directive is not allowed here in {NAME}:3")
        );
        assert_eq!(
            err("events{}\nevents{}\nhttp{\n}\n"),
            format!("\"events\" directive is duplicate in {NAME}:2")
        );
        assert_eq!(err("http{\n}\n"), "no \"events\" section in configuration");
        assert_eq!(
            err(&in_http("sendfile maybe;")),
            format!(
                "invalid value \"maybe\" in \"sendfile\" directive, it must be \"on\" or \"off\" in {NAME}:3"
            )
        );
        assert_eq!(
            err(&in_http("root \"a\"b;")),
            format!("unexpected \"b\" in {NAME}:3")
        );
    }

    #[test]
    fn regex_braces_need_quotes() {
        let unquoted = in_http("server {\nlocation ~ ^/a{2}$ {\n}\n}");
        assert_eq!(
            err(&unquoted),
            format!("unknown directive \"2}}$\" in {NAME}:4")
        );
        let quoted = in_http("server {\nlocation ~ \"^/a{2}$\" {\n}\n}");
        let loaded = load(&quoted).expect("loads");
        let location = &loaded.directives[1].children()[0].children()[0];
        assert_eq!(location.arg(1), "^/a{2}$");
        assert!(location.args[1].quoted);
        let variable = in_http("server {\nlocation ~ ^/a${2}$ {\n}\n}");
        assert!(load(&variable).is_ok());
    }

    #[test]
    fn duplicates() {
        assert_eq!(
            err(&in_http("root /a;\nroot /b;")),
            format!("\"root\" directive is duplicate in {NAME}:4")
        );
        assert_eq!(
            err(&in_http("server {\nlocation / {\nroot /a;\nalias /b;\n}\n}")),
            format!(
                "\"alias\" directive is duplicate, \"root\" directive was specified earlier in {NAME}:6"
            )
        );
        assert_eq!(
            err(&in_http(
                "upstream a {\nserver x;\n}\nupstream A {\nserver y;\n}"
            )),
            format!("duplicate upstream \"A\" in {NAME}:6")
        );
        // The same directive in different blocks is no duplicate, nor are list directives.
        assert!(load(&in_http(
            "root /a;\nserver {\nroot /b;\nlisten 1;\nlisten 2;\nadd_header a b;\nadd_header c d;\n}"
        ))
        .is_ok());
    }

    #[test]
    fn contexts() {
        // `if` bodies take rewrite directives, not `listen`; `if` cannot nest.
        let ok = in_http("server {\nif ($a) {\nreturn 404;\nset $b c;\n}\nlocation / {\nif ($a) {\nproxy_pass http://x;\n}\n}\n}");
        assert!(load(&ok).is_ok(), "{:?}", load(&ok));
        assert_eq!(
            err(&in_http("server {\nif ($a) {\nproxy_pass http://x;\n}\n}")),
            format!("\"proxy_pass\" directive is not allowed here in {NAME}:5")
        );
        assert_eq!(
            err(&in_http("server {\nif ($a) {\nif ($b) {\n}\n}\n}")),
            format!("\"if\" directive is not allowed here in {NAME}:5")
        );
        // `server` is a block in http and a simple directive in upstream.
        assert!(load(&in_http("upstream u {\nserver 127.0.0.1:80 weight=2;\n}")).is_ok());
        assert_eq!(
            err(&in_http("upstream u {\nserver {\n}\n}")),
            format!("directive \"server\" is not terminated by \";\" in {NAME}:4")
        );
        // limit_except takes access directives and checks its methods.
        assert!(load(&in_http(
            "server {\nlocation / {\nlimit_except GET POST {\nallow 127.0.0.1;\ndeny all;\n}\n}\n}"
        ))
        .is_ok());
        assert_eq!(
            err(&in_http(
                "server {\nlocation / {\nlimit_except FETCH {\n}\n}\n}"
            )),
            format!("invalid method \"FETCH\" in {NAME}:5")
        );
        assert_eq!(
            err("worker_connections 1;\nevents{}\n"),
            format!("\"worker_connections\" directive is not allowed here in {NAME}:1")
        );
    }

    #[test]
    fn if_conditions() {
        let cond = |c: &str| load(&in_http(&format!("server {{\nif {c} {{\n}}\n}}")));
        for ok in [
            "($a)",
            "( $a )",
            "($a = b)",
            "($a = \"\")",
            "($a != b)",
            "($a ~ ^x)",
            "($a ~* \"x{2}\")",
            "($a !~* x)",
            "(-f $b)",
            "( !-d /x )",
        ] {
            assert!(cond(ok).is_ok(), "{ok}: {:?}", cond(ok));
        }
        let fails = [
            ("$a", "invalid condition \"$a\""),
            ("($a", "invalid condition \"$a\""),
            ("($a == b)", "unexpected \"==\" in condition"),
            ("($a = b c)", "invalid condition \"$a\""),
            ("(a = b)", "invalid condition \"a\""),
            ("(-q x)", "invalid condition \"-q\""),
            ("( )", "invalid condition \")\""),
        ];
        for (c, message) in fails {
            assert_eq!(
                cond(c).expect_err(c).to_string(),
                format!("{message} in {NAME}:4"),
                "{c}"
            );
        }
    }

    #[test]
    fn location_nesting() {
        assert!(load(&in_http("server {\nlocation /a {\nlocation /a/b {\n}\nlocation ~ x {\n}\n}\nlocation @n {\n}\n}")).is_ok());
        assert_eq!(
            err(&in_http("server {\nlocation /a {\nlocation /b {\n}\n}\n}")),
            format!("location \"/b\" is outside location \"/a\" in {NAME}:5")
        );
        assert_eq!(
            err(&in_http("server {\nlocation /a {\nlocation @b {\n}\n}\n}")),
            format!("named location \"@b\" can be on the server level only in {NAME}:5")
        );
        assert_eq!(
            err(&in_http(
                "server {\nlocation = /a {\nlocation /a {\n}\n}\n}"
            )),
            format!("location \"/a\" cannot be inside the exact location \"/a\" in {NAME}:5")
        );
        assert_eq!(
            err(&in_http("server {\nlocation @a {\nlocation /a {\n}\n}\n}")),
            format!("location \"/a\" cannot be inside the named location \"@a\" in {NAME}:5")
        );
        assert_eq!(
            err(&in_http("server {\nlocation ! /a {\n}\n}")),
            format!("invalid location modifier \"!\" in {NAME}:4")
        );
    }

    #[test]
    fn data_blocks() {
        let loaded = load(&in_http(
            "types {\ntext/html html htm;\nimage/png png;\n}\nmap $uri $x {\ndefault 0;\n~^/a 1;\nhostnames;\n}",
        ))
        .expect("loads");
        let http = &loaded.directives[1];
        let types = http.child("types").expect("types");
        assert_eq!(types.children()[0].name, "text/html");
        assert_eq!(types.children()[0].args.len(), 2);
        let map = http.child("map").expect("map");
        assert_eq!(map.children()[1].name, "~^/a");
        assert_eq!(
            err(&in_http("map $a $b {\na b c;\n}")),
            format!("invalid number of the map parameters in {NAME}:4")
        );
        assert_eq!(
            err(&in_http("types {\na {\n}\n}")),
            format!("unexpected \"{{\" in {NAME}:4")
        );
    }

    #[test]
    fn mime_types_parse_as_types_block() {
        let text = format!("events {{}}\nhttp {{\n{}\n}}\n", crate::MIME_TYPES);
        let loaded = load(&text).expect("loads");
        let types = loaded.directives[1].child("types").expect("types block");
        let html = &types.children()[0];
        assert_eq!(html.name, "text/html");
        assert_eq!(
            html.args
                .iter()
                .map(|a| a.value.as_str())
                .collect::<Vec<_>>(),
            ["html", "htm", "shtml"]
        );
        for mime in [
            "text/css",
            "application/json",
            "image/png",
            "application/octet-stream",
        ] {
            assert!(types.child(mime).is_some(), "{mime}");
        }
    }

    #[test]
    fn ssl_on_warns() {
        let loaded = load(&in_http("server {\nssl on;\n}")).expect("loads");
        assert_eq!(loaded.warnings.len(), 1);
        assert_eq!(
            loaded.warnings[0].to_string(),
            format!(
                "the \"ssl\" directive is deprecated, use the \"listen ... ssl\" directive instead in {NAME}:4"
            )
        );
    }

    #[test]
    fn obsolete_directives_warn() {
        let loaded = load(&in_http("http2_idle_timeout 3m;")).expect("loads");
        assert_eq!(
            loaded.warnings[0].message,
            "the \"http2_idle_timeout\" directive is obsolete, use the \"keepalive_timeout\" directive instead"
        );
    }

    #[test]
    fn global_directives() {
        let opts = |g: &str| LoadOptions {
            global_directives: Some(g.to_string()),
        };
        let loaded = load_str(
            "events {}\n",
            Path::new(NAME),
            &opts("worker_processes 2; daemon off;"),
        )
        .expect("loads");
        assert_eq!(loaded.directives[0].name, "worker_processes");
        assert!(loaded.directives[0].span.is_command_line());
        assert_eq!(loaded.directives[1].name, "daemon");
        assert_eq!(loaded.directives[2].name, "events");
        let g_err = |g: &str, text: &str| {
            load_str(text, Path::new(NAME), &opts(g))
                .expect_err("must fail")
                .to_string()
        };
        assert_eq!(
            g_err("foo;", "events {}\n"),
            "unknown directive \"foo\" in command line"
        );
        assert_eq!(
            g_err("worker_processes 1", "events {}\n"),
            "unexpected end of parameter, expecting \";\" in command line"
        );
        assert_eq!(
            g_err("events {}", "events {}\n"),
            "block directives are not supported in -g option in command line"
        );
        assert_eq!(
            g_err("}", "events {}\n"),
            "unexpected \"}\" in command line"
        );
        // A -g directive counts as written in the main context.
        assert_eq!(
            g_err("pid /a;", "events {}\npid /b;\n"),
            format!("\"pid\" directive is duplicate in {NAME}:2")
        );
    }

    #[test]
    fn deep_nesting_is_refused_not_overflowed() {
        let depth = super::MAX_BLOCK_DEPTH + 5;
        let text = format!(
            "events {{}}\nhttp {{\nserver {{\n{}{}}}\n}}\n",
            "location / {\n".repeat(depth),
            "}\n".repeat(depth)
        );
        assert!(err(&text).starts_with("too deep block nesting in "));
    }
}
