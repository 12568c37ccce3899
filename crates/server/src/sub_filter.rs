//! `ngx_http_sub_module`: `sub_filter match replacement` replaces text in a response's
//! body on its way out, whoever made the response (a file, `return`, an upstream), when its
//! type is one of `sub_filter_types` (`text/html` by default, `*` for all): the match is
//! found whatever its case, and both may hold variables. With `sub_filter_once on` (the
//! default) each match is replaced once, with `off` everywhere. The response loses its
//! length, and its `Last-Modified` and `ETag` unless `sub_filter_last_modified on` (then
//! the `ETag` is weak). A match that a piece of the body ends in the middle of is found
//! when the next piece comes. Where several matches begin at the same place, the one
//! configured first is replaced, as nginx does. A body still compressed (an upstream's gzip) is not looked into, as nginx
//! does not: the matches are not found in it.

use std::io;
use std::sync::Arc;

use bytes::BytesMut;
use portcullis_config::{ConfigError, Directive};

use crate::encode::{Coder, Encode, Etag, HeadEdit, Outgoing, Stage};
use crate::module::{self, Load, Module, Slot, TypeList};
use crate::request::{Handlers, Request};
use crate::vars::Template;

pub(crate) struct SubFilterModule;

pub(crate) static MODULE: SubFilterModule = SubFilterModule;

#[derive(Clone)]
struct Conf {
    /// The matches and their replacements.
    pairs: Arc<Vec<(Template, Template)>>,
    types: TypeList,
    once: bool,
    last_modified: bool,
}

impl Module for SubFilterModule {
    fn name(&self) -> &'static str {
        "http_sub_module"
    }

    fn defaults(&self) -> Slot {
        Arc::new(Conf {
            pairs: Arc::default(),
            types: TypeList::new(&["text/html"]),
            once: true,
            last_modified: false,
        })
    }

    fn directive(
        &self,
        conf: &mut Slot,
        d: &Directive,
        cx: &mut Load<'_>,
    ) -> Result<(), ConfigError> {
        let c = module::edit::<Conf>(conf);
        match d.name.as_str() {
            "sub_filter" => {
                let mut pairs = if cx.first {
                    Vec::new()
                } else {
                    c.pairs.as_ref().clone()
                };
                if d.arg(0).is_empty() {
                    return Err(ConfigError::at(d, "empty search pattern"));
                }
                let m = Template::compile(d.arg(0), d, cx.names)?;
                let r = Template::compile(d.arg(1), d, cx.names)?;
                pairs.push((m, r));
                c.pairs = Arc::new(pairs);
            }
            "sub_filter_once" => c.once = d.arg(0) == "on",
            "sub_filter_last_modified" => c.last_modified = d.arg(0) == "on",
            _ => c.types.add(d, cx.first),
        }
        Ok(())
    }

    fn is_active(&self, conf: &Slot) -> bool {
        !module::get::<Conf>(conf).pairs.is_empty()
    }

    fn handlers(&self) -> &'static (dyn std::any::Any + Send + Sync) {
        static HANDLERS: Handlers = Handlers {
            encode: Some(encode),
            ..Handlers::NONE
        };
        &HANDLERS
    }
}

fn encode(req: &Request<'_>, conf: &Slot, out: &Outgoing<'_>) -> Encode {
    let c = module::get::<Conf>(conf);
    let typed = out.media_type().is_some_and(|t| c.types.matches(&t));
    if c.pairs.is_empty() || out.content_length() == Some(0) || !typed {
        return Encode::default();
    }
    let pairs: Vec<(Vec<u8>, Vec<u8>)> = c
        .pairs
        .iter()
        .map(|(m, r)| (req.eval(m).to_ascii_lowercase(), req.eval(r)))
        .filter(|(m, _)| !m.is_empty())
        .collect();
    // Nothing to look for: the response goes as it is, length and validators kept.
    if pairs.is_empty() {
        return Encode::default();
    }
    Encode {
        vary: false,
        coder: Some(Box::new(Sub {
            used: vec![false; pairs.len()],
            pairs,
            once: c.once,
            last_modified: c.last_modified,
            carry: Vec::new(),
        })),
    }
}

/// The replacement of matches, as a body filter.
struct Sub {
    /// Lowercase matches and their replacements.
    pairs: Vec<(Vec<u8>, Vec<u8>)>,
    /// With `once`: the matches already replaced.
    used: Vec<bool>,
    once: bool,
    last_modified: bool,
    /// The end of the last piece, which may be the start of a match.
    carry: Vec<u8>,
}

