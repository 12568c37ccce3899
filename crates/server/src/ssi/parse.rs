//! The SSI commands of a body, read as nginx's `ngx_http_ssi_parse` reads them: a command is
//! `<!--#name param="value" ... -->` (values in double or single quotes, a backslash keeping
//! the next byte with it), whitespace allowed between the parts. A command nginx cannot read
//! is dropped up to its `-->`, and stands for an error; one the body ends inside is dropped
//! with the rest of the body, as is a `<!--` that the body ends in.

/// The longest command name, and the longest parameter name (`NGX_HTTP_SSI_COMMAND_LEN`,
/// `NGX_HTTP_SSI_PARAM_LEN`).
const NAME_LEN: usize = 32;

/// A piece of a body.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Piece<'a> {
    /// Bytes that are not a command.
    Text(&'a [u8]),
    Command(Command),
    /// A command that could not be read, and what nginx logs of it.
    Error(String),
}

/// A command as written: its name, and its parameters in order, each value with the
/// backslashes it was written with.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Command {
    pub name: Vec<u8>,
    pub params: Vec<(Vec<u8>, Vec<u8>)>,
}

/// Where the reading of a command is.
#[derive(Clone, Copy)]
enum State {
    PreCommand,
    Command,
    PreParam,
    Param,
    PreEqual,
    PreValue,
    /// In a value quoted by the byte given.
    Value(u8),
    /// After a backslash in a value quoted by the byte given.
    Escaped(u8),
    PostParam,
    End0,
    End1,
    Error,
    ErrorEnd0,
    ErrorEnd1,
}

/// The pieces of `body`; parameter values are at most `value_len` bytes.
pub(super) fn parse(body: &[u8], value_len: usize) -> Vec<Piece<'_>> {
    let mut pieces = Vec::new();
    let mut text = 0;
    let mut at = 0;
    while let Some(lt) = body[at..].iter().position(|&b| b == b'<') {
        let tag = at + lt;
        let rest = &body[tag..];
        if rest.len() < 5 && b"<!--#".starts_with(rest) {
            // The body ends inside what may be a command's opening: nginx keeps those bytes
            // back for the next part of the body, which never comes.
            pieces.push(Piece::Text(&body[text..tag]));
            return non_empty(pieces);
        }
        if !rest.starts_with(b"<!--#") {
            at = tag + 1;
            continue;
        }
        pieces.push(Piece::Text(&body[text..tag]));
        match command(&body[tag + 5..], value_len) {
            Some((piece, used)) => {
                pieces.push(piece);
                text = tag + 5 + used;
                at = text;
            }
            // The body ends inside the command.
            None => return non_empty(pieces),
        }
    }
    pieces.push(Piece::Text(&body[text..]));
    non_empty(pieces)
}

