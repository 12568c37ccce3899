//! The tokenizer: nginx's `ngx_conf_read_token`, statement by statement.
//!
//! nginx does not tokenize into a flat stream; it reads one statement at a time (the words of
//! a directive up to its `;`, `{` or a lone `}`), and its error messages and corner cases
//! follow from that. This module reproduces that state machine so the same bytes give the
//! same words and the same errors:
//!
//! - an unquoted word ends at whitespace, `;` or `{`, but not at `}`: `a}b` is one word;
//! - `{` right after `$` belongs to the word (`${var}`), any other `{` starts a block, so a
//!   regex with a `{n}` quantifier must be quoted;
//! - a backslash protects the next character from ending the word or string; when the word
//!   is stored, `\"`, `\'` and `\\` lose their backslash, `\n`, `\r` and `\t` become control
//!   characters, and every other backslash is kept as written;
//! - a closing quote must be followed by whitespace, `;`, `{` or `)`.

/// nginx's read buffer size (`NGX_CONF_BUFFER`): a word, from its first character (after an
/// opening quote) up to the character that follows it, must fit in it.
pub(crate) const MAX_WORD_LEN: usize = 4096;

/// How a statement ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ending {
    /// `;`
    Semicolon,
    /// `{`: the words are a block directive's name and arguments.
    BlockStart,
    /// A `}` with no words before it.
    BlockEnd,
    /// End of input with no words pending.
    Eof,
}

/// One word after unquoting and unescaping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Word {
    pub(crate) value: String,
    pub(crate) quoted: bool,
}

/// The words of one statement and how it ended.
#[derive(Debug)]
pub(crate) struct Statement {
    pub(crate) words: Vec<Word>,
    pub(crate) end: Ending,
    /// The line of the character that ended the statement: nginx reports errors about the
    /// directive at this line.
    pub(crate) line: u32,
}

/// A syntax error and the line nginx reports it at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LexError {
    pub(crate) message: String,
    pub(crate) line: u32,
}

/// Where the text came from changes one message: `-g` text has no file to end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    File,
    CommandLine,
}

pub(crate) struct Lexer<'a> {
    src: &'a [u8],
    pos: usize,
    line: u32,
    source: Source,
}

fn is_space(ch: u8) -> bool {
    matches!(ch, b' ' | b'\t' | b'\r' | b'\n')
}

impl<'a> Lexer<'a> {
    pub(crate) fn new(src: &'a [u8], source: Source) -> Self {
        Lexer {
            src,
            pos: 0,
            line: 1,
            source,
        }
    }

    /// Reads the next statement.
    pub(crate) fn next_statement(&mut self) -> Result<Statement, LexError> {
        let mut words = Vec::new();
        let mut last_space = true;
        let mut need_space = false;
        let mut comment = false;
        let mut variable = false;
        let mut escaped = false;
        let mut d_quoted = false;
        let mut s_quoted = false;
        // Start of the current word (after an opening quote) and the line it began on.
        let mut start = self.pos;
        let mut start_line = self.line;

        loop {
            let Some(&ch) = self.src.get(self.pos) else {
                if !words.is_empty() || !last_space {
                    let message = match self.source {
                        Source::File => "unexpected end of file, expecting \";\" or \"}\"",
                        Source::CommandLine => "unexpected end of parameter, expecting \";\"",
                    };
                    return Err(self.error(message.to_string()));
                }
                return Ok(self.statement(words, Ending::Eof));
            };
            self.pos += 1;

            if !last_space && self.pos - start > MAX_WORD_LEN {
                self.line = start_line;
                let message = if d_quoted || s_quoted {
                    let quote = if d_quoted { '"' } else { '\'' };
                    format!(
                        "too long parameter, probably missing terminating \"{quote}\" character"
                    )
                } else {
                    let head = String::from_utf8_lossy(&self.src[start..start + 10]);
                    format!("too long parameter \"{head}...\" started")
                };
                return Err(self.error(message));
            }

            if ch == b'\n' {
                self.line += 1;
                comment = false;
            }
            if comment {
                continue;
            }
            if escaped {
                escaped = false;
                continue;
            }

            if need_space {
                if is_space(ch) {
                    last_space = true;
                    need_space = false;
                    continue;
                }
                match ch {
                    b';' => return Ok(self.statement(words, Ending::Semicolon)),
                    b'{' => return Ok(self.statement(words, Ending::BlockStart)),
                    // `if ($a = "b")`: the parenthesis may touch the closing quote; it is then
                    // read as the start of the next word.
                    b')' => {
                        last_space = true;
                        need_space = false;
                    }
                    _ => return Err(self.unexpected(ch)),
                }
            }

            if last_space {
                start = self.pos - 1;
                start_line = self.line;
                if is_space(ch) {
                    continue;
                }
                match ch {
                    b';' | b'{' => {
                        if words.is_empty() {
                            return Err(self.unexpected(ch));
                        }
                        let end = if ch == b'{' {
                            Ending::BlockStart
                        } else {
                            Ending::Semicolon
                        };
                        return Ok(self.statement(words, end));
                    }
                    b'}' => {
                        if !words.is_empty() {
                            return Err(self.unexpected(ch));
                        }
                        return Ok(self.statement(words, Ending::BlockEnd));
                    }
                    b'#' => comment = true,
                    b'\\' => {
                        escaped = true;
                        last_space = false;
                    }
                    b'"' => {
                        start += 1;
                        d_quoted = true;
                        last_space = false;
                    }
                    b'\'' => {
                        start += 1;
                        s_quoted = true;
                        last_space = false;
                    }
                    b'$' => {
                        variable = true;
                        last_space = false;
                    }
                    _ => last_space = false,
                }
                continue;
            }

            if ch == b'{' && variable {
                continue;
            }
            variable = false;
            if ch == b'\\' {
                escaped = true;
                continue;
            }
            if ch == b'$' {
                variable = true;
                continue;
            }

            let found = if d_quoted {
                if ch == b'"' {
                    d_quoted = false;
                    need_space = true;
                    true
                } else {
                    false
                }
            } else if s_quoted {
                if ch == b'\'' {
                    s_quoted = false;
                    need_space = true;
                    true
                } else {
                    false
                }
            } else if is_space(ch) || ch == b';' || ch == b'{' {
                last_space = true;
                true
            } else {
                false
            };

            if found {
                words.push(Word {
                    value: unescape(&self.src[start..self.pos - 1]),
                    quoted: need_space,
                });
                match ch {
                    b';' => return Ok(self.statement(words, Ending::Semicolon)),
                    b'{' => return Ok(self.statement(words, Ending::BlockStart)),
                    _ => {}
                }
            }
        }
    }

