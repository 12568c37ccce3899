//! The module interface: what an nginx module plugs into, so that the core (configuration
//! compilation in `conf`, the phases in `request`, the workers) walks a list of modules and
//! never names one.
//!
//! As an nginx module has its command table, its `create_loc_conf`/`merge_loc_conf` and the
//! handlers it registers, a [`Module`] says which directives are its own, keeps its settings of
//! each level in a [`Slot`] of [`Confs`] (a level starts as a copy of the one above it, as
//! nginx's merge leaves what a level does not set), keeps what one load of a configuration
//! shares between levels (files read once), declares its variables before any argument is
//! compiled, and hands the phases its `Handlers` (as an nginx
//! module pushes its handlers into the core's phase arrays). Its state in each worker (caches)
//! is its own too. The registry, the one list of modules, is `modules.rs`.

use std::any::Any;
use std::path::Path;
use std::sync::Arc;

use portcullis_config::{ConfigError, Directive};

use crate::vars::Names;

/// A module's settings of one level, or one of its compiled variables: its own type, which
/// only the module reads.
pub(crate) type Slot = Arc<dyn Any + Send + Sync>;

/// Every module's settings of one level, in the registry's order, and which of the modules
/// have something to do at the level: the phases call only those (nginx's modules check
/// the same in their handlers, here it is known once per level).
#[derive(Clone, Default)]
pub(crate) struct Confs {
    slots: Vec<Slot>,
    /// Bit `i`: module `i` may act. Set whenever its settings change, cleared only by
    /// [`settle`](Confs::settle), so a level that is never settled calls every module.
    active: u128,
}

/// Most modules a registry holds (the bits of [`Confs`]'s mask).
pub(crate) const MAX_MODULES: usize = u128::BITS as usize;

impl Confs {
    /// The http level's: each module's defaults, each taken as active until settled.
    pub fn defaults(modules: Registry) -> Confs {
        assert!(modules.len() <= MAX_MODULES, "too many modules");
        Confs {
            slots: modules.iter().map(|m| m.defaults()).collect(),
            active: u128::MAX,
        }
    }

    /// Module `i`'s settings.
    pub fn get(&self, i: usize) -> Option<&Slot> {
        self.slots.get(i)
    }

    /// Module `i`'s settings when it has something to do at this level.
    #[inline]
    pub fn active(&self, i: usize) -> Option<&Slot> {
        if self.active & (1 << i) == 0 {
            return None;
        }
        self.slots.get(i)
    }

    /// Whether any module of `modules` (a mask of places) is active at this level.
    #[inline]
    pub fn any_active(&self, modules: u128) -> bool {
        self.active & modules != 0
    }

    /// Module `i`'s settings, to change: the module counts as active until settled again.
    pub fn slot_mut(&mut self, i: usize) -> &mut Slot {
        self.active |= 1 << i;
        &mut self.slots[i]
    }

    /// Asks each module whether it has something to do with its settings of this level,
    /// once the level is complete.
    pub fn settle(&mut self, modules: Registry) {
        self.active = 0;
        for (i, (m, slot)) in modules.iter().zip(&self.slots).enumerate() {
            if m.is_active(slot) {
                self.active |= 1 << i;
            }
        }
    }

    /// The settings of type `T`, of whichever module keeps them: a search through every
    /// module's, for what is asked once per connection or response, not per phase.
    pub fn find<T: 'static>(&self) -> Option<&T> {
        self.slots.iter().find_map(|s| s.downcast_ref())
    }
}

/// The modules of a server, in the order their handlers run.
pub(crate) type Registry = &'static [&'static dyn Module];

/// What a module's directive handler may use while a configuration loads.
pub(crate) struct Load<'a> {
    pub names: &'a Names,
    /// The directory of the main configuration file, which nginx's `conf_prefix` is: the
    /// names of files the configuration reads (keys, password files) resolve against it.
    pub conf_prefix: &'a Path,
    /// What this load of the configuration keeps for the module (from [`Module::load`]).
    pub state: &'a mut (dyn Any + Send + Sync),
    /// Whether the directive is the first of its name at this level: a list it makes then
    /// replaces the inherited one, as in nginx.
    pub first: bool,
    /// Whether it is the first of the module's directives at this level, for a list that
    /// several directives make (`allow` and `deny`).
    pub first_of_module: bool,
    /// The configuration's `upstream` blocks, by name, for the modules that pass requests
    /// to them (`proxy_pass`, `fastcgi_pass`).
    pub upstreams: &'a Arc<crate::upstream::group::Groups>,
    /// The location the directive is in (`None` at the http and server levels).
    pub location: Option<&'a Place>,
    /// The user the workers serve as (`user`), when it is not the one loading: what they
    /// write (cache directories) becomes theirs.
    pub user: Option<libc::uid_t>,
    /// The shared memory zones and directories the configuration declared so far, by any
    /// module (`proxy_cache_path`, `limit_req_zone`, ...).
    pub declared: &'a mut crate::zone::Declared,
    /// nginx's prefix, against which the files the server writes (logs) resolve.
    pub prefix: &'a Path,
    /// The machine's name, as `$hostname` and syslog messages give it.
    pub hostname: &'a str,
    /// Where a directive that is read but ignored says so, as nginx's `[warn]`.
    pub warnings: &'a mut Vec<String>,
}

