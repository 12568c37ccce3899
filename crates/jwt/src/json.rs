//! A strict JSON parser (RFC 8259) for JOSE headers and JWT payloads.
//!
//! Its own rather than a general-purpose library's because JWT needs two things those do not
//! give: a duplicate member name is an error (RFC 7515 §5.2 allows a parser to refuse them,
//! and a verifier that reads the first `exp` while the issuer meant the second is an attack),
//! and numbers keep the text they were written with, which is how `$jwt_claim_*` shows them.

use std::fmt::Write as _;

/// How deep arrays and objects may nest; a token is at most 8 KiB, so this only stops a
/// crafted `[[[[...` from recursing far.
pub const MAX_DEPTH: usize = 32;

/// Objects up to this many members are checked for duplicate names pairwise; larger ones
/// sort their names first, so a crafted object cannot cost quadratic time.
const PAIRWISE_DUPLICATE_CHECK: usize = 16;

/// A parsed JSON value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Json {
    Null,
    Bool(bool),
    /// The number exactly as written in the document.
    Number(Box<str>),
    String(Box<str>),
    Array(Vec<Json>),
    /// Members in document order; names are unique.
    Object(Vec<(Box<str>, Json)>),
}

/// Why a document is not accepted JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JsonError {
    pub reason: &'static str,
    /// Byte offset in the document where the problem was found.
    pub offset: usize,
}

impl std::fmt::Display for JsonError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} at offset {}", self.reason, self.offset)
    }
}

impl std::error::Error for JsonError {}

impl Json {
    /// Parses a whole document: one value, optionally surrounded by whitespace.
    pub fn parse(input: &[u8]) -> Result<Json, JsonError> {
        let text = std::str::from_utf8(input).map_err(|e| JsonError {
            reason: "invalid UTF-8",
            offset: e.valid_up_to(),
        })?;
        let mut parser = Parser {
            text,
            bytes: text.as_bytes(),
            pos: 0,
        };
        parser.skip_whitespace();
        let value = parser.value(0)?;
        parser.skip_whitespace();
        if parser.pos != parser.bytes.len() {
            return Err(parser.error("trailing characters after the value"));
        }
        Ok(value)
    }

    /// The member `name` of an object; `None` for a missing member or a non-object.
    pub fn get(&self, name: &str) -> Option<&Json> {
        match self {
            Json::Object(members) => members
                .iter()
                .find(|(n, _)| n.as_ref() == name)
                .map(|(_, v)| v),
            _ => None,
        }
    }

    /// The text of a string value.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Json::String(s) => Some(s),
            _ => None,
        }
    }

    /// Appends the value as compact JSON (no whitespace), members in document order.
    pub fn write_compact(&self, out: &mut String) {
        match self {
            Json::Null => out.push_str("null"),
            Json::Bool(true) => out.push_str("true"),
            Json::Bool(false) => out.push_str("false"),
            Json::Number(n) => out.push_str(n),
            Json::String(s) => write_string(s, out),
            Json::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    item.write_compact(out);
                }
                out.push(']');
            }
            Json::Object(members) => {
                out.push('{');
                for (i, (name, value)) in members.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write_string(name, out);
                    out.push(':');
                    value.write_compact(out);
                }
                out.push('}');
            }
        }
    }
}

/// Writes `s` as a JSON string literal with the escapes RFC 8259 requires.
fn write_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

struct Parser<'a> {
    text: &'a str,
    bytes: &'a [u8],
    pos: usize,
}