    fn statement(&self, words: Vec<Word>, end: Ending) -> Statement {
        Statement {
            words,
            end,
            line: self.line,
        }
    }

    fn error(&self, message: String) -> LexError {
        LexError {
            message,
            line: self.line,
        }
    }

    fn unexpected(&self, ch: u8) -> LexError {
        self.error(format!("unexpected \"{}\"", char::from(ch)))
    }
}

/// Applies nginx's escapes to a word's raw bytes.
fn unescape(raw: &[u8]) -> String {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        if raw[i] == b'\\' {
            match raw.get(i + 1) {
                Some(&(b'"' | b'\'' | b'\\')) => i += 1,
                Some(&b't') => {
                    out.push(b'\t');
                    i += 2;
                    continue;
                }
                Some(&b'r') => {
                    out.push(b'\r');
                    i += 2;
                    continue;
                }
                Some(&b'n') => {
                    out.push(b'\n');
                    i += 2;
                    continue;
                }
                _ => {}
            }
        }
        out.push(raw[i]);
        i += 1;
    }
    // The input came from a `&str` or was converted lossily, and escapes only drop or
    // substitute ASCII bytes, so this never replaces anything; lossy keeps it panic-free.
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn statements(text: &str) -> Result<Vec<(Vec<String>, Ending)>, LexError> {
        let mut lexer = Lexer::new(text.as_bytes(), Source::File);
        let mut out = Vec::new();
        loop {
            let st = lexer.next_statement()?;
            let words = st.words.into_iter().map(|w| w.value).collect();
            let end = st.end;
            out.push((words, end));
            if end == Ending::Eof {
                return Ok(out);
            }
        }
    }

    fn words(text: &str) -> Vec<String> {
        statements(text).expect("lexes")[0].0.clone()
    }

    fn err(text: &str) -> (String, u32) {
        let e = statements(text).expect_err("must fail");
        (e.message, e.line)
    }

    #[test]
    fn simple_statements_and_blocks() {
        let got = statements("a b;\nc {\n}\n").expect("lexes");
        assert_eq!(got[0], (vec!["a".into(), "b".into()], Ending::Semicolon));
        assert_eq!(got[1], (vec!["c".into()], Ending::BlockStart));
        assert_eq!(got[2], (vec![], Ending::BlockEnd));
        assert_eq!(got[3], (vec![], Ending::Eof));
    }

    #[test]
    fn word_ends_at_semicolon_and_brace() {
        let got = statements("a b{}").expect("lexes");
        assert_eq!(got[0], (vec!["a".into(), "b".into()], Ending::BlockStart));
    }

    #[test]
    fn quotes_and_escapes() {
        assert_eq!(
            words(r#"a "x y" 'p q' "\"" '\'' "\\" "a\tb" "a\nb" "a\rb";"#),
            vec!["a", "x y", "p q", "\"", "'", "\\", "a\tb", "a\nb", "a\rb"]
        );
        // Other backslashes stay, as nginx leaves them for regexes.
        assert_eq!(words(r#"a "\d+" \.x;"#), vec!["a", r"\d+", r"\.x"]);
        // Escapes apply to unquoted words too, and a backslash protects a space.
        assert_eq!(words(r"a b\ c;"), vec!["a", r"b\ c"]);
        assert_eq!(words(r#"a \"x;"#), vec!["a", "\"x"]);
    }

    #[test]
    fn quoted_flag() {
        let mut lexer = Lexer::new(br#"a "" b;"#, Source::File);
        let st = lexer.next_statement().expect("lexes");
        assert!(!st.words[0].quoted);
        assert!(st.words[1].quoted);
        assert_eq!(st.words[1].value, "");
        assert!(!st.words[2].quoted);
    }

    #[test]
    fn comments() {
        let got = statements("# x;\na b; # c { }\n# }\nd;").expect("lexes");
        assert_eq!(got[0].0, vec!["a", "b"]);
        assert_eq!(got[1].0, vec!["d"]);
        // `#` inside a word is part of it.
        assert_eq!(words("a b#c;"), vec!["a", "b#c"]);
        assert_eq!(words("a \"#\";"), vec!["a", "#"]);
    }

    #[test]
    fn variables_and_braces() {
        assert_eq!(words("set $a ${b}c;"), vec!["set", "$a", "${b}c"]);
        // `}` does not end an unquoted word.
        assert_eq!(words("root a}b;"), vec!["root", "a}b"]);
        // An unquoted `{` that does not follow `$` starts a block.
        let got = statements("location ~ ^/a{2}$ {").expect("lexes");
        assert_eq!(
            got[0],
            (
                vec!["location".into(), "~".into(), "^/a".into()],
                Ending::BlockStart
            )
        );
        assert_eq!(
            words("location ~ \"^/a{2}$\" {"),
            vec!["location", "~", "^/a{2}$"]
        );
    }

    #[test]
    fn parenthesis_after_quote() {
        // The `)` may touch the closing quote and becomes a word of its own.
        assert_eq!(words("if ($a = \"b\") {"), vec!["if", "($a", "=", "b", ")"]);
    }

    #[test]
    fn errors_with_lines() {
        assert_eq!(err("a\n\"b\"c;"), ("unexpected \"c\"".into(), 2));
        assert_eq!(err("\n;"), ("unexpected \";\"".into(), 2));
        assert_eq!(err("{"), ("unexpected \"{\"".into(), 1));
        assert_eq!(err("a\n}"), ("unexpected \"}\"".into(), 2));
        assert_eq!(
            err("a b\n"),
            ("unexpected end of file, expecting \";\" or \"}\"".into(), 2)
        );
        assert_eq!(
            err("a \"b\n\n"),
            ("unexpected end of file, expecting \";\" or \"}\"".into(), 3)
        );
    }

    #[test]
    fn command_line_eof() {
        let mut lexer = Lexer::new(b"worker_processes 1", Source::CommandLine);
        let e = lexer.next_statement().expect_err("must fail");
        assert_eq!(e.message, "unexpected end of parameter, expecting \";\"");
    }

    #[test]
    fn too_long_word() {
        let long = format!("a \"{}\";", "x".repeat(MAX_WORD_LEN + 1));
        let (message, _) = err(&long);
        assert_eq!(
            message,
            "too long parameter, probably missing terminating \"\"\" character"
        );
        // As nginx: a quoted word and its closing quote must leave room in the buffer for
        // the character after them.
        let ok = format!("a \"{}\" b;", "q".repeat(MAX_WORD_LEN - 2));
        assert_eq!(words(&ok)[2], "b");
        let long = format!("a \"{}\" b;", "q".repeat(MAX_WORD_LEN - 1));
        assert_eq!(err(&long).0, "too long parameter \"qqqqqqqqqq...\" started");
        let long = format!("a {};", "y".repeat(MAX_WORD_LEN));
        assert_eq!(err(&long).0, "too long parameter \"yyyyyyyyyy...\" started");
        // Just under the limit is fine.
        let ok = format!("a {};", "z".repeat(MAX_WORD_LEN - 1));
        assert_eq!(words(&ok)[1].len(), MAX_WORD_LEN - 1);
    }
}
