//! Location matching in nginx's order: an exact `=` match wins at once; otherwise the longest
//! prefix is remembered and its nested locations are searched; unless that prefix is `^~`,
//! the regexes of the level are tried in the order written and the first match wins; else the
//! longest prefix. This is `ngx_http_core_find_location`, level by level.

use regex::bytes::RegexBuilder;

/// The captures of the regex location that matched: `$1`..`$9` for alias and try_files.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Captures {
    /// Byte ranges into the URI; `None` for a group that did not take part.
    groups: Vec<Option<(usize, usize)>>,
}

impl Captures {
    /// The groups of a match, as byte ranges into its subject.
    pub fn from_match(c: &regex::bytes::Captures<'_>) -> Captures {
        Captures {
            groups: c.iter().map(|m| m.map(|m| (m.start(), m.end()))).collect(),
        }
    }

    /// How many groups PCRE says the match has (its return code): up to the last one that
    /// took part, the whole match counted.
    pub fn count(&self) -> usize {
        self.groups
            .iter()
            .rposition(Option::is_some)
            .map_or(0, |i| i + 1)
    }

    pub fn get<'u>(&self, uri: &'u [u8], n: usize) -> &'u [u8] {
        match self.groups.get(n) {
            Some(Some((s, e))) => &uri[*s..*e],
            _ => b"",
        }
    }
}

/// What a regex location's match leaves for `$1`..: nothing (not a regex match), its groups,
/// or the regex that takes them when one is read. Most regex locations' groups are never read
/// (a `rewrite` in the location matches a regex of its own), so a linear-time regex only tests
/// for a match, and takes its groups from the same URI if they are asked for; its match cannot
/// then fail. A backtracking one takes them at once: its search may fail, which is a 500.
#[derive(Default)]
pub enum Captured<'a> {
    #[default]
    None,
    Groups(Captures),
    Later(&'a regex::bytes::Regex),
}

impl Captured<'_> {
    /// The groups, taken from `uri`, the URI the location was matched against.
    pub fn take(&self, uri: &[u8]) -> Captures {
        match self {
            Captured::None => Captures::default(),
            Captured::Groups(c) => c.clone(),
            Captured::Later(re) => re
                .captures(uri)
                .map(|c| Captures::from_match(&c))
                .unwrap_or_default(),
        }
    }
}

/// `$1`.. of the last regex that matched: its groups, taken from the subject when first read
/// if the match left them for later ([`Captured::Later`]).
#[derive(Default)]
pub struct LazyCaptures<'a> {
    taken: std::cell::OnceCell<Captures>,
    left: Captured<'a>,
}

impl<'a> LazyCaptures<'a> {
    /// Replaces the captures with what a match left.
    pub fn set(&mut self, captured: Captured<'a>) {
        *self = match captured {
            Captured::Groups(c) => LazyCaptures {
                taken: c.into(),
                left: Captured::None,
            },
            left => LazyCaptures {
                taken: std::cell::OnceCell::new(),
                left,
            },
        };
    }

    /// The groups, taken from `subject`, the value the last match was made on, if they were
    /// left for later.
    pub fn get(&self, subject: &[u8]) -> &Captures {
        self.taken.get_or_init(|| self.left.take(subject))
    }
}

/// The named groups of `pattern`, which nginx makes variables; an invalid pattern has none
/// (it is reported where it is compiled).
pub(crate) fn named_groups(pattern: &str, out: &mut Vec<String>) {
    if !pattern.contains("(?") {
        return;
    }
    if let Ok(re) = LocationRegex::new(pattern, false) {
        out.extend(re.capture_names().flatten().map(str::to_string));
    }
}