impl Parser<'_> {
    fn error(&self, reason: &'static str) -> JsonError {
        JsonError {
            reason,
            offset: self.pos,
        }
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn skip_whitespace(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    fn value(&mut self, depth: usize) -> Result<Json, JsonError> {
        match self.peek() {
            Some(b'{') => self.object(depth + 1),
            Some(b'[') => self.array(depth + 1),
            Some(b'"') => Ok(Json::String(self.string()?)),
            Some(b't') => self.literal("true", Json::Bool(true)),
            Some(b'f') => self.literal("false", Json::Bool(false)),
            Some(b'n') => self.literal("null", Json::Null),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => Err(self.error("unexpected character")),
            None => Err(self.error("unexpected end of JSON")),
        }
    }

    fn literal(&mut self, word: &'static str, value: Json) -> Result<Json, JsonError> {
        if self.bytes[self.pos..].starts_with(word.as_bytes()) {
            self.pos += word.len();
            Ok(value)
        } else {
            Err(self.error("unexpected character"))
        }
    }

    fn object(&mut self, depth: usize) -> Result<Json, JsonError> {
        if depth > MAX_DEPTH {
            return Err(self.error("JSON nested too deeply"));
        }
        self.pos += 1;
        let mut members: Vec<(Box<str>, Json)> = Vec::new();
        self.skip_whitespace();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(Json::Object(members));
        }
        loop {
            self.skip_whitespace();
            if self.peek() != Some(b'"') {
                return Err(self.error("expected a member name"));
            }
            let name_at = self.pos;
            let name = self.string()?;
            self.skip_whitespace();
            if self.peek() != Some(b':') {
                return Err(self.error("expected ':'"));
            }
            self.pos += 1;
            self.skip_whitespace();
            let value = self.value(depth)?;
            if members.len() < PAIRWISE_DUPLICATE_CHECK && members.iter().any(|(n, _)| *n == name) {
                return Err(JsonError {
                    reason: "duplicate member name",
                    offset: name_at,
                });
            }
            members.push((name, value));
            self.skip_whitespace();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    break;
                }
                _ => return Err(self.error("expected ',' or '}'")),
            }
        }
        if members.len() > PAIRWISE_DUPLICATE_CHECK && has_duplicate_names(&members) {
            return Err(self.error("duplicate member name"));
        }
        Ok(Json::Object(members))
    }

    fn array(&mut self, depth: usize) -> Result<Json, JsonError> {
        if depth > MAX_DEPTH {
            return Err(self.error("JSON nested too deeply"));
        }
        self.pos += 1;
        let mut items = Vec::new();
        self.skip_whitespace();
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(Json::Array(items));
        }
        loop {
            self.skip_whitespace();
            items.push(self.value(depth)?);
            self.skip_whitespace();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    return Ok(Json::Array(items));
                }
                _ => return Err(self.error("expected ',' or ']'")),
            }
        }
    }

    fn number(&mut self) -> Result<Json, JsonError> {
        let start = self.pos;
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        match self.peek() {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => self.digits(),
            _ => return Err(self.error("invalid number")),
        }
        if self.peek() == Some(b'.') {
            self.pos += 1;
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return Err(self.error("invalid number"));
            }
            self.digits();
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.pos += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return Err(self.error("invalid number"));
            }
            self.digits();
        }
        Ok(Json::Number(self.text[start..self.pos].into()))
    }

    fn digits(&mut self) {
        while let Some(b'0'..=b'9') = self.peek() {
            self.pos += 1;
        }
    }

    /// Parses a string literal at `pos` (which holds `"`) and returns its decoded text.
    fn string(&mut self) -> Result<Box<str>, JsonError> {
        self.pos += 1;
        let start = self.pos;
        self.plain_run();
        if self.peek() == Some(b'"') {
            // No escapes, the common case: one allocation of the exact size.
            self.pos += 1;
            return Ok(self.text[start..self.pos - 1].into());
        }
        let mut out = String::from(&self.text[start..self.pos]);
        loop {
            match self.peek() {
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(out.into_boxed_str());
                }
                Some(b'\\') => {
                    self.pos += 1;
                    self.escape(&mut out)?;
                    let run_start = self.pos;
                    self.plain_run();
                    out.push_str(&self.text[run_start..self.pos]);
                }
                Some(_) => return Err(self.error("control character in string")),
                None => return Err(self.error("unterminated string")),
            }
        }
    }

    /// Skips string characters that need no decoding. The run stops only at ASCII bytes, so
    /// it ends on a character boundary.
    fn plain_run(&mut self) {
        while let Some(b) = self.peek() {
            if b == b'"' || b == b'\\' || b < 0x20 {
                break;
            }
            self.pos += 1;
        }
    }

    fn escape(&mut self, out: &mut String) -> Result<(), JsonError> {
        let c = match self.peek() {
            Some(b'"') => '"',
            Some(b'\\') => '\\',
            Some(b'/') => '/',
            Some(b'b') => '\u{8}',
            Some(b'f') => '\u{c}',
            Some(b'n') => '\n',
            Some(b'r') => '\r',
            Some(b't') => '\t',
            Some(b'u') => {
                self.pos += 1;
                let first = self.hex4()?;
                let code = if (0xd800..0xdc00).contains(&first) {
                    if !self.bytes[self.pos..].starts_with(b"\\u") {
                        return Err(self.error("unpaired surrogate in string"));
                    }
                    self.pos += 2;
                    let second = self.hex4()?;
                    if !(0xdc00..0xe000).contains(&second) {
                        return Err(self.error("unpaired surrogate in string"));
                    }
                    0x10000 + ((first - 0xd800) << 10) + (second - 0xdc00)
                } else {
                    first
                };
                let c = char::from_u32(code).ok_or(self.error("unpaired surrogate in string"))?;
                out.push(c);
                return Ok(());
            }
            _ => return Err(self.error("invalid escape in string")),
        };
        self.pos += 1;
        out.push(c);
        Ok(())
    }

    fn hex4(&mut self) -> Result<u32, JsonError> {
        let digits = self
            .bytes
            .get(self.pos..self.pos + 4)
            .ok_or(self.error("invalid \\u escape in string"))?;
        let mut code = 0;
        for &d in digits {
            let v = (d as char)
                .to_digit(16)
                .ok_or(self.error("invalid \\u escape in string"))?;
            code = code << 4 | v;
        }
        self.pos += 4;
        Ok(code)
    }
}

