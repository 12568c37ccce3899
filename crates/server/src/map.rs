//! The map module (nginx's `ngx_http_map_module`): `map $source $target { ... }` makes a
//! variable whose value is looked up from another's.
//!
//! Keys are matched as nginx does: exact strings (case-insensitively), then with `hostnames`
//! the wildcard names (`*.example.com` and `.example.com`, most specific first, then
//! `www.example.*`), then the `~` and `~*` regexes in the order written (their captures usable
//! in the value, and their named groups variables, set when the regex matches), else `default`. A value is computed when the variable is first used and kept
//! for the rest of the request, unless the map is `volatile`. `map_hash_max_size` and
//! `map_hash_bucket_size` size nginx's hash tables and mean nothing here.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use portcullis_config::{ConfigError, Directive};
use regex::bytes::Regex;

use crate::location::Captures;
use crate::module::{self, Load, Module, Slot};
use crate::request::{Handlers, Request, Response};
use crate::vars::{Names, Template, Var};
use crate::Level;

pub(crate) struct MapModule;

pub(crate) static MODULE: MapModule = MapModule;

impl Module for MapModule {
    fn name(&self) -> &'static str {
        "http_map_module"
    }

    /// Each `map` target is a variable; its value is the map's at the target's place, the
    /// last `map` of that name (a later map of the same name replaces an earlier one, as in
    /// nginx).
    fn declare(&self, http: &[Directive], names: &mut Names, me: usize) -> Result<(), ConfigError> {
        names.add_block_targets(me, http, "map", |d| {
            d.arg(1).strip_prefix('$').unwrap_or("")
        })?;
        // The named groups of the regexes are variables, as in nginx.
        for map in http.iter().filter(|d| d.name == "map") {
            for key in map.children() {
                if let Some(re) = key.name.strip_prefix('~') {
                    names.add_named_groups(re.strip_prefix('*').unwrap_or(re));
                }
            }
        }
        Ok(())
    }

    fn defaults(&self) -> Slot {
        Arc::new(Maps::default())
    }

    fn directive(
        &self,
        conf: &mut Slot,
        d: &Directive,
        cx: &mut Load<'_>,
    ) -> Result<(), ConfigError> {
        let map = Map::compile(d, cx.names)?;
        module::edit::<Maps>(conf).maps.push(Arc::new(map));
        Ok(())
    }

    /// Variables only: no phase handler.
    fn is_active(&self, _conf: &Slot) -> bool {
        false
    }

    fn handlers(&self) -> &'static (dyn std::any::Any + Send + Sync) {
        static HANDLERS: Handlers = Handlers {
            variable: Some(variable),
            empty_is_a_value: true,
            ..Handlers::NONE
        };
        &HANDLERS
    }
}

/// Appends the value of the map whose place `var` holds, computed once per request unless
/// the map is `volatile`.
fn variable(
    req: &Request<'_>,
    conf: &Slot,
    var: &Slot,
    out: &mut Vec<u8>,
    resp: Option<(&Response, u64)>,
) {
    let maps = module::get::<Maps>(conf);
    let i = *module::get::<usize>(var);
    // `set $target ...` gives the variable its value from then on, as nginx's set writes
    // the variable the map made.
    if let Some(map) = maps.maps.get(i) {
        if map
            .set_slot
            .is_some_and(|slot| req.set_value_into(slot, out))
        {
            return;
        }
    }
    let cache = req.var_ctx::<MapCache>();
    let mut lookup = |v: &Var, o: &mut Vec<u8>| req.var(v, o, resp);
    let mut set = |slot, value: &[u8]| req.set_var_while_reading(slot, value.to_vec());
    if let Err(Cycle(name)) = maps.value(i, &cache, out, &mut lookup, &mut set) {
        req.log(
            Level::Error,
            &format!("cycle while evaluating variable \"{name}\""),
        );
    }
}

/// Every `map` of the `http` block, in order: a target's variable holds its map's place.
#[derive(Default, Clone)]
pub(crate) struct Maps {
    maps: Vec<Arc<Map>>,
}