/// A regex as nginx's PCRE runs one: on bytes, not UTF-8 text, so that `.` and `[^/]` match
/// every byte of a URI (`%FF` decodes to one that is not UTF-8: a location, `if` or `map`
/// regex must not miss it), and `\w`, `\d` and caseless matching are ASCII's. A pattern
/// that needs Unicode (`\p{L}`, a class with letters past ASCII) is compiled with it.
pub(crate) fn bytes_regex(
    pattern: &str,
    caseless: bool,
) -> Result<regex::bytes::Regex, regex::Error> {
    let build = |unicode| {
        RegexBuilder::new(pattern)
            .case_insensitive(caseless)
            .unicode(unicode)
            .build()
    };
    build(false).or_else(|_| build(true))
}

/// A location's regex. PCRE's look-around (`location ~ /\.(?!well-known)`, h5bp's rule for
/// hidden files) and backreferences are beyond the `regex` crate, which runs every other pattern in linear time;
/// a pattern that needs it is run by `fancy-regex` (backtracking, as PCRE), on URIs that are
/// UTF-8 (another matches no such location).
pub(crate) enum LocationRegex {
    Linear(regex::bytes::Regex),
    Backtracking(fancy_regex::Regex),
}

impl LocationRegex {
    /// The regex of `pattern`; the error is nginx's message.
    pub fn new(pattern: &str, caseless: bool) -> Result<LocationRegex, String> {
        match bytes_regex(pattern, caseless) {
            Ok(re) => Ok(LocationRegex::Linear(re)),
            Err(e) => {
                let fancy = fancy_regex::RegexBuilder::new(pattern)
                    .case_insensitive(caseless)
                    .build();
                match fancy {
                    Ok(re)
                        if regex_reason(&e).contains("look-around")
                            || regex_reason(&e).contains("backreferences") =>
                    {
                        Ok(LocationRegex::Backtracking(re))
                    }
                    _ => Err(regex_error(pattern, &e)),
                }
            }
        }
    }

    /// The names of the groups, by number (`None` for the whole match and unnamed ones).
    pub fn capture_names(&self) -> Box<dyn Iterator<Item = Option<&str>> + '_> {
        match self {
            LocationRegex::Linear(re) => Box::new(re.capture_names()),
            LocationRegex::Backtracking(re) => Box::new(re.capture_names()),
        }
    }

    /// The groups of the first match in `uri`, if any. `Err`: the backtracking engine could
    /// not decide (a URI that is not UTF-8, or its backtracking limit), which must not pass
    /// for a non-match: a `deny` in the location would be skipped.
    #[inline]
    pub fn captures(&self, uri: &[u8]) -> Result<Option<Captures>, RegexFailed> {
        match self {
            LocationRegex::Linear(re) => {
                if !re.is_match(uri) {
                    return Ok(None);
                }
                Ok(re.captures(uri).map(|c| Captures::from_match(&c)))
            }
            LocationRegex::Backtracking(re) => {
                let text = std::str::from_utf8(uri).map_err(|_| RegexFailed)?;
                let c = re.captures(text).map_err(|_| RegexFailed)?;
                Ok(c.map(|c| Captures {
                    groups: (0..c.len())
                        .map(|i| c.get(i).map(|m| (m.start(), m.end())))
                        .collect(),
                }))
            }
        }
    }

    /// Whether `uri` matches, and what the match leaves for `$1`.. ([`Captured`]). `Err`: the
    /// backtracking engine could not decide (a URI that is not UTF-8, or its backtracking
    /// limit), which must not pass for a non-match: a `deny` in the location would be skipped.
    #[inline]
    pub fn matched(&self, uri: &[u8]) -> Result<Option<Captured<'_>>, RegexFailed> {
        match self {
            LocationRegex::Linear(re) => Ok(re.is_match(uri).then_some(Captured::Later(re))),
            LocationRegex::Backtracking(_) => Ok(self.captures(uri)?.map(Captured::Groups)),
        }
    }
}

/// A location regex that could not be run on a URI (see [`LocationRegex::captures`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegexFailed;

/// A regex of the configuration that does not compile, in nginx's words.
pub(crate) fn regex_error(pattern: &str, e: &regex::Error) -> String {
    format!(
        "pcre2_compile() failed: {} in \"{pattern}\"",
        regex_reason(e)
    )
}

