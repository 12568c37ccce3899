//! nginx's configuration language.
//!
//! INTERFACE SKETCH (to be implemented): the signatures below are what the other crates use.

mod ast;

pub use ast::{Arg, Directive, Span};

use std::path::{Path, PathBuf};

/// A configuration error in nginx's words, with the place it was found.
/// `Display` prints `<message> in <file>:<line>` (or `<message> in command line` for `-g`),
/// exactly as nginx prints after `nginx: [emerg] `.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub message: String,
    pub span: Option<Span>,
}

/// A warning (nginx's `[warn]`), e.g. the deprecated `ssl on;`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    pub message: String,
    pub span: Option<Span>,
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
    pub files: Vec<SourceFile>,
    pub warnings: Vec<Warning>,
}

#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// `-g "directives;"`: parsed as main-context directives, spans say "command line".
    pub global_directives: Option<String>,
}

pub fn load(path: &Path, opts: &LoadOptions) -> Result<Loaded, ConfigError> {
    unimplemented!("{path:?} {opts:?}")
}

/// Parses configuration text that has no file of its own (the embedded default); `name` is
/// what spans and `-T` show, and relative includes resolve against its directory.
pub fn load_str(text: &str, name: &Path, opts: &LoadOptions) -> Result<Loaded, ConfigError> {
    unimplemented!("{text} {name:?} {opts:?}")
}

/// The shipped `mime.types` file's text.
pub const MIME_TYPES: &str = "";