struct Map {
    /// The target's name, for the cycle message.
    name: String,
    /// The slot of a `set` of the same variable, which overrides the map once it ran.
    set_slot: Option<usize>,
    source: Template,
    hostnames: bool,
    volatile: bool,
    /// Lowercased keys.
    exact: HashMap<Vec<u8>, Template>,
    /// `*.example.com` and `.example.com` as ".example.com", longest first; `true` when the
    /// bare name matches too.
    leading: Vec<(Vec<u8>, bool, Template)>,
    /// `www.example.*` as "www.example.", longest first.
    trailing: Vec<(Vec<u8>, Template)>,
    regexes: Vec<RegexKey>,
    default: Option<Template>,
}

/// A `~` or `~*` key.
struct RegexKey {
    regex: Regex,
    value: Template,
    /// Each named group, with the slot of the variable it sets.
    named: Vec<(usize, usize)>,
}

impl Maps {
    /// Appends the value of map `i`, computing it with `lookup` unless `cache` has it; `set`
    /// gives the named groups of a regex that matched their values.
    fn value(
        &self,
        i: usize,
        cache: &MapCache,
        out: &mut Vec<u8>,
        lookup: &mut dyn FnMut(&Var, &mut Vec<u8>),
        set: &mut dyn FnMut(usize, &[u8]),
    ) -> Result<(), Cycle> {
        let Some(map) = self.maps.get(i) else {
            return Ok(());
        };
        {
            let mut values = cache.values.borrow_mut();
            if values.len() <= i {
                values.resize(i + 1, Value::Empty);
            }
            match &values[i] {
                Value::Done(v) => {
                    out.extend_from_slice(v);
                    return Ok(());
                }
                Value::Evaluating => return Err(Cycle(map.name.clone())),
                Value::Empty => values[i] = Value::Evaluating,
            }
        }
        let value = map.evaluate(lookup, set);
        out.extend_from_slice(&value);
        cache.values.borrow_mut()[i] = if map.volatile {
            Value::Empty
        } else {
            Value::Done(value)
        };
        Ok(())
    }
}

/// A map whose value needs itself: nginx's "cycle while evaluating variable".
#[derive(Debug)]
struct Cycle(String);

/// A request's computed map values.
#[derive(Default)]
struct MapCache {
    values: RefCell<Vec<Value>>,
}

#[derive(Clone)]
enum Value {
    Empty,
    Evaluating,
    Done(Vec<u8>),
}

impl Map {
    fn compile(d: &Directive, names: &Names) -> Result<Map, ConfigError> {
        let name = d
            .arg(1)
            .strip_prefix('$')
            .filter(|n| !n.is_empty())
            .ok_or_else(|| ConfigError::at(d, format!("invalid variable name \"{}\"", d.arg(1))))?;
        crate::vars::refuse_limit_rate(d, name)?;
        let mut map = Map {
            name: name.to_string(),
            set_slot: names.set_slot(name),
            source: Template::compile(d.arg(0), d, names)?,
            hostnames: false,
            volatile: false,
            exact: HashMap::new(),
            leading: Vec::new(),
            trailing: Vec::new(),
            regexes: Vec::new(),
            default: None,
        };
        // `hostnames` changes how every key reads, wherever it is written.
        map.hostnames = d
            .children()
            .iter()
            .any(|e| e.name == "hostnames" && e.args.is_empty());
        for e in d.children() {
            if e.args.is_empty() {
                // The loader allows only `hostnames` and `volatile` without a value.
                map.volatile |= e.name == "volatile";
                continue;
            }
            let value = Template::compile(e.arg(0), e, names)?;
            let key = e.name.as_str();
            if key == "default" {
                if map.default.is_some() {
                    return Err(ConfigError::at(e, "duplicate default map parameter"));
                }
                map.default = Some(value);
            } else if let Some(re) = key.strip_prefix('~') {
                let (re, caseless) = match re.strip_prefix('*') {
                    Some(rest) => (rest, true),
                    None => (re, false),
                };
                let regex = crate::location::bytes_regex(re, caseless)
                    .map_err(|x| ConfigError::at(e, crate::location::regex_error(re, &x)))?;
                let named = (regex.capture_names().enumerate())
                    .filter_map(|(group, n)| Some((group, names.set_slot(n?)?)))
                    .collect();
                map.regexes.push(RegexKey {
                    regex,
                    value,
                    named,
                });
            } else {
                let key = key.strip_prefix('\\').unwrap_or(key).to_ascii_lowercase();
                map.add_key(e, key, value)?;
            }
        }
        map.leading
            .sort_by_key(|(k, _, _)| std::cmp::Reverse(k.len()));
        map.trailing
            .sort_by_key(|(k, _)| std::cmp::Reverse(k.len()));
        Ok(map)
    }