/// The one-line reason of a regex error (its display spans several lines with a caret).
pub(crate) fn regex_reason(e: &regex::Error) -> String {
    let text = e.to_string();
    text.lines()
        .rev()
        .find_map(|l| l.strip_prefix("error: "))
        .unwrap_or(text.lines().last().unwrap_or(""))
        .to_string()
}

pub struct Match<'a, T> {
    pub conf: &'a T,
    pub captures: Captured<'a>,
    /// The URI is the name of a location that proxies, less its final slash: nginx answers
    /// with a permanent redirect to the name.
    pub redirect: bool,
}

struct Prefix<T> {
    name: String,
    exact: bool,
    noregex: bool,
    /// A name ending with `/` of a location that passes requests to an upstream
    /// (`proxy_pass`): the name without its slash is redirected to it, as nginx does.
    auto_redirect: bool,
    conf: T,
    nested: LocationTree<T>,
}

struct RegexLoc<T> {
    re: LocationRegex,
    conf: T,
    nested: LocationTree<T>,
}

/// The locations of one level (a server, or a location's nested ones).
pub struct LocationTree<T> {
    prefixes: Vec<Prefix<T>>,
    regexes: Vec<RegexLoc<T>>,
    named: Vec<(String, T)>,
}

impl<T> Default for LocationTree<T> {
    fn default() -> Self {
        LocationTree {
            prefixes: Vec::new(),
            regexes: Vec::new(),
            named: Vec::new(),
        }
    }
}

enum Found {
    /// An exact match or a regex match: final.
    Final,
    /// The URI is an auto-redirect location's name less its slash: final, answered 301.
    Redirect,
    /// The longest prefix (possibly from a nested level): a regex may still win.
    Prefix,
    None,
}