/// What is found at one place of the body.
enum Found {
    /// Match `k` begins here.
    Match(usize),
    /// A match may begin here: more of the body must come to tell.
    Maybe,
    Nothing,
}

impl Sub {
    /// The first match, in the configuration's order, that begins at `i`; a match before
    /// it in that order that the data ends in the middle of must be waited for.
    fn find_at(&self, data: &[u8], i: usize, last: bool) -> Found {
        let rest = &data[i..];
        for (k, (m, _)) in self.pairs.iter().enumerate() {
            if self.once && self.used[k] {
                continue;
            }
            if rest.len() >= m.len() {
                if rest[..m.len()].eq_ignore_ascii_case(m) {
                    return Found::Match(k);
                }
            } else if !last && rest.eq_ignore_ascii_case(&m[..rest.len()]) {
                return Found::Maybe;
            }
        }
        Found::Nothing
    }

    fn run(&mut self, input: &[u8], out: &mut BytesMut, last: bool) {
        let mut data = std::mem::take(&mut self.carry);
        data.extend_from_slice(input);
        let (mut i, mut start) = (0, 0);
        while i < data.len() {
            if self.once && self.used.iter().all(|&u| u) {
                break;
            }
            match self.find_at(&data, i, last) {
                Found::Match(k) => {
                    out.extend_from_slice(&data[start..i]);
                    out.extend_from_slice(&self.pairs[k].1);
                    i += self.pairs[k].0.len();
                    start = i;
                    if self.once {
                        self.used[k] = true;
                    }
                }
                Found::Maybe => {
                    out.extend_from_slice(&data[start..i]);
                    self.carry = data.split_off(i);
                    return;
                }
                Found::Nothing => i += 1,
            }
        }
        out.extend_from_slice(&data[start..]);
    }
}

impl Coder for Sub {
    fn code(&mut self, input: &[u8], out: &mut BytesMut) -> io::Result<()> {
        self.run(input, out, false);
        Ok(())
    }

    fn finish(&mut self, out: &mut BytesMut) -> io::Result<()> {
        self.run(&[], out, true);
        Ok(())
    }

    fn head(&self) -> HeadEdit {
        HeadEdit {
            keep_length: false,
            content_encoding: None,
            accept_ranges: false,
            etag: if self.last_modified {
                Etag::Weak
            } else {
                Etag::Remove
            },
            last_modified: !self.last_modified,
        }
    }

    fn stage(&self) -> Stage {
        Stage::Rewrite
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sub(pairs: &[(&str, &str)], once: bool) -> Sub {
        Sub {
            pairs: pairs
                .iter()
                .map(|(m, r)| (m.to_ascii_lowercase().into_bytes(), r.as_bytes().to_vec()))
                .collect(),
            used: vec![false; pairs.len()],
            once,
            last_modified: false,
            carry: Vec::new(),
        }
    }

    fn through(s: &mut Sub, pieces: &[&str]) -> String {
        let mut out = BytesMut::new();
        for p in pieces {
            s.code(p.as_bytes(), &mut out).unwrap();
        }
        s.finish(&mut out).unwrap();
        String::from_utf8(out.to_vec()).unwrap()
    }

    #[test]
    fn matches_across_pieces_in_any_case() {
        let body = "<a href=\"http://INTERNAL/x\">http://internal/y</a> http://inter";
        for cut in 0..body.len() {
            let (a, b) = body.split_at(cut);
            let all = through(
                &mut sub(&[("http://internal/", "https://ex/")], false),
                &[a, b],
            );
            assert_eq!(
                all, "<a href=\"https://ex/x\">https://ex/y</a> http://inter",
                "cut at {cut}"
            );
            let once = through(
                &mut sub(&[("http://internal/", "https://ex/")], true),
                &[a, b],
            );
            assert_eq!(
                once,
                "<a href=\"https://ex/x\">http://internal/y</a> http://inter"
            );
        }
    }

    #[test]
    fn several_matches_each_once_the_first_configured_first() {
        let mut s = sub(&[("abc", "2"), ("ab", "1"), ("x", "3")], true);
        assert_eq!(through(&mut s, &["abcabx", "x"]), "213x");
        let mut s = sub(&[("ab", "1"), ("abc", "2")], false);
        assert_eq!(
            through(&mut s, &["abcab ab abc xa", "bcd"]),
            "1c1 1 1c x1cd"
        );
    }
}