    fn add_key(&mut self, e: &Directive, key: String, value: Template) -> Result<(), ConfigError> {
        let conflict = || ConfigError::at(e, format!("conflicting parameter \"{key}\""));
        if self.hostnames {
            if let Some(rest) = key.strip_prefix("*.") {
                self.leading
                    .push((format!(".{rest}").into_bytes(), false, value));
                return Ok(());
            }
            if key.starts_with('.') {
                self.leading.push((key.into_bytes(), true, value));
                return Ok(());
            }
            if let Some(rest) = key.strip_suffix(".*") {
                self.trailing.push((format!("{rest}.").into_bytes(), value));
                return Ok(());
            }
        }
        if self.exact.contains_key(key.as_bytes()) {
            return Err(conflict());
        }
        self.exact.insert(key.into_bytes(), value);
        Ok(())
    }

    fn evaluate(
        &self,
        lookup: &mut dyn FnMut(&Var, &mut Vec<u8>),
        set: &mut dyn FnMut(usize, &[u8]),
    ) -> Vec<u8> {
        let mut source = Vec::new();
        self.source.eval_into(&mut source, lookup);
        if self.hostnames && source.last() == Some(&b'.') {
            source.pop();
        }
        let mut out = Vec::new();
        match self.find(&source) {
            Found::Plain(t) => t.eval_into(&mut out, lookup),
            Found::Regex(key, caps) => {
                // As nginx, the named groups are set before the value is made, which may
                // use them.
                for &(group, slot) in &key.named {
                    set(slot, caps.get(&source, group));
                }
                key.value.eval_into(&mut out, &mut |v, o| match v {
                    Var::Capture(n) => o.extend_from_slice(caps.get(&source, *n)),
                    _ => lookup(v, o),
                })
            }
            Found::None => {}
        }
        out
    }

    fn find(&self, source: &[u8]) -> Found<'_> {
        let low = source.to_ascii_lowercase();
        // An empty value matches only a `''` key, or the default, as in nginx.
        if let Some(t) = self.exact.get(&low) {
            return Found::Plain(t);
        }
        if !source.is_empty() {
            for (suffix, bare, t) in &self.leading {
                let sub = low.len() > suffix.len() && low.ends_with(suffix);
                if sub || (*bare && low == suffix[1..]) {
                    return Found::Plain(t);
                }
            }
            for (prefix, t) in &self.trailing {
                if low.len() > prefix.len() && low.starts_with(prefix) {
                    return Found::Plain(t);
                }
            }
            for key in &self.regexes {
                if let Some(c) = key.regex.captures(source) {
                    return Found::Regex(key, Captures::from_match(&c));
                }
            }
        }
        match &self.default {
            Some(t) => Found::Plain(t),
            None => Found::None,
        }
    }
}