impl<T> LocationTree<T> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a location; `modifier` is "", "=", "^~", "~" or "~*". `proxies`: its requests go
    /// to an upstream (see [`Match::redirect`]). An error is nginx's message.
    pub fn add(
        &mut self,
        modifier: &str,
        name: &str,
        conf: T,
        nested: LocationTree<T>,
        proxies: bool,
    ) -> Result<(), String> {
        if let Some(n) = name.strip_prefix('@').filter(|_| modifier.is_empty()) {
            if self.named.iter().any(|(x, _)| x[1..] == *n) {
                return Err(format!("duplicate location \"{name}\""));
            }
            self.named.push((name.to_string(), conf));
            return Ok(());
        }
        match modifier {
            "~" | "~*" => {
                let re = LocationRegex::new(name, modifier == "~*")?;
                self.regexes.push(RegexLoc { re, conf, nested });
            }
            "" | "=" | "^~" => {
                let exact = modifier == "=";
                if self
                    .prefixes
                    .iter()
                    .any(|p| p.name == name && p.exact == exact)
                {
                    return Err(format!("duplicate location \"{name}\""));
                }
                self.prefixes.push(Prefix {
                    name: name.to_string(),
                    exact,
                    noregex: modifier == "^~",
                    auto_redirect: proxies && name.ends_with('/'),
                    conf,
                    nested,
                });
            }
            _ => return Err(format!("invalid location modifier \"{modifier}\"")),
        }
        Ok(())
    }

    pub fn named(&self, name: &str) -> Option<&T> {
        self.named.iter().find(|(n, _)| n == name).map(|(_, c)| c)
    }

    /// Finds the location for `uri` (already normalised).
    pub fn find(&self, uri: &[u8]) -> Result<Option<Match<'_, T>>, RegexFailed> {
        let mut best = None;
        let mut captures = Captured::None;
        let found = self.search(uri, &mut best, &mut captures)?;
        let redirect = matches!(found, Found::Redirect);
        Ok(match found {
            Found::None => None,
            Found::Final | Found::Prefix | Found::Redirect => best.map(|conf| Match {
                conf,
                captures,
                redirect,
            }),
        })
    }

    fn search<'a>(
        &'a self,
        uri: &[u8],
        best: &mut Option<&'a T>,
        caps: &mut Captured<'a>,
    ) -> Result<Found, RegexFailed> {
        let mut found = Found::None;
        let mut noregex = false;
        if let Some(p) = self
            .prefixes
            .iter()
            .find(|p| p.exact && p.name.as_bytes() == uri)
        {
            *best = Some(&p.conf);
            return Ok(Found::Final);
        }
        // nginx's static tree stops at a name one slash longer than the URI, unless a prefix
        // is the URI itself; the regexes are not tried.
        let redirect = self.prefixes.iter().find(|p| {
            p.auto_redirect && p.name.len() == uri.len() + 1 && p.name.as_bytes().starts_with(uri)
        });
        if let Some(p) = redirect {
            if !self
                .prefixes
                .iter()
                .any(|q| !q.exact && q.name.as_bytes() == uri)
            {
                *best = Some(&p.conf);
                return Ok(Found::Redirect);
            }
        }
        let longest = self
            .prefixes
            .iter()
            .filter(|p| !p.exact && uri.starts_with(p.name.as_bytes()))
            .max_by_key(|p| p.name.len());
        if let Some(p) = longest {
            *best = Some(&p.conf);
            noregex = p.noregex;
            found = Found::Prefix;
            match p.nested.search(uri, best, caps)? {
                found @ (Found::Final | Found::Redirect) => return Ok(found),
                Found::Prefix | Found::None => {}
            }
        }
        if !noregex {
            for r in &self.regexes {
                if let Some(c) = r.re.matched(uri)? {
                    *best = Some(&r.conf);
                    *caps = c;
                    r.nested.search(uri, best, caps)?;
                    return Ok(Found::Final);
                }
            }
        }
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(locs: &[(&str, &str)]) -> LocationTree<String> {
        let mut t = LocationTree::new();
        for (m, n) in locs {
            t.add(m, n, format!("{m}{n}"), LocationTree::new(), false)
                .unwrap();
        }
        t
    }

    fn find(t: &LocationTree<String>, uri: &str) -> Option<String> {
        t.find(uri.as_bytes()).unwrap().map(|m| m.conf.clone())
    }

    #[test]
    fn regexes_match_bytes_as_pcre_does() {
        let re = |p: &str, caseless| bytes_regex(p, caseless).expect(p);
        // `.` and a negated class match a byte that is not UTF-8.
        assert!(re(r"^/priv/.*\.txt$", false).is_match(b"/priv/\xff.txt"));
        assert!(re(r"^/priv/[^/]+$", false).is_match(b"/priv/a\x80b"));
        // A literal past ASCII is its UTF-8 bytes; caseless matching is ASCII's.
        assert!(re("^/caf\u{e9}$", false).is_match("/caf\u{e9}".as_bytes()));
        assert!(re("^/ABC$", true).is_match(b"/abc"));
        assert!(!re(r"^\w$", false).is_match("\u{e9}".as_bytes()));
        // What needs Unicode still compiles, with it.
        assert!(re(r"^\p{L}+$", false).is_match("\u{e9}t\u{e9}".as_bytes()));
    }

    #[test]
    fn look_around_runs_and_fails_closed() {
        let t = tree(&[("~", r"/\.(?!well-known)"), ("", "/")]);
        assert_eq!(find(&t, "/.env").as_deref(), Some(r"~/\.(?!well-known)"));
        assert_eq!(find(&t, "/.well-known/x").as_deref(), Some("/"));
        // A URI the backtracking engine cannot read is no non-match.
        assert_eq!(t.find(b"/.env\xff").err(), Some(RegexFailed));
    }

    #[test]
    fn a_proxied_name_without_its_slash_redirects_before_any_regex() {
        let mut t = tree(&[("~", "auto$"), ("", "/")]);
        t.add(
            "",
            "/auto/",
            "/auto/".to_string(),
            LocationTree::new(),
            true,
        )
        .unwrap();
        let m = t.find(b"/auto").unwrap().expect("found");
        assert!(m.redirect && m.conf == "/auto/");
        assert!(!t.find(b"/auto/x").unwrap().expect("found").redirect);
        assert_eq!(find(&t, "/xauto").as_deref(), Some("~auto$"));
        t.add("", "/auto", "/auto".to_string(), LocationTree::new(), false)
            .unwrap();
        let m = t.find(b"/auto").unwrap().expect("found");
        assert!(!m.redirect, "a prefix that is the URI itself wins");
    }

    #[test]
    fn nginx_documentation_example() {
        // The example from nginx's documentation of "location".
        let t = tree(&[
            ("=", "/"),
            ("", "/"),
            ("", "/documents/"),
            ("^~", "/images/"),
            ("~*", "\\.(gif|jpg|jpeg)$"),
        ]);
        assert_eq!(find(&t, "/").as_deref(), Some("=/"));
        assert_eq!(find(&t, "/index.html").as_deref(), Some("/"));
        assert_eq!(
            find(&t, "/documents/document.html").as_deref(),
            Some("/documents/")
        );
        assert_eq!(find(&t, "/images/1.gif").as_deref(), Some("^~/images/"));
        assert_eq!(
            find(&t, "/documents/1.jpg").as_deref(),
            Some("~*\\.(gif|jpg|jpeg)$")
        );
        assert_eq!(
            find(&t, "/documents/1.JPG").as_deref(),
            Some("~*\\.(gif|jpg|jpeg)$")
        );
    }

    #[test]
    fn regexes_in_order_and_case() {
        let t = tree(&[("~", "^/a"), ("~", "^/ab"), ("", "/abc")]);
        assert_eq!(find(&t, "/abc").as_deref(), Some("~^/a"));
        assert_eq!(find(&t, "/Abc"), None);
        assert_eq!(find(&t, "/x"), None);
    }

    #[test]
    fn nested_locations_and_captures() {
        let mut inner = LocationTree::new();
        inner
            .add(
                "~",
                "\\.txt$",
                "txt".to_string(),
                LocationTree::new(),
                false,
            )
            .unwrap();
        inner
            .add("", "/a/b/", "ab".to_string(), LocationTree::new(), false)
            .unwrap();
        let mut t = LocationTree::new();
        t.add("", "/a/", "a".to_string(), inner, false).unwrap();
        t.add(
            "~",
            "^/a/(.*)\\.bin$",
            "bin".to_string(),
            LocationTree::new(),
            false,
        )
        .unwrap();
        assert_eq!(find(&t, "/a/x.txt").as_deref(), Some("txt"));
        assert_eq!(find(&t, "/a/b/c").as_deref(), Some("ab"));
        let m = t.find(b"/a/q/r.bin").unwrap().unwrap();
        assert_eq!(m.conf, "bin");
        // A linear regex leaves its groups to be taken when read.
        assert!(matches!(m.captures, Captured::Later(_)));
        assert_eq!(m.captures.take(b"/a/q/r.bin").get(b"/a/q/r.bin", 1), b"q/r");
        assert_eq!(find(&t, "/a/zzz").as_deref(), Some("a"));
    }

    #[test]
    fn named_and_duplicates() {
        let mut t = tree(&[("", "@fallback"), ("", "/x")]);
        assert_eq!(t.named("@fallback").map(String::as_str), Some("@fallback"));
        assert_eq!(find(&t, "@fallback"), None);
        assert!(t
            .add("", "/x", String::new(), LocationTree::new(), false)
            .is_err());
        assert!(t
            .add("=", "/x", String::new(), LocationTree::new(), false)
            .is_ok());
        assert!(t
            .add("~", "(", String::new(), LocationTree::new(), false)
            .is_err());
    }
}
