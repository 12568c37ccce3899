//! Shared memory zones, as nginx's modules declare them (`limit_req_zone`,
//! `limit_conn_zone`): a named state that every worker shares, kept across reloads when the
//! zone keeps its name and size, and that holds as much as nginx's slab allocator fits in a
//! zone of that size (a [`Room`]). And the settings the modules that limit with them share
//! (`limit_req_status`, `limit_conn_log_level`, ...).

use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak};

use portcullis_config::{value, ConfigError, Directive};

use crate::Level;

/// The smallest zone nginx accepts: eight pages.
pub(crate) const MIN_ZONE: usize = 8 * PAGE;
const PAGE: usize = 4096;

/// A zone's state, shared by every worker.
pub(crate) struct Zone<T> {
    pub name: String,
    size: usize,
    /// The key as written, which a reload must keep.
    pub key: String,
    state: Mutex<T>,
}

impl<T: Send + 'static> Zone<T> {
    /// The zone `name` of `size` bytes: the one a running configuration has when it has one
    /// of that name, size and kind (nginx keeps a shared zone so), else a new one made by
    /// `make`. A kept zone must keep its key: `what` names the zone in the error, as nginx's
    /// modules do (`limit_req`, `limit_conn_zone`).
    pub fn shared(
        what: &str,
        name: &str,
        size: usize,
        key: &str,
        make: impl FnOnce() -> T,
    ) -> Result<Arc<Zone<T>>, ConfigError> {
        static LIVE: Mutex<Vec<Weak<dyn Any + Send + Sync>>> = Mutex::new(Vec::new());
        let mut live = LIVE.lock().unwrap_or_else(PoisonError::into_inner);
        live.retain(|z| z.strong_count() > 0);
        let running = live
            .iter()
            .filter_map(|z| z.upgrade()?.downcast::<Zone<T>>().ok())
            .find(|z| z.name == name && z.size == size);
        if let Some(zone) = running {
            if zone.key != key {
                // A cache's key is its path, and nginx says so.
                let noun = if what == "cache" { "cache path" } else { "key" };
                return Err(ConfigError {
                    message: format!(
                        "{what} \"{name}\" uses the \"{key}\" {noun} while previously it used the \"{}\" {noun}",
                        zone.key
                    ),
                    span: None,
                });
            }
            return Ok(zone);
        }
        let zone = Arc::new(Zone {
            name: name.to_owned(),
            size,
            key: key.to_owned(),
            state: Mutex::new(make()),
        });
        let weak: Weak<dyn Any + Send + Sync> = Arc::downgrade(&zone) as _;
        live.push(weak);
        Ok(zone)
    }

    pub fn lock(&self) -> MutexGuard<'_, T> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The shared memory zones and the directories that one load of a configuration declares,
/// by any module: nginx keeps one list of each for the whole configuration, so that a name
/// or a directory serves one use only.
#[derive(Default)]
pub(crate) struct Declared {
    /// Each zone's name and the directive that defines it.
    zones: Vec<(String, &'static str)>,
    /// Each directory and where it was named.
    paths: Vec<(std::path::PathBuf, String)>,
}

impl Declared {
    /// Zone `name`, defined by `d` (whose name is `tag`): refused when a zone of another kind
    /// has the name (a second one of the same kind is its module's to judge).
    pub fn zone(
        &mut self,
        d: &Directive,
        name: &str,
        tag: &'static str,
    ) -> Result<(), ConfigError> {
        match self.zones.iter().find(|(n, _)| n == name) {
            Some((_, t)) if *t != tag => Err(ConfigError::at(
                d,
                format!(
                    "the shared memory zone \"{name}\" is already declared for a different use"
                ),
            )),
            Some(_) => Ok(()),
            None => {
                self.zones.push((name.to_owned(), tag));
                Ok(())
            }
        }
    }

