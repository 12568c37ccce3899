//! The cache on disk and its keys zone.
//!
//! Each entry is one file named by the md5 of its key, in the directories `levels=` makes of
//! the name's last hex digits, in nginx's format (`ngx_http_file_cache_header_t`, version 5,
//! as nginx lays it out on a 64-bit machine):
//!
//! ```text
//!   0 version (8)  8 valid_sec  16 updating_sec  24 error_sec  32 last_modified  40 date
//!  48 crc32 (4)  52 valid_msec (2)  54 header_start (2)  56 body_start (2)
//!  58 etag_len (1)  59 etag (128)  187 vary_len (1)  188 vary (128)  316 variant (16)
//! 336 "\nKEY: " key "\n"  header_start: the upstream's head  body_start: the body
//! ```
//!
//! The keys zone keeps, per entry, how often it was asked for, its size and its last use;
//! a manager thread (one per zone, for the whole server) loads what the directory holds at
//! start, removes what was not used for `inactive` and trims the cache to `max_size` and
//! `min_free`, least recently used first.

use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use md5::{Digest, Md5};
use portcullis_config::{value, ConfigError, Directive};
use portcullis_http::ResponseHead;

use super::rules::{now_secs, Fresh, VARY_LEN};
use crate::zone::Zone;

const VERSION: u64 = 5;
/// The size of nginx's header on a 64-bit machine.
pub(super) const HEADER: usize = 336;
const ETAG_LEN: usize = 128;
const KEY_PREFIX: &[u8] = b"\nKEY: ";
/// What a lookup reads of an entry at once: the header and head, and all the body of a
/// small one.
const FIRST_READ: usize = 16 * 1024;
/// How often the manager looks at the zone.
const MANAGER_SLEEP: Duration = Duration::from_millis(500);

/// A `proxy_cache_path`.
pub(crate) struct CachePath {
    pub name: String,
    dir: PathBuf,
    levels: Vec<usize>,
    zone: Arc<Zone<Keys>>,
    /// The zone's own number, which no other zone of the process has had.
    id: u64,
}

/// The keys zone: what nginx keeps of a cache in shared memory.
struct Keys {
    nodes: HashMap<[u8; 16], Node>,
    /// The bytes the entries take.
    size: u64,
    /// Most nodes the zone's size holds.
    capacity: usize,
    limits: Limits,
    /// The manager runs: started by the first request (a thread started while the
    /// configuration loads would keep the server from becoming a daemon).
    managed: bool,
    /// The version the next changed node takes.
    next_version: u64,
    /// The zone's number ([`CachePath::id`]).
    id: u64,
}

/// What the manager keeps the cache within.
#[derive(Clone)]
struct Limits {
    dir: PathBuf,
    levels: Vec<usize>,
    inactive: Duration,
    /// 0: no limit.
    max_size: u64,
    min_free: u64,
    /// The file system's block: an entry counts as the blocks it takes, as in nginx.
    bsize: u64,
}

impl Limits {
    /// What an entry of `len` bytes counts for in `max_size`: whole blocks.
    fn on_disk(&self, len: u64) -> u64 {
        len.div_ceil(self.bsize) * self.bsize
    }
}

struct Node {
    uses: u32,
    accessed: Instant,
    /// What the entry's file takes on disk (whole blocks); 0 when there is none.
    size: u64,
    /// Changes whenever the entry's file may have: a worker's copy of an older one is
    /// stale ([`Hot`]).
    version: u64,
    /// A request is updating the entry, until this time at the latest (`proxy_cache_lock_age`).
    updating: Option<Instant>,
}

/// nginx's slab takes about this much of a keys zone per key (its node and the allocator's
/// share): a 1 MB zone keeps about 8,000 keys.
const NODE_COST: usize = 128;