enum Found<'a> {
    Plain(&'a Template),
    Regex(&'a RegexKey, Captures),
    None,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn maps(body: &str) -> Result<Maps, ConfigError> {
        let text = format!("events {{}}\nhttp {{\nmap $http_x $out {{\n{body}\n}}\n}}\n");
        let dir = std::env::temp_dir();
        let loaded = portcullis_config::load_str(&text, &dir.join("m.conf"), &Default::default())
            .unwrap_or_else(|e| panic!("{e}"));
        let http = loaded.directives[1].children().to_vec();
        let mut names = crate::vars::Names::default();
        MODULE.declare(&http, &mut names, 0)?;
        let maps = http.iter().filter(|d| d.name == "map");
        let maps = maps.map(|d| Map::compile(d, &names).map(Arc::new));
        Ok(Maps {
            maps: maps.collect::<Result<_, _>>()?,
        })
    }

    /// The value of the map for source `x`; each variable other than a capture or one the map
    /// set reads as `x`.
    fn lookup(m: &Maps, x: &str) -> String {
        lookup_and_set(m, x).0
    }

    /// The value, and the variables the map set, by slot.
    fn lookup_and_set(m: &Maps, x: &str) -> (String, Vec<(usize, String)>) {
        let mut out = Vec::new();
        let cache = MapCache::default();
        let set = std::cell::RefCell::new(Vec::<(usize, String)>::new());
        let mut lookup = |v: &Var, o: &mut Vec<u8>| match v {
            Var::HttpHeader(_) => o.extend_from_slice(x.as_bytes()),
            Var::Set(slot) => {
                let set = set.borrow();
                let value = set.iter().rev().find(|(s, _)| s == slot);
                o.extend_from_slice(value.map_or("<unset>", |(_, v)| v.as_str()).as_bytes())
            }
            other => o.extend_from_slice(format!("<{other:?}>").as_bytes()),
        };
        let mut setter = |slot, value: &[u8]| {
            let value = String::from_utf8_lossy(value).into_owned();
            set.borrow_mut().push((slot, value))
        };
        m.value(0, &cache, &mut out, &mut lookup, &mut setter)
            .unwrap_or_else(|c| panic!("cycle {c:?}"));
        let set = set.into_inner();
        (String::from_utf8(out).unwrap_or_default(), set)
    }

    #[test]
    fn exact_then_regex_then_default() {
        let m = maps("default d;\nAbc exact;\n~^a(.)c$ re-$1;\n~*^X x;").unwrap();
        assert_eq!(lookup(&m, "abc"), "exact");
        assert_eq!(lookup(&m, "ABC"), "exact");
        assert_eq!(lookup(&m, "azc"), "re-z");
        assert_eq!(lookup(&m, "xyz"), "x");
        assert_eq!(lookup(&m, "q"), "d");
        assert_eq!(lookup(&m, ""), "d");
    }

    #[test]
    fn named_groups_are_variables_set_before_the_value() {
        let m = maps("default none;\n~^(?<sub>[a-z]+)\\.(?<tld>[a-z]+)$ $sub-site;").unwrap();
        let (value, set) = lookup_and_set(&m, "abc.test");
        assert_eq!(value, "abc-site");
        let set: Vec<&str> = set.iter().map(|(_, v)| v.as_str()).collect();
        assert_eq!(set, ["abc", "test"]);
        assert_eq!(lookup_and_set(&m, "no match"), ("none".into(), Vec::new()));
    }

    #[test]
    fn an_empty_key_matches_an_empty_value() {
        let m = maps("default upgrade;\n'' close;\n~. any;").unwrap();
        assert_eq!(lookup(&m, ""), "close");
        assert_eq!(lookup(&m, "websocket"), "any");
    }

    #[test]
    fn hostnames_forms() {
        let m = maps(
            "hostnames;\ndefault none;\n.example.com dot;\n*.a.example.com star;\nwww.example.* tail;",
        )
        .unwrap();
        assert_eq!(lookup(&m, "example.com"), "dot");
        assert_eq!(lookup(&m, "x.example.com."), "dot");
        assert_eq!(lookup(&m, "b.a.example.com"), "star");
        assert_eq!(lookup(&m, "www.example.org"), "tail");
        assert_eq!(lookup(&m, "example.org"), "none");
    }

    #[test]
    fn values_with_variables_and_no_default() {
        let m = maps("a $uri;").unwrap();
        assert_eq!(lookup(&m, "a"), "<Uri>");
        assert_eq!(lookup(&m, "b"), "");
    }

    #[test]
    fn a_map_that_needs_itself_is_a_cycle() {
        let m = maps("default $out;").unwrap();
        let cache = MapCache::default();
        let mut out = Vec::new();
        let mut inner = |v: &Var, o: &mut Vec<u8>| {
            if let Var::Module(v) = v {
                let i = *module::get::<usize>(&v.var);
                assert!(m
                    .value(i, &cache, o, &mut |_, _| {}, &mut |_, _| {})
                    .is_err());
            }
        };
        assert!(m
            .value(0, &cache, &mut out, &mut inner, &mut |_, _| {})
            .is_ok());
    }

    #[test]
    fn errors_name_the_place() {
        let e = |body: &str| maps(body).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e("~( x;").starts_with("pcre2_compile() failed: "));
        assert!(e("~( x;").ends_with("in \"(\" in /tmp/m.conf:4"));
        assert_eq!(
            e("a 1;\nA 2;"),
            "conflicting parameter \"a\" in /tmp/m.conf:5"
        );
        assert_eq!(
            e("a $nosuch;"),
            "unknown \"nosuch\" variable in /tmp/m.conf:4"
        );
    }
}