fn has_duplicate_names(members: &[(Box<str>, Json)]) -> bool {
    let mut names: Vec<&str> = members.iter().map(|(n, _)| n.as_ref()).collect();
    names.sort_unstable();
    names.windows(2).any(|w| w[0] == w[1])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Json, JsonError> {
        Json::parse(s.as_bytes())
    }

    #[test]
    fn parses_values_and_keeps_numbers_as_written() {
        let v = parse(r#" {"a": [1, -2.50, 3e+2, true, false, null], "b": {"c": "d\u00e9\n"}} "#)
            .unwrap();
        let mut out = String::new();
        v.write_compact(&mut out);
        assert_eq!(
            out,
            r#"{"a":[1,-2.50,3e+2,true,false,null],"b":{"c":"dé\n"}}"#
        );
        assert_eq!(
            v.get("b").and_then(|b| b.get("c")),
            Some(&Json::String("dé\n".into()))
        );
    }

    #[test]
    fn decodes_surrogate_pairs() {
        assert_eq!(parse(r#""\ud83d\ude00""#), Ok(Json::String("😀".into())));
        assert!(parse(r#""\ud83d""#).is_err());
        assert!(parse(r#""\ude00""#).is_err());
    }

    #[test]
    fn refuses_duplicate_names_small_and_large_objects() {
        assert_eq!(
            parse(r#"{"a":1,"a":2}"#).unwrap_err().reason,
            "duplicate member name"
        );
        let mut doc = String::from("{");
        for i in 0..40 {
            doc.push_str(&format!("\"k{i}\":{i},"));
        }
        doc.push_str("\"k3\":0}");
        assert_eq!(parse(&doc).unwrap_err().reason, "duplicate member name");
        doc.truncate(doc.len() - "\"k3\":0}".len());
        doc.push_str("\"z\":0}");
        assert!(parse(&doc).is_ok());
    }

    #[test]
    fn refuses_malformed_documents() {
        for bad in [
            "",
            "{",
            "{\"a\"}",
            "{\"a\":1,}",
            "[1,]",
            "01",
            "1.",
            "-",
            "1e",
            "tru",
            "\"a",
            "\"\\x\"",
            "\"\u{1}\"",
            "{} x",
            "{'a':1}",
            "[1 2]",
            "NaN",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} was accepted");
        }
        assert!(Json::parse(b"\"\xff\"").is_err());
    }

    #[test]
    fn limits_nesting_depth() {
        let deep = "[".repeat(MAX_DEPTH + 1) + &"]".repeat(MAX_DEPTH + 1);
        assert_eq!(parse(&deep).unwrap_err().reason, "JSON nested too deeply");
        let ok = "[".repeat(MAX_DEPTH) + &"]".repeat(MAX_DEPTH);
        assert!(parse(&ok).is_ok());
    }
}