impl CachePath {
    /// `proxy_cache_path path [levels=] [use_temp_path=] keys_zone=name:size [inactive=]
    /// [max_size=] [min_free=] [manager_*=] [loader_*=]`.
    pub(super) fn configure(d: &Directive, prefix: &Path) -> Result<Arc<CachePath>, ConfigError> {
        let dir = prefix.join(d.arg(0));
        let mut levels = Vec::new();
        let mut zone: Option<(String, usize)> = None;
        let mut inactive = Duration::from_secs(600);
        let mut max_size = 0;
        let mut min_free = 0;
        let invalid = |v: &str| {
            ConfigError::at(
                d,
                format!("invalid parameter \"{v}\" in \"{}\" directive", d.name),
            )
        };
        for a in &d.args[1..] {
            let v = a.value.as_str();
            let (name, arg) = v.split_once('=').unwrap_or((v, ""));
            match name {
                "levels" => {
                    levels.clear();
                    // An empty `levels=` is none, as nginx takes it.
                    for part in arg.split(':').filter(|_| !arg.is_empty()) {
                        match part {
                            "1" | "2" if levels.len() < 3 => {
                                levels.push(if part == "1" { 1 } else { 2 })
                            }
                            _ => {
                                return Err(ConfigError::at(
                                    d,
                                    format!("invalid \"levels\" \"{v}\""),
                                ))
                            }
                        }
                    }
                }
                "use_temp_path" => match arg {
                    // Entries are written beside their place either way: a rename that is
                    // never a copy between file systems.
                    "on" | "off" => {}
                    _ => {
                        return Err(ConfigError::at(
                            d,
                            format!(
                            "invalid use_temp_path value \"{arg}\", it must be \"on\" or \"off\""
                        ),
                        ))
                    }
                },
                "keys_zone" => {
                    let (zname, size) = arg.split_once(':').ok_or_else(|| invalid(v))?;
                    let size = value::parse_size(size)
                        .and_then(|s| usize::try_from(s).ok())
                        .filter(|s| *s >= 8 * 4096)
                        .ok_or_else(|| {
                            ConfigError::at(d, format!("invalid keys zone size \"{v}\""))
                        })?;
                    if zname.is_empty() {
                        return Err(invalid(v));
                    }
                    zone = Some((zname.to_string(), size));
                }
                "inactive" => {
                    inactive = value::parse_time(arg).ok_or_else(|| {
                        ConfigError::at(d, format!("invalid inactive value \"{v}\""))
                    })?;
                }
                "max_size" => {
                    max_size = value::parse_size(arg).ok_or_else(|| {
                        ConfigError::at(d, format!("invalid max_size value \"{v}\""))
                    })?;
                }
                "min_free" => {
                    min_free = value::parse_size(arg).ok_or_else(|| {
                        ConfigError::at(d, format!("invalid min_free value \"{v}\""))
                    })?;
                }
                // How nginx's manager and loader pace their work: this manager's passes
                // are short and its loader runs once, at start.
                "manager_files" | "manager_threshold" | "manager_sleep" | "loader_files"
                | "loader_threshold" | "loader_sleep" => {}
                _ => return Err(invalid(v)),
            }
        }
        let (name, size) = zone.ok_or_else(|| {
            ConfigError::at(
                d,
                format!("\"{}\" must have \"keys_zone\" parameter", d.name),
            )
        })?;
        std::fs::create_dir_all(&dir).map_err(|e| {
            ConfigError::at(
                d,
                format!(
                    "mkdir() \"{}\" failed {}",
                    dir.display(),
                    crate::log::os_error(&e)
                ),
            )
        })?;
        let limits = Limits {
            dir: dir.clone(),
            levels: levels.clone(),
            inactive,
            max_size,
            min_free,
            bsize: fs_block_size(&dir),
        };
        let zone = Zone::shared("cache", &name, size, &dir.to_string_lossy(), || Keys {
            nodes: HashMap::new(),
            size: 0,
            capacity: (size / NODE_COST).max(64),
            limits: limits.clone(),
            managed: false,
            next_version: 1,
            id: {
                static NEXT: AtomicU64 = AtomicU64::new(1);
                NEXT.fetch_add(1, Ordering::Relaxed)
            },
        })
        .map_err(|e| ConfigError::at(d, e.message))?;
        // A zone kept across a reload takes the new limits, but not other levels: its
        // entries would be lost where they are.
        let id = {
            let mut keys = zone.lock();
            if keys.limits.levels != levels {
                return Err(ConfigError::at(
                    d,
                    format!("cache \"{name}\" had previously different levels"),
                ));
            }
            keys.limits = limits;
            keys.id
        };
        Ok(Arc::new(CachePath {
            name,
            dir,
            levels,
            zone,
            id,
        }))
    }

    /// Makes the cache's directory `uid`'s, who may then read, write and enter it.
    pub(crate) fn give_to(&self, uid: libc::uid_t) {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let Ok(m) = std::fs::metadata(&self.dir) else {
            return;
        };
        if m.uid() != uid {
            let _ = std::os::unix::fs::chown(&self.dir, Some(uid), None);
        }
        let mode = m.permissions().mode();
        if mode & 0o700 != 0o700 {
            let _ =
                std::fs::set_permissions(&self.dir, std::fs::Permissions::from_mode(mode | 0o700));
        }
    }

    /// The path of the entry named `md5`: `levels=1:2` makes `c29b...` into `b/29/...`
    /// from the name's end.
    fn file(&self, md5: &[u8; 16]) -> PathBuf {
        file_path(&self.dir, &self.levels, md5)
    }

