//! The syntax tree: directives with their arguments, blocks and source positions.

use std::path::Path;
use std::sync::Arc;

/// Where a directive was written: the file (shared by all directives of that file) and the
/// 1-based line of the directive's name. Error messages print it as `in /path:12`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Span {
    pub file: Arc<Path>,
    pub line: u32,
}

impl std::fmt::Display for Span {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.file.display(), self.line)
    }
}

/// One argument after unquoting and unescaping. Variables (`$host`, `${name}`) are kept in the
/// text as written; whoever uses the argument compiles them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arg {
    pub value: String,
    /// Whether it was written in quotes: `if ($a = "")` and `""` need this distinction.
    pub quoted: bool,
}

/// A directive: `name arg1 arg2;` or `name args { block }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Directive {
    pub name: String,
    pub args: Vec<Arg>,
    pub span: Span,
    /// `Some` for block directives (`http { ... }`), `None` for simple ones.
    pub block: Option<Vec<Directive>>,
}

impl Directive {
    /// The value of argument `i`; the directive table has already checked the count.
    pub fn arg(&self, i: usize) -> &str {
        &self.args[i].value
    }

    /// The children of a block directive, or an empty slice.
    pub fn children(&self) -> &[Directive] {
        self.block.as_deref().unwrap_or(&[])
    }
}