    /// Directory `dir`, named by `d`: refused when it was named before.
    pub fn path(&mut self, d: &Directive, dir: &std::path::Path) -> Result<(), ConfigError> {
        if let Some((_, at)) = self.paths.iter().find(|(p, _)| p == dir) {
            return Err(ConfigError::at(
                d,
                format!("the same path name \"{}\" used in {at} and", dir.display()),
            ));
        }
        self.paths.push((dir.to_path_buf(), d.span.to_string()));
        Ok(())
    }
}

/// A zone as one configuration names it: a directive may name it (`limit_req zone=one`)
/// before the directive that defines it (`limit_req_zone ... zone=one:10m`) with `D`.
pub(crate) struct Named<D> {
    pub name: String,
    pub defined: OnceLock<D>,
}

impl<D> Named<D> {
    /// The error of a zone named and never defined, once the http level is read.
    pub fn check_defined(&self) -> Result<(), ConfigError> {
        match self.defined.get() {
            Some(_) => Ok(()),
            None => Err(ConfigError {
                message: format!("zero size shared memory zone \"{}\"", self.name),
                span: None,
            }),
        }
    }
}

/// The zones of one kind that one load of a configuration names, by name.
pub(crate) struct ByName<D>(HashMap<String, Arc<Named<D>>>);

impl<D> Default for ByName<D> {
    fn default() -> Self {
        ByName(HashMap::new())
    }
}

impl<D> ByName<D> {
    pub fn get(&mut self, name: &str) -> Arc<Named<D>> {
        self.0
            .entry(name.to_owned())
            .or_insert_with(|| {
                Arc::new(Named {
                    name: name.to_owned(),
                    defined: OnceLock::new(),
                })
            })
            .clone()
    }
}

/// `zone=name:size` of a zone directive `d`: the name and the size, at least [`MIN_ZONE`].
pub(crate) fn parse_zone<'d>(d: &Directive, arg: &'d str) -> Result<(&'d str, usize), ConfigError> {
    let spec = arg.strip_prefix("zone=").unwrap_or(arg);
    let bad_size = || ConfigError::at(d, format!("invalid zone size \"{arg}\""));
    let (name, size) = spec.split_once(':').ok_or_else(bad_size)?;
    if name.is_empty() {
        return Err(ConfigError::at(
            d,
            format!("\"{}\" must have \"zone\" parameter", d.name),
        ));
    }
    let size = value::parse_size(size).ok_or_else(bad_size)? as usize;
    if size < MIN_ZONE {
        return Err(ConfigError::at(d, format!("zone \"{arg}\" is too small")));
    }
    Ok((name, size))
}

/// What the limit modules' settings of a level share: their limits (a level's first
/// replaces the inherited ones), and `*_status`, `*_log_level` and `*_dry_run`.
#[derive(Clone)]
pub(crate) struct Limits<L> {
    pub list: Arc<Vec<L>>,
    pub log_level: Level,
    pub status: u16,
    pub dry_run: bool,
}

impl<L> Default for Limits<L> {
    fn default() -> Self {
        Limits {
            list: Arc::new(Vec::new()),
            log_level: Level::Error,
            status: 503,
            dry_run: false,
        }
    }
}

impl<L: Clone> Limits<L> {
    /// Adds a limit of zone `zone` (`same` finds it in a limit), refusing a second of the
    /// same zone at a level as nginx does; `first` is whether it is the level's first.
    pub fn push(
        &mut self,
        d: &Directive,
        limit: L,
        first: bool,
        same: impl Fn(&L, &L) -> bool,
    ) -> Result<(), ConfigError> {
        if first {
            self.list = Arc::new(Vec::new());
        }
        if self.list.iter().any(|l| same(l, &limit)) {
            return Err(ConfigError::at(
                d,
                format!("\"{}\" directive is duplicate", d.name),
            ));
        }
        Arc::make_mut(&mut self.list).push(limit);
        Ok(())
    }

    /// Applies `<module>_status`, `_log_level` or `_dry_run`; `false` for another directive.
    pub fn setting(&mut self, d: &Directive) -> Result<bool, ConfigError> {
        if d.name.ends_with("_status") {
            self.status = limit_status(d)?;
        } else if d.name.ends_with("_log_level") {
            self.log_level = limit_log_level(d)?;
        } else if d.name.ends_with("_dry_run") {
            self.dry_run = value::flag(d, 0)?;
        } else {
            return Ok(false);
        }
        Ok(true)
    }
}

/// A zone defined a second time (`name` of `size` for `key`), as nginx reports it.
pub(crate) fn redefined<T: Send + 'static>(
    d: &Directive,
    name: &str,
    size: usize,
    zone: &Zone<T>,
) -> ConfigError {
    if zone.size != size {
        return ConfigError::at(
            d,
            format!(
                "the size {size} of shared memory zone \"{name}\" conflicts with already declared size {}",
                zone.size
            ),
        );
    }
    ConfigError::at(
        d,
        format!(
            "{} \"{name}\" is already bound to key \"{}\"",
            d.name, zone.key
        ),
    )
}