    /// Opens the entry named `md5` for `key`, counting the request as a use of the key: the
    /// worker's copy when the entry did not change since it was read, else from its file.
    pub(super) fn open(&self, md5: &[u8; 16], key: &[u8], ask: &super::Ask<'_>) -> Option<Entry> {
        let version = self.touch(md5);
        let id = (self.id, *md5);
        let mut hot = ask.hot.borrow_mut();
        if let Some(e) = hot.get(&id, version).filter(|e| e.key() == key) {
            return Some(e);
        }
        let path = self.file(md5);
        let file = File::open(&path).ok()?;
        match Entry::read(file, path, key) {
            Ok(e) => {
                hot.put(id, version, e.clone());
                Some(e)
            }
            Err(why) => {
                (ask.log)(&format!(
                    "cache file \"{}\" {why}",
                    self.file(md5).display()
                ));
                None
            }
        }
    }

    /// Counts a use of `md5`'s key, making its node if there is none; returns the node's
    /// version.
    fn touch(&self, md5: &[u8; 16]) -> u64 {
        let mut keys = self.zone.lock();
        if !keys.managed {
            keys.managed = true;
            let weak = Arc::downgrade(&self.zone);
            let _ = std::thread::Builder::new()
                .name(format!("cache {}", self.name))
                .spawn(move || manage(weak));
        }
        let now = Instant::now();
        if let Some(n) = keys.nodes.get_mut(md5) {
            n.uses = n.uses.saturating_add(1);
            n.accessed = now;
            return n.version;
        }
        keys.make_room(1);
        let version = keys.version();
        keys.nodes.insert(
            *md5,
            Node {
                uses: 1,
                accessed: now,
                size: 0,
                version,
                updating: None,
            },
        );
        version
    }

    /// Takes the update of the entry `md5` for one request, unless another holds it (for
    /// less than `age`): as nginx's `updating` flag and lock.
    /// `age`: how long the lock on a missing entry holds (`proxy_cache_lock_age`); the
    /// update of an expired one holds until it ends.
    pub(super) fn update(&self, md5: &[u8; 16], age: Option<std::time::Duration>) -> bool {
        let mut keys = self.zone.lock();
        let now = Instant::now();
        let Some(n) = keys.nodes.get_mut(md5) else {
            return true;
        };
        if n.updating.is_some_and(|until| until > now) {
            return false;
        }
        // Far enough ahead to be never for a request.
        n.updating = Some(now + age.unwrap_or(std::time::Duration::from_secs(86_400 * 365)));
        true
    }

    /// The update of the entry `md5` ended, stored or not.
    pub(super) fn updated(&self, md5: &[u8; 16]) {
        if let Some(n) = self.zone.lock().nodes.get_mut(md5) {
            n.updating = None;
        }
    }

    /// The entry named `md5` changed in its file (a revalidation wrote its header).
    pub(super) fn changed(&self, md5: &[u8; 16]) {
        let mut keys = self.zone.lock();
        let version = keys.version();
        if let Some(n) = keys.nodes.get_mut(md5) {
            n.version = version;
        }
    }

    /// Whether the key was asked for `min_uses` times: its response may be stored.
    pub(super) fn used_enough(&self, md5: &[u8; 16], min_uses: u32) -> bool {
        let keys = self.zone.lock();
        keys.nodes.get(md5).map_or(1, |n| n.uses) >= min_uses
    }

