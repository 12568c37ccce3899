//! nginx's configuration language.
//!
//! [`load`] reads an `nginx.conf` the way nginx does and returns its directives as a tree
//! ([`Directive`]) with every `include` expanded in place, after checking each directive
//! against a table of what nginx accepts: known name, allowed context, number of
//! arguments, `on`/`off` values, directives nginx refuses twice, location nesting and the
//! shape of `if` conditions. Errors carry nginx's own
//! words and place (`unknown directive "x" in /etc/nginx/nginx.conf:12`), so a user sees
//! what `nginx -t` would have said.
//!
//! - `lexer`: nginx's tokenizer, statement by statement, with its quoting and escapes;
//! - `parser`: statements to directives, context checks, `include`;
//! - `table`: the module registry: every module's directives and what portcullis does with
//!   each ([`MODULES`], [`Support`]);
//! - [`value`]: typed readers for arguments (sizes, times, flags, numbers), used when the
//!   tree is turned into runtime configuration;
//! - [`MIME_TYPES`]: the shipped `mime.types`.

mod ast;
#[doc(hidden)]
pub mod fuzz;
mod lexer;
mod parser;
mod table;
pub mod value;

pub use ast::{Arg, Directive, Span};
pub use parser::LIMIT_EXCEPT_METHODS;
pub use table::{directives, is_known, Flag, Module, Spec, Support, MODULES};

use std::fmt;
use std::path::{Path, PathBuf};

/// A configuration error in nginx's words, with the place it was found.
/// `Display` prints `<message> in <file>:<line>` (or `<message> in command line` for `-g`),
/// exactly as nginx prints after `nginx: [emerg] `; errors about the configuration as a
/// whole (`no "events" section in configuration`) have no place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub message: String,
    pub span: Option<Span>,
}

impl ConfigError {
    /// An error about `d`, reported at its place.
    pub fn at(d: &Directive, message: impl Into<String>) -> Self {
        ConfigError {
            message: message.into(),
            span: Some(d.span.clone()),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.span {
            Some(span) => write!(f, "{} in {span}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for ConfigError {}

/// A warning (nginx's `[warn]`), e.g. the deprecated `ssl on;`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    pub message: String,
    pub span: Option<Span>,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.span {
            Some(span) => write!(f, "{} in {span}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

/// nginx's `[warn]` line (without its place) for a directive that the registry says is
/// ignored with the arguments it has, or `None` when it is not ignored. A name that several
/// modules share is taken as the http core's (`keepalive_time`, not the upstream one).
pub fn ignored_warning(d: &Directive) -> Option<String> {
    let ignored = match table::entries(&d.name).next()?.support {
        Support::Warn => true,
        Support::DefaultOnly(value) => d.args.len() != 1 || d.arg(0) != value,
        Support::Yes | Support::Inert | Support::Refuse(_) => false,
    };
    ignored.then(|| {
        format!(
            "the \"{}\" directive is not supported yet and is ignored",
            d.name
        )
    })
}

/// One file that was read, for `-T`.
#[derive(Debug, Clone)]
pub struct SourceFile {
    pub path: PathBuf,
    pub text: String,
}

/// A parsed and validated configuration: every directive known, in an allowed context, with
/// an accepted number of arguments. `include` has been expanded in place.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The main context's directives (the `-g` ones first).
    pub directives: Vec<Directive>,
    /// Every file read, main file first, each once, in the order first read.
    pub files: Vec<SourceFile>,
    pub warnings: Vec<Warning>,
}

impl Loaded {
    /// The files as `nginx -T` prints them: for each, `# configuration file <path>:`, its
    /// text, and an empty line.
    pub fn dump(&self) -> String {
        let mut out = String::new();
        for file in &self.files {
            out.push_str("# configuration file ");
            out.push_str(&file.path.to_string_lossy());
            out.push_str(":\n");
            out.push_str(&file.text);
            out.push('\n');
        }
        out
    }
}

#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// `-g "directives;"`: parsed as main-context directives, spans say "command line".
    pub global_directives: Option<String>,
}

/// Reads and checks the configuration at `path`; relative includes resolve against its
/// directory, as nginx resolves them against its configuration prefix.
pub fn load(path: &Path, opts: &LoadOptions) -> Result<Loaded, ConfigError> {
    let bytes = std::fs::read(path).map_err(|e| ConfigError {
        message: format!(
            "open() \"{}\" failed ({})",
            path.display(),
            parser::os_error(&e)
        ),
        span: None,
    })?;
    load_str(&String::from_utf8_lossy(&bytes), path, opts)
}

/// Parses configuration text that has no file of its own (the embedded default); `name` is
/// what spans and `-T` show, and relative includes resolve against its directory.
pub fn load_str(text: &str, name: &Path, opts: &LoadOptions) -> Result<Loaded, ConfigError> {
    let base_dir = name.parent().map(Path::to_path_buf).unwrap_or_default();
    let mut parser = parser::Parser::new(base_dir);
    let directives = parser.parse_main(opts.global_directives.as_deref(), name, text)?;
    Ok(Loaded {
        directives,
        files: parser.files,
        warnings: parser.warnings,
    })
}

/// The shipped `mime.types` file's text: a `types { ... }` block, as nginx ships it.
pub const MIME_TYPES: &str = include_str!("../mime.types");