/// Whether a key is longer than a zone takes (`max`), logged as nginx logs it (at `error`,
/// by `log`): such a key is not limited.
pub(crate) fn too_long(log: impl FnOnce(&str), key: &[u8], zone_key: &str, max: usize) -> bool {
    if key.len() <= max {
        return false;
    }
    log(&format!(
        "the value of the \"{zone_key}\" key is more than {max} bytes: \"{}\"",
        String::from_utf8_lossy(key)
    ));
    true
}

/// `limit_req_status` and `limit_conn_status`: a status from 400 to 599.
fn limit_status(d: &Directive) -> Result<u16, ConfigError> {
    let status = value::number(d, 0)?;
    if !(400..=599).contains(&status) {
        return Err(ConfigError::at(d, "value must be between 400 and 599"));
    }
    Ok(status as u16)
}

/// `limit_req_log_level` and `limit_conn_log_level`.
fn limit_log_level(d: &Directive) -> Result<Level, ConfigError> {
    Ok(match d.arg(0) {
        "info" => Level::Info,
        "notice" => Level::Notice,
        "warn" => Level::Warn,
        "error" => Level::Error,
        other => return Err(ConfigError::at(d, format!("invalid value \"{other}\""))),
    })
}

/// The room in a zone, as nginx's slab allocator gives it out: pages of the zone's size
/// (less its own bookkeeping), each cut into chunks of one power of two.
pub(crate) struct Room {
    free_pages: usize,
    /// By chunk size (8 << i, up to half a page): pages held and chunks used.
    classes: [(usize, usize); 9],
}

impl Room {
    pub fn new(size: usize) -> Room {
        // The allocator's pool, slots and statistics, then one descriptor per page.
        const HEADER: usize = 208 + 9 * (24 + 32);
        let pages = size.saturating_sub(HEADER) / (PAGE + 24);
        let start = (HEADER + pages * 24).next_multiple_of(PAGE);
        Room {
            free_pages: pages.min(size.saturating_sub(start) / PAGE),
            classes: [(0, 0); 9],
        }
    }

    /// The chunk class of `size` and its chunks per page, or `None` for whole pages.
    fn class(size: usize) -> Option<(usize, usize)> {
        let chunk = size.max(8).next_power_of_two();
        if chunk > PAGE / 2 {
            return None;
        }
        let i = chunk.trailing_zeros() as usize - 3;
        // Chunks under 64 bytes keep their page's bitmap in the page's first chunks.
        let bitmap = (PAGE / chunk / 8).div_ceil(chunk);
        let per_page = PAGE / chunk - if chunk < 64 { bitmap } else { 0 };
        Some((i, per_page))
    }

    /// Takes room for `size` bytes, if there is.
    pub fn take(&mut self, size: usize) -> bool {
        let Some((i, per_page)) = Room::class(size) else {
            let pages = size.div_ceil(PAGE);
            if self.free_pages < pages {
                return false;
            }
            self.free_pages -= pages;
            return true;
        };
        let (pages, used) = &mut self.classes[i];
        if *used == *pages * per_page {
            if self.free_pages == 0 {
                return false;
            }
            self.free_pages -= 1;
            *pages += 1;
        }
        *used += 1;
        true
    }

    /// Gives back the room of `size` bytes.
    pub fn free(&mut self, size: usize) {
        let Some((i, per_page)) = Room::class(size) else {
            self.free_pages += size.div_ceil(PAGE);
            return;
        };
        let (pages, used) = &mut self.classes[i];
        *used = used.saturating_sub(1);
        if *pages > 0 && *used <= (*pages - 1) * per_page {
            *pages -= 1;
            self.free_pages += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zone_holds_what_nginx_s_slab_allocator_fits() {
        // Eight pages: seven for chunks after the allocator's own; a page for each size.
        let mut room = Room::new(MIN_ZONE);
        assert!(room.take(80));
        assert!(room.take(22));
        let fits = std::iter::repeat_with(|| room.take(81))
            .take_while(|&t| t)
            .count();
        assert_eq!(fits, 6 * 32 - 1);
        room.free(81);
        assert!(room.take(81));
        assert!(!room.take(81));
        // A megabyte has 254 pages.
        let mut room = Room::new(1 << 20);
        let pages = std::iter::repeat_with(|| room.take(PAGE))
            .take_while(|&t| t)
            .count();
        assert_eq!(pages, 254);
    }
}