/// The location a directive is read in.
pub(crate) struct Place {
    /// Its name, as written.
    pub name: String,
    /// A regex or named location, or an `if` or `limit_except` block in one: where nginx's
    /// `proxy_pass` may have no URI part (there is no prefix for it to replace).
    pub uri_part_forbidden: bool,
}

/// What a module's [`finish`](Module::finish) may use at the end of a level.
pub(crate) struct Finish<'a> {
    pub names: &'a Names,
    /// Builds the configuration of a block in this level that is a level of its own (an
    /// `if` in a location, of which nginx makes a nameless location): the level's settings
    /// with the block's on top, as the core's location settings behind a [`Slot`].
    pub nested: Option<&'a mut NestedConf<'a>>,
    /// What this load of the configuration keeps for the module (from [`Module::load`]).
    pub state: &'a mut (dyn Any + Send + Sync),
    /// nginx's prefix, against which the files the server writes (logs) resolve.
    pub prefix: &'a Path,
    /// The directory of the main configuration file, against which the files the
    /// configuration reads resolve (as [`Load::conf_prefix`]).
    pub conf_prefix: &'a Path,
    /// The level's block: the `server`, `location` or `if` directive, for the place of an
    /// error about the level as a whole.
    pub level: &'a Directive,
    /// Where a level that loads with something nginx warns about says so, as `[warn]`.
    pub warnings: &'a mut Vec<String>,
    /// The configuration's `upstream` blocks, by name (as [`Load::upstreams`]).
    pub upstreams: &'a Arc<crate::upstream::group::Groups>,
}

/// What a module runs once for the whole server with one configuration (see
/// [`Module::start`]): dropping it stops it.
pub(crate) type Running = Box<dyn Any + Send>;

/// What [`Module::start`] may use.
pub(crate) struct Start<'a> {
    /// The workers' `user`, which what it runs serves as too.
    pub credentials: Option<&'a Arc<crate::user::Credentials>>,
    /// The server's main error log.
    pub error_log: &'a Arc<crate::log::ErrorLog>,
}

/// What the server opened for a module from one load of a configuration (see
/// [`Module::open`]): files a worker could not open itself once it serves as `user`.
pub(crate) type Opened = Arc<dyn Any + Send + Sync>;

/// How [`Finish::nested`] builds a block's configuration.
pub(crate) type NestedConf<'a> = dyn FnMut(&Directive) -> Result<Slot, ConfigError> + 'a;

/// An nginx module as the core sees it. Every method but [`name`](Module::name) has a default
/// that does nothing, so a module implements what it takes part in.
pub(crate) trait Module: Sync {
    /// nginx's name for it, as in `-V` and the directive table
    /// ([`portcullis_config::MODULES`]), e.g. `http_auth_jwt_module`.
    fn name(&self) -> &'static str;

    /// Whether `directive`, at the http, server, location, `if` or `limit_except` level, is
    /// this module's: one the directive table lists as implemented under its name.
    fn owns(&self, directive: &str) -> bool {
        in_table(self.name(), directive)
    }

    /// Declares the module's variables, before any argument of the configuration is compiled
    /// (a `$name` may be used above the directive that makes it). `me` is the module's place
    /// in the registry, for [`Names::add_module_variables`].
    fn declare(
        &self,
        _http: &[Directive],
        _names: &mut Names,
        _me: usize,
    ) -> Result<(), ConfigError> {
        Ok(())
    }

    /// What one load of a configuration keeps for the module: files read once for every
    /// level that names them, sizes the workers need. Kept with the loaded configuration and
    /// handed to [`worker`](Module::worker).
    fn load(&self) -> Box<dyn Any + Send + Sync> {
        Box::new(())
    }

    /// The module's settings at the http level before any directive.
    fn defaults(&self) -> Slot {
        Arc::new(())
    }

