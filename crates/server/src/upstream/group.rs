//! The `upstream` blocks of a configuration, as the modules that pass requests to them
//! (`proxy_pass`, `fastcgi_pass`) and the health checks name them: the balancer and peer
//! state of `crates/proxy`, with the server's compiled `hash` key.
//!
//! A group in a `zone` is live: the API may change its servers without a reload (NGINX
//! Plus's), each change a new version of the group that requests begin with from then on.
//! What the API did is kept by the next configuration while the block's own `server` lines
//! stay as they were (the block's text wins once it is edited), and across restarts by the
//! group's `state` file, which holds its servers as `server` lines and is written again
//! before each change is seen.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use arc_swap::ArcSwap;
use portcullis_config::{ConfigError, Directive};
use portcullis_proxy::upstream::{Change, ChangeError, KeyKind, Upstream};

use crate::vars::Template;

/// The upstream groups of a configuration, by name.
pub(crate) type Groups = HashMap<String, Group>;

/// An upstream group with what the server adds to it: its `hash` key compiled.
#[derive(Clone)]
pub(crate) struct Group {
    source: Source,
    /// The key of `hash $key`, evaluated per request.
    pub key: Option<Arc<Template>>,
}

#[derive(Clone)]
enum Source {
    Fixed(Arc<Upstream>),
    Live(Arc<Live>),
}

impl Group {
    /// A group no API can change (the one nginx makes for `proxy_pass http://host:port`).
    pub(crate) fn fixed(upstream: Upstream) -> Group {
        Group {
            source: Source::Fixed(Arc::new(upstream)),
            key: None,
        }
    }

    /// The group as a request begins with it now.
    pub(crate) fn upstream(&self) -> Arc<Upstream> {
        match &self.source {
            Source::Fixed(u) => u.clone(),
            Source::Live(l) => l.current(),
        }
    }

    /// The group as a request begins with it now, and its `hash` key.
    pub(crate) fn into_parts(self) -> (Arc<Upstream>, Option<Arc<Template>>) {
        let upstream = match self.source {
            Source::Fixed(u) => u,
            Source::Live(l) => l.current(),
        };
        (upstream, self.key)
    }

    /// The group the API may change: one in a `zone`.
    pub(crate) fn live(&self) -> Option<&Arc<Live>> {
        match &self.source {
            Source::Fixed(_) => None,
            Source::Live(l) => Some(l),
        }
    }

    /// Compiles an `upstream` block; a `state` file's path resolves against `prefix`.
    pub(crate) fn compile(
        d: &Directive,
        names: &crate::vars::Names,
        prefix: &Path,
    ) -> Result<Group, ConfigError> {
        let state = d.children().iter().find(|c| c.name == "state");
        let state_file = state.map(|s| prefix.join(s.arg(0)));
        let upstream = match (state, &state_file) {
            (Some(at), Some(path)) => Upstream::compile_with_state(
                d,
                &read_state(path).map_err(|e| match e {
                    Read::Io(message) => ConfigError::at(at, message),
                    Read::Config(e) => e,
                })?,
            )?,
            _ => Upstream::compile(d)?,
        };
        let key = match upstream.key_kind() {
            KeyKind::Hash(text) => {
                // The error names the `hash` line when the key's variables are wrong.
                let at = d.children().iter().find(|c| c.name == "hash").unwrap_or(d);
                Some(Arc::new(Template::compile(text, at, names)?))
            }
            _ => None,
        };
        let source = match upstream.zone() {
            None => Source::Fixed(Arc::new(upstream)),
            Some(_) => Source::Live(Live::new(upstream, servers_text(d), state_file)),
        };
        Ok(Group { source, key })
    }
}

/// A group in a `zone`: its current version, which the API replaces.
pub(crate) struct Live {
    current: ArcSwap<Upstream>,
    /// One change at a time: each is made from the one before.
    edit: Mutex<()>,
    /// The block's `server` lines (and `state` file) as written: a reload keeps what the API
    /// did while they stay the same.
    configured: String,
    state_file: Option<PathBuf>,
    /// The API has changed the group.
    changed: AtomicBool,
    /// How many `mandatory` health checks watch the group: a server the API adds starts
    /// unhealthy to each until it passes.
    mandatory: AtomicU32,
}

/// Why the API could not change a group.
#[derive(Debug)]
pub(crate) enum LiveError<E> {
    /// The change could not be made of the group as it is (the caller's reason).
    Make(E),
    Change(ChangeError),
    /// The state file could not be written: nothing changed.
    State(String),
}

/// A change made: the group as it left it, the IDs of the servers it added or changed, and
/// the change.
pub(crate) struct Changed {
    pub upstream: Arc<Upstream>,
    pub ids: Vec<u32>,
    pub change: Change,
}

/// Live groups of the configurations running, which the next one takes its groups from.
static RUNNING: Mutex<Vec<Weak<Live>>> = Mutex::new(Vec::new());

