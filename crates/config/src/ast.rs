//! The syntax tree: directives with their arguments, blocks and source positions.

use std::path::Path;
use std::sync::Arc;

/// Where a directive was written: the file (shared by all directives of that file) and the
/// 1-based line of the `;` or `{` that ends the directive, which is the line nginx reports
/// (it differs from the name's line only for a directive spread over several lines).
/// Error messages print it as `in /path:12`; directives given with `-g` have line 0 and
/// print as `in command line`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Span {
    pub file: Arc<Path>,
    pub line: u32,
}

/// The stand-in file name of `-g` directives.
const COMMAND_LINE: &str = "command line";

impl Span {
    /// The place of directives given with `-g`.
    pub fn command_line() -> Span {
        Span {
            file: Arc::from(Path::new(COMMAND_LINE)),
            line: 0,
        }
    }

    /// Whether this is the place of a `-g` directive.
    pub fn is_command_line(&self) -> bool {
        self.line == 0
    }
}

impl std::fmt::Display for Span {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_command_line() {
            return f.write_str(COMMAND_LINE);
        }
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

    /// The first child named `name`.
    pub fn child(&self, name: &str) -> Option<&Directive> {
        self.children().iter().find(|d| d.name == name)
    }

    /// The children named `name`, in order.
    pub fn children_named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Directive> {
        self.children().iter().filter(move |d| d.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaf(name: &str, line: u32) -> Directive {
        Directive {
            name: name.into(),
            args: vec![Arg {
                value: "x".into(),
                quoted: false,
            }],
            span: Span {
                file: Arc::from(Path::new("/etc/nginx/nginx.conf")),
                line,
            },
            block: None,
        }
    }

    #[test]
    fn span_display() {
        assert_eq!(leaf("a", 12).span.to_string(), "/etc/nginx/nginx.conf:12");
        assert_eq!(Span::command_line().to_string(), "command line");
    }

    #[test]
    fn children_lookup() {
        let mut http = leaf("http", 1);
        http.block = Some(vec![leaf("root", 2), leaf("index", 3), leaf("root", 4)]);
        assert_eq!(http.child("index").map(|d| d.span.line), Some(3));
        assert_eq!(http.children_named("root").count(), 2);
        assert!(leaf("root", 1).children().is_empty());
        assert_eq!(http.arg(0), "x");
    }
}