    /// Applies one of the module's directives to a level's settings, which start as a copy of
    /// the level above.
    fn directive(
        &self,
        _conf: &mut Slot,
        _d: &Directive,
        _cx: &mut Load<'_>,
    ) -> Result<(), ConfigError> {
        Ok(())
    }

    /// The http level begins, before any of its directives is read: the module reads the
    /// blocks of the level that a directive may name above them (`proxy_cache_path`'s
    /// zones, named by `proxy_cache`), keeping them in its load state.
    fn begin_http(&self, _http: &[Directive], _cx: &mut Load<'_>) -> Result<(), ConfigError> {
        Ok(())
    }

    /// The http level is read (every directive of `http`, none of its servers yet): the
    /// module completes its settings there, which every server starts from (nginx's
    /// default `access_log`, made when the http level names none).
    fn finish_http(
        &self,
        _conf: &mut Slot,
        _http: &[Directive],
        _cx: &mut Load<'_>,
    ) -> Result<(), ConfigError> {
        Ok(())
    }

    /// Opens what the workers of a configuration write to, from what loading it kept: done
    /// by the server itself on start, reload and USR1 (logrotate), before any worker serves
    /// as `user`, as nginx's master opens its log files. An error stops the start or reload.
    fn open(&self, _loaded: &(dyn Any + Send + Sync)) -> std::io::Result<Opened> {
        Ok(Arc::new(()))
    }

    /// Starts what the module runs once for the whole server, beside the workers, with a
    /// configuration (active health checks of upstream servers): on start and on each
    /// reload, the new one started before the old one is dropped.
    fn start(&self, _loaded: &(dyn Any + Send + Sync), _cx: &Start<'_>) -> Option<Running> {
        None
    }

    /// The protocol the module serves over a TLS connection to a server whose settings are
    /// `conf`, as ALPN names it (`h2` with `http2 on`): offered to clients beside HTTP/1.1.
    fn alpn(&self, _conf: &Slot) -> Option<&'static [u8]> {
        None
    }

    /// The TLS settings of a server, once its level is read (the ssl module's): `block` is
    /// the `server` block, `h2` whether ALPN offers HTTP/2 there. `None` from a module that
    /// has none to give.
    fn server_tls(
        &self,
        _conf: &Slot,
        _block: &Directive,
        _h2: bool,
        _cx: &mut Load<'_>,
    ) -> Result<Option<crate::tls::server::ServerTlsBits>, ConfigError> {
        Ok(None)
    }

    /// The module's phase handlers: a `static` of the phases' `Handlers` type, which they
    /// look up by type (this file does not name the phases, which run on the
    /// configuration it loads).
    fn handlers(&self) -> &'static (dyn Any + Send + Sync) {
        &()
    }

    /// A location begins, its settings a copy of the level above: the module drops what
    /// nginx does not inherit into a location (its content handler: `proxy_pass`,
    /// `stub_status`), which the location's own directives may set again. An `if` block
    /// keeps it.
    fn enter_location(&self, _conf: &mut Slot) {}

    /// Completes the module's settings of a server, location or `if` level once every other
    /// directive of it was read: `block` is the level's directives. What a level makes here
    /// is its own, never inherited (nginx's rewrite module compiles a level's code so).
    fn finish(
        &self,
        _conf: &mut Slot,
        _block: &[Directive],
        _cx: &mut Finish<'_>,
    ) -> Result<(), ConfigError> {
        Ok(())
    }

    /// Whether a location whose settings are `conf` answers a request for its name without
    /// the final `/` with a redirect to it (nginx's `auto_redirect`, which `proxy_pass` and
    /// `fastcgi_pass` set in a location whose name ends with `/`).
    fn auto_redirect(&self, _conf: &Slot) -> bool {
        false
    }

    /// Whether the module's settings of a level (`conf`) give its phase handlers something
    /// to do there; when not, the phases pass it by. Only a module whose handlers would
    /// decline or do nothing with these settings may say no.
    fn is_active(&self, _conf: &Slot) -> bool {
        true
    }

    /// The module's state in a worker, made when the worker starts, with what the server
    /// [`open`](Module::open)ed.
    fn worker(&self, _loaded: &(dyn Any + Send + Sync), _opened: &Opened) -> Box<dyn Any> {
        Box::new(())
    }

    /// A new configuration reached the worker: `state` is what [`worker`](Module::worker)
    /// made.
    fn reload(&self, _state: &dyn Any, _loaded: &(dyn Any + Send + Sync), _opened: &Opened) {}

    /// The server opened the module's files anew (USR1), for the same configuration.
    fn reopen(&self, _state: &dyn Any, _opened: &Opened) {}

    /// Once a second in each worker, with the configuration new connections take: work
    /// that waits on time (buffered log lines whose `flush=` passed).
    fn tick(&self, _state: &dyn Any, _loaded: &(dyn Any + Send + Sync)) {}

    /// The worker stops: nothing may be left unwritten.
    fn stop(&self, _state: &dyn Any) {}
}