fn non_empty(mut pieces: Vec<Piece<'_>>) -> Vec<Piece<'_>> {
    pieces.retain(|p| !matches!(p, Piece::Text(t) if t.is_empty()));
    pieces
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\r' | b'\n' | b'\t')
}

/// Reads one command from after its `<!--#`: the piece, and the bytes it took with its
/// `-->`; `None` when the input ends first.
fn command(input: &[u8], value_len: usize) -> Option<(Piece<'static>, usize)> {
    let mut state = State::PreCommand;
    let mut name = Vec::new();
    let mut params: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    let mut error = None;
    let name_str = |name: &[u8]| String::from_utf8_lossy(name).into_owned();
    for (i, &ch) in input.iter().enumerate() {
        state = match state {
            State::PreCommand if is_space(ch) => State::PreCommand,
            State::PreCommand => {
                name.push(ch);
                State::Command
            }
            State::Command if is_space(ch) => State::PreParam,
            State::Command if ch == b'-' => State::End0,
            State::Command if name.len() == NAME_LEN => {
                error = Some(format!(
                    "the \"{}{}...\" SSI command is too long",
                    name_str(&name),
                    ch as char
                ));
                State::Error
            }
            State::Command => {
                name.push(ch);
                State::Command
            }
            State::PreParam if is_space(ch) => State::PreParam,
            State::PreParam if ch == b'-' => State::End0,
            State::PreParam => {
                params.push((vec![ch], Vec::new()));
                State::Param
            }
            State::Param => {
                let key = &mut params.last_mut().expect("a parameter").0;
                if is_space(ch) {
                    State::PreEqual
                } else if ch == b'=' {
                    State::PreValue
                } else if ch == b'-' {
                    error = Some(format!(
                        "unexpected \"-\" symbol after \"{}\" parameter in \"{}\" SSI command",
                        name_str(key),
                        name_str(&name)
                    ));
                    State::ErrorEnd0
                } else if key.len() == NAME_LEN {
                    error = Some(format!(
                        "too long \"{}{}...\" parameter in \"{}\" SSI command",
                        name_str(key),
                        ch as char,
                        name_str(&name)
                    ));
                    State::Error
                } else {
                    key.push(ch);
                    State::Param
                }
            }
            State::PreEqual | State::PreValue if is_space(ch) => state,
            State::PreEqual if ch == b'=' => State::PreValue,
            State::PreValue if ch == b'"' || ch == b'\'' => State::Value(ch),
            State::PreEqual | State::PreValue => {
                let key = &params.last().expect("a parameter").0;
                error = Some(if matches!(state, State::PreEqual) {
                    format!(
                        "unexpected \"{}\" symbol after \"{}\" parameter in \"{}\" SSI command",
                        ch as char,
                        name_str(key),
                        name_str(&name)
                    )
                } else {
                    format!(
                        "unexpected \"{}\" symbol before value of \"{}\" parameter in \"{}\" \
                         SSI command",
                        ch as char,
                        name_str(key),
                        name_str(&name)
                    )
                });
                if ch == b'-' {
                    State::ErrorEnd0
                } else {
                    State::Error
                }
            }
            State::Value(quote) if ch == quote => State::PostParam,
            State::Value(quote) | State::Escaped(quote) => {
                let (key, value) = params.last_mut().expect("a parameter");
                if value.len() == value_len {
                    error = Some(format!(
                        "too long \"{}{}...\" value of \"{}\" parameter in \"{}\" SSI command",
                        name_str(value),
                        ch as char,
                        name_str(key),
                        name_str(&name)
                    ));
                    State::Error
                } else {
                    value.push(ch);
                    match state {
                        State::Value(_) if ch == b'\\' => State::Escaped(quote),
                        _ => State::Value(quote),
                    }
                }
            }
            State::PostParam if is_space(ch) => State::PreParam,
            State::PostParam if ch == b'-' => State::End0,
            State::PostParam => {
                let (key, value) = params.last().expect("a parameter");
                error = Some(format!(
                    "unexpected \"{}\" symbol after \"{}\" value of \"{}\" parameter in \"{}\" \
                     SSI command",
                    ch as char,
                    name_str(value),
                    name_str(key),
                    name_str(&name)
                ));
                State::Error
            }
            State::End0 if ch == b'-' => State::End1,
            State::End1 if ch == b'>' => {
                return Some((Piece::Command(Command { name, params }), i + 1));
            }
            State::End0 | State::End1 => {
                error = Some(format!(
                    "unexpected \"{}\" symbol in \"{}\" SSI command",
                    ch as char,
                    name_str(&name)
                ));
                State::Error
            }
            State::Error if ch == b'-' => State::ErrorEnd0,
            State::ErrorEnd0 if ch == b'-' => State::ErrorEnd1,
            State::ErrorEnd1 if ch == b'>' => {
                let why = error.take().unwrap_or_default();
                return Some((Piece::Error(why), i + 1));
            }
            State::Error | State::ErrorEnd0 | State::ErrorEnd1 => State::Error,
        };
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(name: &str, params: &[(&str, &str)]) -> Piece<'static> {
        Piece::Command(Command {
            name: name.as_bytes().to_vec(),
            params: params
                .iter()
                .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
                .collect(),
        })
    }

    #[test]
    fn commands_between_text() {
        let body = b"a<!--# echo var=\"x\" default='d\\'e' -->b<!--#endif-->c";
        assert_eq!(
            parse(body, 255),
            vec![
                Piece::Text(b"a"),
                cmd("echo", &[("var", "x"), ("default", "d\\'e")]),
                Piece::Text(b"b"),
                cmd("endif", &[]),
                Piece::Text(b"c"),
            ]
        );
    }

    #[test]
    fn what_is_not_a_command_is_text() {
        let body = b"<a><!-- comment --><!<!--x-->";
        assert_eq!(parse(body, 255), vec![Piece::Text(body)]);
    }

    #[test]
    fn an_unreadable_command_is_dropped_to_its_end() {
        let pieces = parse(b"a<!--# echo var=x -->b", 255);
        assert_eq!(pieces.len(), 3);
        assert!(
            matches!(&pieces[1], Piece::Error(e) if e.contains("before value of \"var\"")),
            "{pieces:?}"
        );
        assert_eq!(pieces[2], Piece::Text(b"b"));
    }

    #[test]
    fn a_body_ending_inside_a_command_loses_it() {
        assert_eq!(parse(b"abc<!-", 255), vec![Piece::Text(b"abc")]);
        assert_eq!(parse(b"abc<!--# echo", 255), vec![Piece::Text(b"abc")]);
        assert_eq!(parse(b"abc<", 255), vec![Piece::Text(b"abc")]);
    }

    #[test]
    fn values_and_names_have_bounds() {
        let pieces = parse(b"<!--# echo var=\"abcd\" -->", 3);
        assert!(matches!(&pieces[0], Piece::Error(e) if e.contains("too long \"abcd...\"")));
        let long = format!("<!--# {} -->", "e".repeat(33));
        let pieces = parse(long.as_bytes(), 255);
        assert!(matches!(&pieces[0], Piece::Error(e) if e.contains("is too long")));
    }
}