impl Live {
    /// The live group of `upstream`, with the servers the API gave the same group of the
    /// running configuration when its block is unchanged.
    fn new(upstream: Upstream, configured: String, state_file: Option<PathBuf>) -> Arc<Live> {
        let mut running = RUNNING.lock().unwrap_or_else(PoisonError::into_inner);
        running.retain(|l| l.strong_count() > 0);
        // The newest first: a configuration still finishing requests is older than the
        // one that replaced it.
        let kept = (running.iter().rev().filter_map(Weak::upgrade)).find(|l| {
            let old = l.current();
            l.changed.load(Ordering::Relaxed)
                && l.configured == configured
                && old.name() == upstream.name()
                && old.zone() == upstream.zone()
        });
        let (upstream, changed) = match kept {
            Some(old) => (upstream.with_servers_of(&old.current()), true),
            None => (upstream, false),
        };
        let live = Arc::new(Live {
            current: ArcSwap::from_pointee(upstream),
            edit: Mutex::new(()),
            configured,
            state_file,
            changed: AtomicBool::new(changed),
            mandatory: AtomicU32::new(0),
        });
        running.push(Arc::downgrade(&live));
        live
    }

    /// The group now.
    pub(crate) fn current(&self) -> Arc<Upstream> {
        self.current.load_full()
    }

    /// A `mandatory` health check watches the group.
    pub(crate) fn add_mandatory_check(&self) {
        self.mandatory.fetch_add(1, Ordering::Relaxed);
    }

    /// Makes the change `make` makes of the group as it is, one change at a time: written to
    /// the state file first, then seen by the requests that begin from now on.
    pub(crate) fn change<E>(
        &self,
        make: impl FnOnce(&Upstream) -> Result<Change, E>,
    ) -> Result<Changed, LiveError<E>> {
        let _one = self.edit.lock().unwrap_or_else(PoisonError::into_inner);
        let old = self.current();
        let change = make(&old).map_err(LiveError::Make)?;
        let (new, ids) = old.changed(&change).map_err(LiveError::Change)?;
        if let Some(path) = &self.state_file {
            write_state(path, &new.server_lines()).map_err(LiveError::State)?;
        }
        // A server added, or moved to another address, is unhealthy to each mandatory check
        // until its first pass there.
        for peer in ids.iter().filter_map(|id| new.by_id(*id).ok()) {
            if old.by_id(peer.id()).is_ok_and(|o| o.addr == peer.addr) {
                continue;
            }
            for _ in 0..self.mandatory.load(Ordering::Relaxed) {
                peer.check_changed(false);
            }
        }
        let new = Arc::new(new);
        self.current.store(new.clone());
        self.changed.store(true, Ordering::Relaxed);
        Ok(Changed {
            upstream: new,
            ids,
            change,
        })
    }
}

/// The text of a block's `server` and `state` lines.
fn servers_text(d: &Directive) -> String {
    let mut text = String::new();
    for c in d
        .children()
        .iter()
        .filter(|c| matches!(c.name.as_str(), "server" | "state"))
    {
        text.push_str(&c.name);
        for a in &c.args {
            text.push(' ');
            text.push_str(&a.value);
        }
        text.push('\n');
    }
    text
}

enum Read {
    Io(String),
    Config(ConfigError),
}

/// The `server` lines of a state file, with their places in it; none if there is no file
/// yet (the API writes it).
fn read_state(path: &Path) -> Result<Vec<Directive>, Read> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(Read::Io(format!(
                "open() \"{}\" failed ({})",
                path.display(),
                crate::log::os_error(&e)
            )))
        }
    };
    // Read as the body of an upstream block on the file's own first line, so that every
    // place is the file's.
    let wrapped = format!("events {{}} http {{ upstream state {{ {text}\n}} }}");
    let loaded =
        portcullis_config::load_str(&wrapped, path, &Default::default()).map_err(Read::Config)?;
    let block = (loaded.directives.iter())
        .find(|d| d.name == "http")
        .and_then(|h| h.children().iter().find(|d| d.name == "upstream"));
    let lines = block.map(|b| b.children().to_vec()).unwrap_or_default();
    if let Some(other) = lines.iter().find(|d| d.name != "server") {
        return Err(Read::Config(ConfigError::at(
            other,
            format!(
                "\"{}\" directive is not allowed in a state file",
                other.name
            ),
        )));
    }
    Ok(lines)
}

/// Writes a state file whole: a new file renamed over the old, so that a crash leaves one
/// or the other.
fn write_state(path: &Path, text: &str) -> Result<(), String> {
    let fail = |what: &str, e: std::io::Error| {
        format!(
            "{what} \"{}\" failed ({})",
            path.display(),
            crate::log::os_error(&e)
        )
    };
    // A name of its own: two configurations (one finishing its requests) may write at once.
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut temp = path.as_os_str().to_owned();
    temp.push(format!(
        ".{}.{}",
        std::process::id(),
        WRITES.fetch_add(1, Ordering::Relaxed)
    ));
    let temp = PathBuf::from(temp);
    std::fs::write(&temp, text).map_err(|e| fail("open()", e))?;
    std::fs::rename(&temp, path).map_err(|e| fail("rename()", e))
}