/// Edits a level's settings of type `T`: the level's own copy, made on the first edit (a
/// level shares its parent's until it changes them).
pub(crate) fn edit<T: Clone + Send + Sync + 'static>(slot: &mut Slot) -> &mut T {
    if Arc::get_mut(slot).is_none() {
        let copy: T = slot
            .downcast_ref::<T>()
            .expect("a module's own settings")
            .clone();
        *slot = Arc::new(copy);
    }
    Arc::get_mut(slot)
        .and_then(|s| s.downcast_mut::<T>())
        .expect("a module's own settings")
}

/// A module whose one directive makes a location answer by the module's `content` handler
/// (`stub_status`, `empty_gif`), as nginx's location handlers: its settings of a level are
/// whether the directive is there, not inherited by the locations inside (an `if` block
/// keeps it); it may declare fixed variables.
pub(crate) struct LocationHandler {
    /// nginx's name for the module.
    pub name: &'static str,
    pub variables: &'static [&'static str],
    /// A `static` of the phases' `Handlers`: `content`, and `variable` for `variables`.
    pub handlers: &'static (dyn Any + Send + Sync),
}

impl Module for LocationHandler {
    fn name(&self) -> &'static str {
        self.name
    }

    fn declare(
        &self,
        _http: &[Directive],
        names: &mut Names,
        me: usize,
    ) -> Result<(), ConfigError> {
        if !self.variables.is_empty() {
            names.add_fixed(me, self.variables);
        }
        Ok(())
    }

    fn defaults(&self) -> Slot {
        Arc::new(false)
    }

    /// The directive takes no argument, or one it ignores (`stub_status on` of old).
    fn directive(
        &self,
        conf: &mut Slot,
        _d: &Directive,
        _cx: &mut Load<'_>,
    ) -> Result<(), ConfigError> {
        *edit::<bool>(conf) = true;
        Ok(())
    }

    fn enter_location(&self, conf: &mut Slot) {
        if *get::<bool>(conf) {
            *edit::<bool>(conf) = false;
        }
    }

    fn is_active(&self, conf: &Slot) -> bool {
        *get::<bool>(conf)
    }

    fn handlers(&self) -> &'static (dyn Any + Send + Sync) {
        self.handlers
    }
}

/// The media types a `*_types` directive lists (`gzip_types`, `sub_filter_types`,
/// `charset_types`), as nginx's `ngx_http_types_slot` keeps them: lowercase; a level's first
/// directive starts a list of its own from `text/html`, the level's later ones add to it;
/// `*` matches every type. A level with none has the module's defaults.
#[derive(Clone, Debug)]
pub(crate) struct TypeList(Option<Vec<Vec<u8>>>);

impl TypeList {
    /// The list of a level that names none.
    pub fn new(defaults: &[&str]) -> TypeList {
        TypeList(Some(
            defaults.iter().map(|t| t.as_bytes().to_vec()).collect(),
        ))
    }

    /// Adds a directive's types; `first`: the first of its name at the level.
    pub fn add(&mut self, d: &Directive, first: bool) {
        if first {
            self.0 = Some(vec![b"text/html".to_vec()]);
        }
        let Some(list) = self.0.as_mut() else {
            return;
        };
        for a in &d.args {
            if a.value == "*" {
                self.0 = None;
                return;
            }
            let t = a.value.to_ascii_lowercase().into_bytes();
            if !list.contains(&t) {
                list.push(t);
            }
        }
    }

    /// Whether `media_type` (lowercase, without parameters) is listed.
    pub fn matches(&self, media_type: &[u8]) -> bool {
        self.0
            .as_ref()
            .is_none_or(|list| list.iter().any(|t| t == media_type))
    }
}

/// Reads a level's settings of type `T`.
pub(crate) fn get<T: 'static>(slot: &Slot) -> &T {
    slot.downcast_ref::<T>().expect("a module's own settings")
}

/// Whether the directive table lists `directive` under the module called `module` as
/// implemented; one it ignores or refuses is the loader's and `check_meaning`'s to report.
pub(crate) fn in_table(module: &str, directive: &str) -> bool {
    portcullis_config::MODULES
        .iter()
        .filter(|m| m.name == module)
        .flat_map(|m| m.directives)
        .any(|d| d.name == directive && d.support == portcullis_config::Support::Yes)
}