    /// A temporary file for the entry named `name` of `key`, its header and head written: the
    /// response's `Vary` names and the variant of them the request is go into the header.
    pub(super) fn create(
        self: &Arc<Self>,
        (name, key): ([u8; 16], &[u8]),
        head: &ResponseHead,
        fresh: &Fresh,
        (vary, variant): (&[u8], [u8; 16]),
        no_body: bool,
        log: &dyn Fn(&str),
    ) -> Option<Store> {
        let raw = head.raw();
        let header_start = HEADER + KEY_PREFIX.len() + key.len() + 1;
        // A head a lookup would not read at once is not stored.
        if header_start + raw.len() > FIRST_READ {
            return None;
        }
        let body_start = u16::try_from(header_start + raw.len()).ok()?;
        let header_start = u16::try_from(header_start).ok()?;
        let mut h = vec![0u8; HEADER];
        put_u64(&mut h, 0, VERSION);
        put_i64(&mut h, 8, fresh.valid_sec);
        put_i64(&mut h, 16, fresh.updating_sec);
        put_i64(&mut h, 24, fresh.error_sec);
        let ok = matches!(head.status(), 200 | 206);
        let last_modified = head
            .header("last-modified")
            .filter(|_| ok)
            .and_then(crate::files::date::parse_http_date)
            .map_or(-1, crate::files::date::unix_secs);
        put_i64(&mut h, 32, last_modified);
        put_i64(&mut h, 40, fresh.date);
        h[48..52].copy_from_slice(&crc32(key).to_le_bytes());
        h[54..56].copy_from_slice(&header_start.to_le_bytes());
        h[56..58].copy_from_slice(&body_start.to_le_bytes());
        if let Some(etag) = head.header("etag").filter(|e| ok && e.len() <= ETAG_LEN) {
            h[58] = etag.len() as u8;
            h[59..59 + etag.len()].copy_from_slice(etag);
        }
        h[187] = vary.len() as u8;
        h[188..188 + vary.len()].copy_from_slice(vary);
        h[316..332].copy_from_slice(&variant);
        h.extend_from_slice(KEY_PREFIX);
        h.extend_from_slice(key);
        h.push(b'\n');
        h.extend_from_slice(raw);
        let path = self.file(&name);
        let dir = path.parent()?;
        let temp = dir.join(format!("{}.{}", hex(&name), temp_number()));
        // The levels' directories are made on the first entry that needs them.
        let made = File::create_new(&temp).or_else(|_| {
            std::fs::create_dir_all(dir)?;
            File::create_new(&temp)
        });
        let mut file = match made {
            Ok(f) => f,
            Err(e) => {
                log(&format!(
                    "open() \"{}\" failed {}",
                    temp.display(),
                    crate::log::os_error(&e)
                ));
                return None;
            }
        };
        if let Err(e) = file.write_all(&h) {
            log(&format!(
                "write() to \"{}\" failed {}",
                temp.display(),
                crate::log::os_error(&e)
            ));
            let _ = std::fs::remove_file(&temp);
            return None;
        }
        let expect = match head.framing() {
            _ if no_body => Some(0),
            portcullis_http::Framing::Length(n) => Some(n),
            _ => None,
        };
        Some(Store::new(file, temp, path, self.clone(), name, expect))
    }

    /// An entry was written whole, `size` bytes: the zone counts it.
    pub(super) fn stored(&self, name: &[u8; 16], size: u64) {
        let mut keys = self.zone.lock();
        let size = keys.limits.on_disk(size);
        if !keys.nodes.contains_key(name) {
            keys.make_room(1);
        }
        let now = Instant::now();
        let version = keys.version();
        let node = keys.nodes.entry(*name).or_insert(Node {
            uses: 1,
            accessed: now,
            size: 0,
            version,
            updating: None,
        });
        let old = std::mem::replace(&mut node.size, size);
        node.accessed = now;
        node.version = version;
        keys.size = keys.size - old.min(keys.size) + size;
    }
}

impl Keys {
    /// A version no node had.
    fn version(&mut self) -> u64 {
        self.next_version += 1;
        self.next_version
    }

    /// Makes room for `n` more nodes when the zone is full, forgetting the least recently
    /// used keys and removing their entries, as nginx does when its zone runs out.
    fn make_room(&mut self, n: usize) {
        if self.nodes.len() + n <= self.capacity {
            return;
        }
        // A sixty-fourth of the zone at once: the scan for the oldest is paid once for many.
        let evict = (self.nodes.len() + n - self.capacity).max(self.capacity / 64);
        for md5 in self.oldest(evict, |_| true) {
            self.remove(&md5);
        }
    }

    /// The `n` least recently used keys of the nodes `which` picks, oldest first.
    fn oldest(&self, n: usize, which: impl Fn(&Node) -> bool) -> Vec<[u8; 16]> {
        let mut all: Vec<(Instant, [u8; 16])> = self
            .nodes
            .iter()
            .filter(|(_, node)| which(node))
            .map(|(k, node)| (node.accessed, *k))
            .collect();
        if n < all.len() {
            all.select_nth_unstable(n);
            all.truncate(n);
        }
        all.sort_unstable();
        all.into_iter().map(|(_, k)| k).collect()
    }

    /// Forgets `md5` and removes its file, if it has one.
    fn remove(&mut self, md5: &[u8; 16]) {
        if let Some(node) = self.nodes.remove(md5) {
            self.size = self.size.saturating_sub(node.size);
            // Also when the zone did not count the file: one found on disk after a restart
            // before the loader came to it.
            let _ = std::fs::remove_file(file_path(&self.limits.dir, &self.limits.levels, md5));
        }
    }
}

fn file_path(dir: &Path, levels: &[usize], md5: &[u8; 16]) -> PathBuf {
    let name = hex(md5);
    let mut path = dir.to_path_buf();
    let mut end = name.len();
    for &l in levels {
        path.push(&name[end - l..end]);
        end -= l;
    }
    path.push(&name);
    path
}

fn hex(md5: &[u8; 16]) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(32);
    for b in md5 {
        let _ = write!(s, "{b:02x}");
    }
    s
}

fn unhex(name: &str) -> Option<[u8; 16]> {
    if name.len() != 32 {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(name.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    // Upper-case digits are no name this cache gives.
    (hex(&out) == name).then_some(out)
}

/// A number for a temporary file's name, unique in the process, which ends in the process's
/// own: the loader leaves this process's temporary files alone.
fn temp_number() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!(
        "{:010}{}",
        NEXT.fetch_add(1, Ordering::Relaxed),
        pid_suffix()
    )
}

/// The end of this process's temporary files' names: drawn once per process, so that a
/// restarted server (which in a container often has the same pid) tells its own from a
/// crash's.
fn pid_suffix() -> String {
    static TOKEN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TOKEN
        .get_or_init(|| {
            let mut b = [0u8; 4];
            // SAFETY: getrandom writes at most `len` bytes into the buffer it is given.
            let _ = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
            let n = u32::from_le_bytes(b) ^ std::process::id();
            format!("{:05}", n % 100_000)
        })
        .clone()
}

/// Whether `name` is a temporary file this process writes now.
fn ours(name: &str) -> bool {
    name.rsplit_once('.')
        .is_some_and(|(_, n)| n.len() == 15 && n.ends_with(&pid_suffix()))
}

fn put_u64(h: &mut [u8], at: usize, v: u64) {
    h[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

fn put_i64(h: &mut [u8], at: usize, v: i64) {
    h[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

fn get_i64(h: &[u8], at: usize) -> i64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&h[at..at + 8]);
    i64::from_le_bytes(b)
}

fn get_u16(h: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([h[at], h[at + 1]])
}

/// nginx's `ngx_crc32_long`: CRC-32 as zlib computes it.
fn crc32(data: &[u8]) -> u32 {
    let mut c = libdeflater::Crc::new();
    c.update(data);
    c.sum()
}

/// The md5 that names the variant of the entry `main` a request is for: the entry's key and
/// the request's values of the fields its `Vary` names, as nginx computes it (zeros for an
/// entry that does not vary).
pub(super) fn variant(
    main: &[u8; 16],
    vary: &[u8],
    head: &portcullis_http::RequestHead,
) -> [u8; 16] {
    if vary.is_empty() {
        return [0; 16];
    }
    let mut md5 = Md5::new();
    md5.update(main);
    let lower = vary.to_ascii_lowercase();
    for name in lower
        .split(|&b| b == b',' || b == b' ')
        .filter(|n| !n.is_empty())
    {
        md5.update(name);
        md5.update(b":");
        let mut first = true;
        for (n, v) in head.headers() {
            if n.as_bytes().eq_ignore_ascii_case(name) {
                if !first {
                    md5.update(b",");
                }
                // Spaces do not make another variant.
                let v: Vec<u8> = v.iter().copied().filter(|&b| b != b' ').collect();
                md5.update(&v);
                first = false;
            }
        }
        md5.update(b"\r\n");
    }
    md5.finalize().into()
}

/// An entry found on disk: its file, header, and the first bytes read of it; shared by the
/// requests of a worker while it does not change.
#[derive(Clone)]
pub(crate) struct Entry(std::rc::Rc<Data>);

#[derive(Clone)]
pub(crate) struct Data {
    file: Arc<File>,
    path: PathBuf,
    header: Vec<u8>,
    /// What was read at once: the header, key, head and the start of the body.
    first: Vec<u8>,
    len: u64,
    head: ResponseHead,
}

impl std::ops::Deref for Entry {
    type Target = Data;
    fn deref(&self) -> &Data {
        &self.0
    }
}

/// The entries a worker read last, each with the version of its node then: a hit on one
/// that did not change reads no file. A copy is kept for [`HOT_TIME`] at most, so that an
/// entry removed behind the server's back (a purge with `rm`) is let go of soon, its
/// descriptor with it, as nginx's `open_file_cache_valid` does for the files it keeps open.
#[derive(Default)]
pub(crate) struct Hot {
    entries: HashMap<(u64, [u8; 16]), (u64, Instant, Entry)>,
}

/// Most entries a worker keeps; each holds at most [`FIRST_READ`] bytes and a descriptor.
const HOT_ENTRIES: usize = 256;
/// How long a worker keeps a copy of an entry.
const HOT_TIME: std::time::Duration = std::time::Duration::from_secs(5);

impl Hot {
    fn get(&self, id: &(u64, [u8; 16]), version: u64) -> Option<Entry> {
        self.entries
            .get(id)
            .filter(|(v, at, _)| *v == version && at.elapsed() < HOT_TIME)
            .map(|(_, _, e)| e.clone())
    }

    fn put(&mut self, id: (u64, [u8; 16]), version: u64, entry: Entry) {
        if self.entries.len() >= HOT_ENTRIES {
            self.sweep(Instant::now());
            if self.entries.len() >= HOT_ENTRIES {
                self.entries.clear();
            }
        }
        self.entries.insert(id, (version, Instant::now(), entry));
    }

    /// Lets go of the copies kept too long.
    pub(crate) fn sweep(&mut self, now: Instant) {
        self.entries
            .retain(|_, (_, at, _)| now.duration_since(*at) < HOT_TIME);
    }
}

impl Entry {
    fn read(file: File, path: PathBuf, key: &[u8]) -> Result<Entry, &'static str> {
        let mut first = vec![0u8; FIRST_READ];
        let mut got = 0;
        while got < FIRST_READ {
            match file.read_at(&mut first[got..], got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(_) => return Err("cannot be read"),
            }
        }
        first.truncate(got);
        // What was read is all of a small file; a larger one says its length.
        let len = match got {
            FIRST_READ => file.metadata().map_err(|_| "cannot be read")?.len(),
            _ => got as u64,
        };
        if first.len() < HEADER {
            return Err("is too small");
        }
        if first[..8] != VERSION.to_le_bytes() {
            return Err("version mismatch");
        }
        let header_start = usize::from(get_u16(&first, 54));
        let body_start = usize::from(get_u16(&first, 56));
        let key_end = HEADER + KEY_PREFIX.len() + key.len();
        if first[48..52] != crc32(key).to_le_bytes()
            || header_start != key_end + 1
            || first.get(HEADER + KEY_PREFIX.len()..key_end) != Some(key)
        {
            return Err("has md5 collision");
        }
        if body_start < header_start || body_start > first.len() || (body_start as u64) > len {
            return Err("has too long header");
        }
        let mut raw = bytes::BytesMut::from(&first[header_start..body_start]);
        let head = match portcullis_http::parse_response_head(&mut raw, body_start) {
            Ok(Some(h)) => h,
            _ => return Err("has an invalid head"),
        };
        Ok(Entry(std::rc::Rc::new(Data {
            file: Arc::new(file),
            path,
            header: first[..HEADER].to_vec(),
            first,
            len,
            head,
        })))
    }

    fn valid_sec(&self) -> i64 {
        get_i64(&self.header, 8)
    }

    pub(crate) fn is_fresh(&self) -> bool {
        self.valid_sec() >= now_secs()
    }

    /// Whether the entry's `stale-if-error` time still covers it.
    pub(super) fn error_grace(&self) -> bool {
        let error = get_i64(&self.header, 24);
        error != 0 && self.valid_sec() + error >= now_secs()
    }

    /// Whether the entry's `stale-while-revalidate` time still covers it.
    pub(super) fn updating_grace(&self) -> bool {
        let updating = get_i64(&self.header, 16);
        updating != 0 && self.valid_sec() + updating >= now_secs()
    }

    /// The variant a request is for, when it is not the one this entry holds.
    pub(super) fn other_variant(&self, head: &portcullis_http::RequestHead) -> Option<[u8; 16]> {
        let len = usize::from(self.header[187]).min(VARY_LEN);
        if len == 0 {
            return None;
        }
        let vary = &self.header[188..188 + len];
        let mut main = [0u8; 16];
        main.copy_from_slice(&Md5::digest(self.key()));
        let want = variant(&main, vary, head);
        (want[..] != self.header[316..332]).then_some(want)
    }

    fn key(&self) -> &[u8] {
        let start = HEADER + KEY_PREFIX.len();
        let end = usize::from(get_u16(&self.header, 54)) - 1;
        &self.first[start..end]
    }

    /// The stored response's status.
    pub(super) fn status(&self) -> u16 {
        self.head.status()
    }

    /// `If-Modified-Since` and `If-None-Match` lines from the entry's Last-Modified and
    /// ETag, for a revalidation.
    pub(super) fn conditions(&self) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        let last_modified = get_i64(&self.header, 32);
        if last_modified != -1 {
            let date = crate::files::date::fmt_http_date(crate::files::date::from_unix_secs(
                last_modified,
            ));
            out.extend_from_slice(b"If-Modified-Since: ");
            out.extend_from_slice(date.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        let etag_len = usize::from(self.header[58]).min(ETAG_LEN);
        if etag_len > 0 {
            out.extend_from_slice(b"If-None-Match: ");
            out.extend_from_slice(&self.header[59..59 + etag_len]);
            out.extend_from_slice(b"\r\n");
        }
        (!out.is_empty()).then_some(out)
    }

    /// Makes the entry fresh for `fresh`, in its file too.
    /// Whether the file was written: not when another entry took its place meanwhile.
    pub(super) fn refresh(&mut self, fresh: &Fresh) -> bool {
        let data = std::rc::Rc::make_mut(&mut self.0);
        let read_as = data.header.clone();
        put_i64(&mut data.header, 8, fresh.valid_sec);
        put_i64(&mut data.header, 16, fresh.updating_sec);
        put_i64(&mut data.header, 24, fresh.error_sec);
        put_i64(&mut data.header, 40, fresh.date);
        // Written over the header in place, as nginx updates an entry a 304 revalidated,
        // once the file is seen to be still the one read ("cache file content changed").
        let Ok(f) = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&data.path)
        else {
            return false;
        };
        let mut now = vec![0u8; HEADER];
        if f.read_exact_at(&mut now, 0).is_err() || now != read_as {
            return false;
        }
        f.write_all_at(&data.header[8..48], 8).is_ok()
    }

    /// The stored head, as the upstream sent it.
    pub(crate) fn head(&self) -> &ResponseHead {
        &self.head
    }

    /// The body's length, and the bytes of it read with the head.
    pub(crate) fn body(&self) -> (u64, &[u8]) {
        let start = usize::from(get_u16(&self.header, 56));
        (self.len - start as u64, &self.first[start..])
    }

    /// The file and where the body bytes not read yet start.
    pub(crate) fn rest(&self) -> (Arc<File>, u64) {
        (self.file.clone(), self.first.len() as u64)
    }

    /// Where in the file the body starts.
    pub(crate) fn body_start(&self) -> u64 {
        u64::from(get_u16(&self.header, 56))
    }

    /// `len` bytes of the body from `start`.
    pub(crate) fn read_body(&self, start: u64, len: u64) -> std::io::Result<Vec<u8>> {
        let at = self.body_start() + start;
        let mut out = vec![0u8; usize::try_from(len).unwrap_or(0)];
        let mut got = 0;
        while got < out.len() {
            let pos = at + got as u64;
            let n = match usize::try_from(pos).ok().and_then(|p| self.first.get(p..)) {
                Some(mem) if !mem.is_empty() => {
                    let n = mem.len().min(out.len() - got);
                    out[got..got + n].copy_from_slice(&mem[..n]);
                    n
                }
                _ => self.file.read_at(&mut out[got..], pos)?,
            };
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            got += n;
        }
        Ok(out)
    }
}

/// An entry being written.
pub(crate) struct Store {
    file: File,
    temp: PathBuf,
    path: PathBuf,
    zone: Arc<CachePath>,
    name: [u8; 16],
    /// The body's length when the upstream said it.
    expect: Option<u64>,
    written: u64,
    failed: bool,
    /// The file's bytes before the body.
    head_len: u64,
}

impl Store {
    pub(super) fn new(
        file: File,
        temp: PathBuf,
        path: PathBuf,
        zone: Arc<CachePath>,
        name: [u8; 16],
        expect: Option<u64>,
    ) -> Store {
        let head_len = file.metadata().map_or(0, |m| m.len());
        Store {
            file,
            temp,
            path,
            zone,
            name,
            expect,
            written: 0,
            failed: false,
            head_len,
        }
    }

    pub(super) fn write(&mut self, data: &[u8]) {
        if !self.failed && !data.is_empty() {
            self.failed = self.file.write_all(data).is_err();
            self.written += data.len() as u64;
        }
    }

    /// The body is whole: the entry takes its place, unless it is not what the upstream
    /// announced.
    pub(super) fn commit(mut self) {
        let whole = !self.failed && self.expect.is_none_or(|n| n == self.written);
        if whole && std::fs::rename(&self.temp, &self.path).is_ok() {
            self.zone.stored(&self.name, self.head_len + self.written);
            // Nothing left to remove.
            self.failed = true;
            self.temp = PathBuf::new();
        }
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        if !self.temp.as_os_str().is_empty() {
            let _ = std::fs::remove_file(&self.temp);
        }
    }
}

/// The manager of one zone, for as long as a configuration uses it: loads the entries the
/// directory holds, then keeps the cache within its limits.
fn manage(zone: Weak<Zone<Keys>>) {
    let Some(z) = zone.upgrade() else { return };
    let limits = z.lock().limits.clone();
    drop(z);
    load(&zone, &limits.dir, limits.levels.len());
    loop {
        std::thread::sleep(MANAGER_SLEEP);
        let Some(z) = zone.upgrade() else { return };
        let mut keys = z.lock();
        let now = Instant::now();
        let inactive = keys.limits.inactive;
        let expired: Vec<[u8; 16]> = keys
            .nodes
            .iter()
            .filter(|(_, n)| now.duration_since(n.accessed) >= inactive)
            .map(|(k, _)| *k)
            .collect();
        for k in expired {
            keys.remove(&k);
        }
        let over = keys.limits.max_size != 0 && keys.size > keys.limits.max_size;
        let low = keys.limits.min_free != 0 && free_space(&keys.limits.dir) < keys.limits.min_free;
        if over || low {
            // Least recently used first, until the cache is within its size (and, for
            // min_free, a sixteenth of it at a time between looks at the disk).
            let files = keys.nodes.values().filter(|n| n.size > 0).count();
            let batch = if low { (files / 16).max(1) } else { files };
            for md5 in keys.oldest(batch, |n| n.size > 0) {
                if !low && keys.size <= keys.limits.max_size {
                    break;
                }
                keys.remove(&md5);
            }
        }
    }
}

/// Counts the entries a directory holds in the zone and removes what no entry is (the
/// temporary files of a write a crash cut short, not the writes of this process, which may
/// be under way), as nginx's cache loader does.
fn load(zone: &Weak<Zone<Keys>>, dir: &Path, depth: usize) {
    let Ok(list) = std::fs::read_dir(dir) else {
        return;
    };
    for e in list.flatten() {
        let Ok(t) = e.file_type() else { continue };
        let path = e.path();
        if t.is_dir() && depth > 0 {
            load(zone, &path, depth - 1);
            continue;
        }
        let name = e.file_name();
        let md5 = name.to_str().and_then(unhex);
        match md5 {
            Some(md5) if t.is_file() && depth == 0 => {
                let size = e.metadata().map_or(0, |m| m.len());
                let Some(z) = zone.upgrade() else { return };
                let mut keys = z.lock();
                let size = keys.limits.on_disk(size);
                // A node a request made before the loader came has no size yet.
                if let Some(n) = keys.nodes.get_mut(&md5).filter(|n| n.size == 0) {
                    n.size = size;
                    keys.size += size;
                } else if !keys.nodes.contains_key(&md5) {
                    keys.make_room(1);
                    let version = keys.version();
                    keys.nodes.insert(
                        md5,
                        Node {
                            uses: 1,
                            accessed: Instant::now(),
                            size,
                            version,
                            updating: None,
                        },
                    );
                    keys.size += size;
                }
            }
            // A write of this process's is under way there: not a crash's leftover.
            _ if t.is_file() && !name.to_str().is_some_and(ours) => {
                let _ = std::fs::remove_file(&path);
            }
            _ => {}
        }
    }
}

/// Bytes free on the file system of `dir`.
/// nginx's `ngx_fs_bsize`: the block size of the file system `dir` is on (512 when it says
/// something that is not a multiple of 512).
fn fs_block_size(dir: &Path) -> u64 {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return 512;
    };
    // SAFETY: a statvfs is plain data for which all zeroes is a valid value.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid C string and `s` a statvfs the call fills.
    if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0
        || s.f_bsize == 0
        || !s.f_bsize.is_multiple_of(512)
        // A network file system says its transfer size: nginx takes 512 then.
        || s.f_bsize > 4096
    {
        return 512;
    }
    s.f_bsize
}

fn free_space(dir: &Path) -> u64 {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return u64::MAX;
    };
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid C string and `s` a statvfs the call fills.
    if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
        return u64::MAX;
    }
    s.f_bavail.saturating_mul(s.f_frsize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_take_the_name_from_its_end() {
        let md5: [u8; 16] = Md5::digest(b"httplocalhost/").into();
        let name = hex(&md5);
        let p = file_path(Path::new("/c"), &[1, 2], &md5);
        let expect = format!("/c/{}/{}/{name}", &name[31..], &name[29..31]);
        assert_eq!(p, PathBuf::from(expect));
        assert_eq!(unhex(&name), Some(md5));
        assert_eq!(unhex("0000000001"), None);
        let temp = format!("{name}.{}", temp_number());
        assert!(ours(&temp), "{temp}");
        assert!(!ours(&format!("{name}.000000000100000")) || pid_suffix() == "00000");
        assert!(!ours("0000000001"));
    }

    #[test]
    fn crc32_is_zlibs() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    }
}
