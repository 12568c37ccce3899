//! The per-worker open-file cache, nginx's `open_file_cache` idea.
//!
//! A hit costs one `stat` of the path: when device, inode, size and mtime (to the
//! nanosecond) are those of the cached entry, the open descriptor, the ETag and, for small
//! files, the contents are reused, so a hot small file is served without `open`, `read` or
//! `close`. Anything else reopens the file. Entries are evicted by the clock algorithm, an
//! LRU approximation whose hits only set a flag.

use std::collections::HashMap;
use std::fs::{File, Metadata, OpenOptions};
use std::hash::{BuildHasherDefault, Hasher};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::rc::Rc;
use std::time::SystemTime;
use std::time::{Duration, Instant};

use bytes::Bytes;

/// Files up to this size are read whole into the cache and served from memory. 64 KiB
/// holds the typical page, script and icon, while a full cache of them stays within tens of
/// megabytes per worker; larger files are sent from the descriptor with sendfile.
pub const SMALL_FILE_MAX: u64 = 64 * 1024;

/// A default bound for `FileCache::new`: enough entries for a site's hot set, few enough
/// that the descriptors fit in a default `ulimit -n` alongside the connections.
pub const CACHE_ENTRIES: usize = 1024;

/// An opened regular file and what responses need to know about it.
#[derive(Debug)]
pub struct CachedFile {
    pub size: u64,
    /// The modification time, to the nanosecond; `Last-Modified` and the date conditions use
    /// its whole seconds.
    pub mtime: SystemTime,
    /// nginx's ETag: `"<mtime seconds in hex>-<size in hex>"`, quotes included.
    pub etag: String,
    /// The `Last-Modified` value, formatted once.
    pub last_modified: String,
    /// The whole file when it is at most `SMALL_FILE_MAX` bytes.
    pub contents: Option<Bytes>,
    pub file: File,
    /// `st_mtime`: whole seconds, the unit of HTTP dates.
    pub(super) mtime_secs: i64,
    identity: Identity,
}

/// What a fresh `stat` must show for a cached entry to be still valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Identity {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_secs: i64,
    mtime_nsec: i64,
}

impl Identity {
    fn of(meta: &Metadata) -> Self {
        Identity {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime_secs: meta.mtime(),
            mtime_nsec: meta.mtime_nsec(),
        }
    }
}

/// The outcome of looking a path up, already sorted into the status the core answers with.
#[derive(Debug)]
pub enum Lookup {
    /// A regular file.
    File(Rc<CachedFile>),
    Directory,
    /// ENOENT, ENOTDIR, ENAMETOOLONG, or neither file nor directory (a FIFO, a device,
    /// a socket): 404, as nginx answers.
    NotFound,
    /// EACCES, or ELOOP/EMLINK from a symlink: 403, as nginx answers.
    Forbidden,
    /// Anything else: 500.
    Error(io::Error),
}

/// Open files by path, for one worker thread (it holds `Rc`s, so it is not `Send`).
#[derive(Debug)]
pub struct FileCache {
    /// Keyed by the path's bytes with FNV-1a: hashing a `Path` walks its components, which
    /// costs more than the lookup it serves.
    index: HashMap<Rc<[u8]>, usize, BuildHasherDefault<Fnv>>,
    slots: Vec<Slot>,
    /// The clock hand: the next slot considered for eviction.
    hand: usize,
    max_entries: usize,
    /// How long an entry is trusted without a fresh stat.
    valid: Duration,
}

#[derive(Debug)]
struct Slot {
    path: Rc<[u8]>,
    file: Rc<CachedFile>,
    /// Set on every hit, cleared as the hand passes: an entry is evicted only when the hand
    /// finds it unused for a whole turn.
    referenced: bool,
    /// When a stat last showed the file unchanged.
    checked: Instant,
}

impl FileCache {
    /// A cache of at most `max_entries` files; 0 caches nothing and opens on every lookup.
    /// Every lookup stats the path to see whether the file changed.
    pub fn new(max_entries: usize) -> Self {
        Self::with_validity(max_entries, Duration::ZERO)
    }

    /// Like [`FileCache::new`], but an entry checked less than `valid` ago is used without a
    /// stat (nginx's open_file_cache_valid): a changed file may be served as it was for that
    /// long, and a stat per request is saved.
    pub fn with_validity(max_entries: usize, valid: Duration) -> Self {
        FileCache {
            index: HashMap::default(),
            slots: Vec::new(),
            hand: 0,
            max_entries,
            valid,
        }
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Stats `path` (following symlinks) and returns the cached file if it is unchanged,
    /// else opens it afresh and caches that.
    pub fn lookup(&mut self, path: &Path) -> Lookup {
        let now = Instant::now();
        if !self.valid.is_zero() {
            if let Some(&i) = self.index.get(path.as_os_str().as_bytes()) {
                let slot = &mut self.slots[i];
                if now.duration_since(slot.checked) < self.valid {
                    slot.referenced = true;
                    return Lookup::File(Rc::clone(&slot.file));
                }
            }
        }
        let meta = match std::fs::metadata(path) {
            Ok(meta) => meta,
            Err(e) => {
                self.forget(path);
                return classify(e);
            }
        };
        if meta.is_dir() {
            self.forget(path);
            return Lookup::Directory;
        }
        if !meta.is_file() {
            self.forget(path);
            return Lookup::NotFound;
        }

        if let Some(&i) = self.index.get(path.as_os_str().as_bytes()) {
            let slot = &mut self.slots[i];
            if slot.file.identity == Identity::of(&meta) {
                slot.referenced = true;
                slot.checked = now;
                return Lookup::File(Rc::clone(&slot.file));
            }
        }

        match open(path) {
            Ok(Some(file)) => {
                let file = Rc::new(file);
                self.insert(path, Rc::clone(&file));
                Lookup::File(file)
            }
            Ok(None) => {
                self.forget(path);
                Lookup::NotFound
            }
            Err(e) => {
                self.forget(path);
                classify(e)
            }
        }
    }

    fn insert(&mut self, path: &Path, file: Rc<CachedFile>) {
        if self.max_entries == 0 {
            return;
        }
        if let Some(&i) = self.index.get(path.as_os_str().as_bytes()) {
            self.slots[i].file = file;
            self.slots[i].checked = Instant::now();
            return;
        }
        let path: Rc<[u8]> = Rc::from(path.as_os_str().as_bytes());
        let slot = Slot {
            path: Rc::clone(&path),
            file,
            referenced: false,
            checked: Instant::now(),
        };
        if self.slots.len() < self.max_entries {
            self.index.insert(path, self.slots.len());
            self.slots.push(slot);
            return;
        }
        let victim = self.advance_hand();
        self.index.remove(&self.slots[victim].path);
        self.index.insert(path, victim);
        self.slots[victim] = slot;
    }

    /// Moves the hand to the first unreferenced slot, clearing flags on the way, and returns
    /// that slot's index with the hand left just past it. Ends within one turn plus one step,
    /// since the first turn clears every flag.
    fn advance_hand(&mut self) -> usize {
        loop {
            let i = self.hand % self.slots.len();
            self.hand = i + 1;
            let slot = &mut self.slots[i];
            if !slot.referenced {
                return i;
            }
            slot.referenced = false;
        }
    }

    /// Drops the entry for a path that no longer names a regular file, closing its
    /// descriptor now rather than at eviction, so a deleted file's space is freed.
    fn forget(&mut self, path: &Path) {
        let Some(i) = self.index.remove(path.as_os_str().as_bytes()) else {
            return;
        };
        self.slots.swap_remove(i);
        if let Some(moved) = self.slots.get(i) {
            self.index.insert(Rc::clone(&moved.path), i);
        }
    }
}

/// Opens `path` and describes what was opened; `None` when it is not a regular file.
fn open(path: &Path) -> io::Result<Option<CachedFile>> {
    // O_NONBLOCK so that a FIFO swapped in after the stat cannot block the worker in open;
    // it changes nothing for regular files.
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    // The identity comes from the descriptor, not from the earlier stat of the path, so it
    // describes exactly the file whose bytes will be sent.
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Ok(None);
    }
    let identity = Identity::of(&meta);
    let contents = if identity.size <= SMALL_FILE_MAX {
        Some(read_whole(&file, identity.size)?)
    } else {
        None
    };
    Ok(Some(CachedFile {
        size: identity.size,
        mtime: meta.modified()?,
        etag: etag(identity.mtime_secs, identity.size),
        last_modified: super::fmt_http_date(meta.modified()?),
        contents,
        file,
        mtime_secs: identity.mtime_secs,
        identity,
    }))
}

/// nginx's `"%xT-%xO"`: lowercase hex, a minus sign before a pre-1970 mtime.
fn etag(mtime_secs: i64, size: u64) -> String {
    let sign = if mtime_secs < 0 { "-" } else { "" };
    format!("\"{sign}{:x}-{size:x}\"", mtime_secs.unsigned_abs())
}

/// Reads `size` bytes from the start of `file`. A file cut short while being read is an
/// error: its cached size would promise bytes that are not there.
fn read_whole(file: &File, size: u64) -> io::Result<Bytes> {
    let mut buf = vec![0; usize::try_from(size).map_err(io::Error::other)?];
    file.read_exact_at(&mut buf, 0)?;
    Ok(Bytes::from(buf))
}

/// Sorts an error from `stat` or `open` into nginx's answer for it.
fn classify(e: io::Error) -> Lookup {
    match e.raw_os_error() {
        Some(libc::ENOENT | libc::ENOTDIR | libc::ENAMETOOLONG) => Lookup::NotFound,
        Some(libc::EACCES | libc::ELOOP | libc::EMLINK) => Lookup::Forbidden,
        // A path with a NUL byte cannot name any file.
        None if e.kind() == io::ErrorKind::InvalidInput => Lookup::NotFound,
        _ => Lookup::Error(e),
    }
}

/// FNV-1a, for short keys on the request path where SipHash's DoS resistance buys nothing:
/// only files that exist are inserted, so a client cannot choose colliding keys, and the
/// table is bounded.
#[derive(Default)]
struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for &b in bytes {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = h;
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::{Duration, UNIX_EPOCH};

    /// A fresh directory under the system temp dir, removed on drop.
    pub(in crate::files) struct TempDir(pub PathBuf);

    impl TempDir {
        pub fn new() -> Self {
            static NEXT: AtomicU32 = AtomicU32::new(0);
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let dir =
                std::env::temp_dir().join(format!("portcullis-static-{}-{n}", std::process::id()));
            std::fs::create_dir_all(&dir).expect("create temp dir");
            TempDir(dir)
        }

        pub fn file(&self, name: &str, contents: &[u8], mtime_secs: u64) -> PathBuf {
            let path = self.0.join(name);
            std::fs::write(&path, contents).expect("write test file");
            set_mtime(&path, mtime_secs);
            path
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn set_mtime(path: &Path, secs: u64) {
        let f = File::options()
            .write(true)
            .open(path)
            .expect("open for mtime");
        f.set_modified(UNIX_EPOCH + Duration::from_secs(secs))
            .expect("set mtime");
    }

    fn file(lookup: Lookup) -> Rc<CachedFile> {
        match lookup {
            Lookup::File(f) => f,
            other => panic!("expected a file, got {other:?}"),
        }
    }

    #[test]
    fn describes_a_file_as_nginx() {
        // nginx sent ETag "5e0d5da5-64" for this mtime and size.
        let dir = TempDir::new();
        let body: Vec<u8> = (0..100u8).map(|i| b'0' + i % 10).collect();
        let path = dir.file("a.txt", &body, 0x5e0d_5da5);
        let f = file(FileCache::new(4).lookup(&path));
        assert_eq!(f.etag, "\"5e0d5da5-64\"");
        assert_eq!(f.size, 100);
        assert_eq!(f.mtime_secs, 0x5e0d_5da5);
        assert_eq!(f.contents.as_deref(), Some(&body[..]));
    }

    #[test]
    fn etag_of_old_files() {
        assert_eq!(etag(-26, 0), "\"-1a-0\"");
        assert_eq!(etag(0, 0x1_0000_0000), "\"0-100000000\"");
    }

    #[test]
    fn hit_reuses_the_entry() {
        let dir = TempDir::new();
        let path = dir.file("a", b"hello", 1_000_000);
        let mut cache = FileCache::new(4);
        let first = file(cache.lookup(&path));
        let second = file(cache.lookup(&path));
        assert!(Rc::ptr_eq(&first, &second));
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn change_invalidates() {
        let dir = TempDir::new();
        let path = dir.file("a", b"hello", 1_000_000);
        let mut cache = FileCache::new(4);
        let old = file(cache.lookup(&path));

        // Same size, new mtime.
        dir.file("a", b"HELLO", 1_000_001);
        let new = file(cache.lookup(&path));
        assert!(!Rc::ptr_eq(&old, &new));
        assert_eq!(new.contents.as_deref(), Some(&b"HELLO"[..]));
        assert_eq!(new.etag, "\"f4241-5\"");

        // Same mtime, new size.
        dir.file("a", b"hello world", 1_000_001);
        let newer = file(cache.lookup(&path));
        assert_eq!(newer.size, 11);
        assert_eq!(newer.contents.as_deref(), Some(&b"hello world"[..]));

        // Same mtime and size, new inode (replaced by rename, as deploy tools do).
        let tmp = dir.file("a.tmp", b"HELLO WORLD", 1_000_001);
        std::fs::rename(&tmp, &path).expect("rename");
        let renamed = file(cache.lookup(&path));
        assert_eq!(renamed.contents.as_deref(), Some(&b"HELLO WORLD"[..]));
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn large_files_are_not_loaded() {
        let dir = TempDir::new();
        let size = SMALL_FILE_MAX as usize;
        let at_limit = dir.file("limit", &vec![7; size], 1);
        let over = dir.file("over", &vec![7; size + 1], 1);
        let mut cache = FileCache::new(4);
        assert_eq!(
            file(cache.lookup(&at_limit))
                .contents
                .as_ref()
                .map(|b| b.len()),
            Some(size)
        );
        let big = file(cache.lookup(&over));
        assert!(big.contents.is_none());
        assert_eq!(big.size, SMALL_FILE_MAX + 1);
    }

    #[test]
    fn directory_missing_and_special_files() {
        let dir = TempDir::new();
        let regular = dir.file("f", b"x", 1);
        let mut cache = FileCache::new(4);
        assert!(matches!(cache.lookup(&dir.0), Lookup::Directory));
        assert!(matches!(
            cache.lookup(&dir.0.join("nope")),
            Lookup::NotFound
        ));
        // ENOTDIR: a path through a regular file.
        assert!(matches!(cache.lookup(&regular.join("x")), Lookup::NotFound));
        assert!(matches!(
            cache.lookup(Path::new("/dev/null")),
            Lookup::NotFound
        ));
        assert!(matches!(
            cache.lookup(Path::new("/tmp/a\0b")),
            Lookup::NotFound
        ));
        let long = dir.0.join("n".repeat(300));
        assert!(matches!(cache.lookup(&long), Lookup::NotFound));
    }

    #[test]
    fn symlink_loop_is_forbidden() {
        let dir = TempDir::new();
        let a = dir.0.join("loop");
        std::os::unix::fs::symlink(&a, &a).expect("symlink");
        assert!(matches!(FileCache::new(4).lookup(&a), Lookup::Forbidden));
    }

    #[test]
    fn unreadable_file_is_forbidden() {
        use std::os::unix::fs::PermissionsExt;
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } == 0 {
            // root bypasses permission bits, so EACCES cannot be provoked; the mapping itself
            // is checked by `errors_map_to_statuses`.
            return;
        }
        let dir = TempDir::new();
        let path = dir.file("secret", b"x", 1);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o000)).expect("chmod");
        assert!(matches!(FileCache::new(4).lookup(&path), Lookup::Forbidden));
    }

    #[test]
    fn errors_map_to_statuses() {
        let os = io::Error::from_raw_os_error;
        assert!(matches!(classify(os(libc::EACCES)), Lookup::Forbidden));
        assert!(matches!(classify(os(libc::ENOENT)), Lookup::NotFound));
        assert!(matches!(classify(os(libc::EIO)), Lookup::Error(_)));
    }

    #[test]
    fn deleted_file_is_forgotten() {
        let dir = TempDir::new();
        let a = dir.file("a", b"a", 1);
        let b = dir.file("b", b"b", 1);
        let mut cache = FileCache::new(4);
        file(cache.lookup(&a));
        file(cache.lookup(&b));
        std::fs::remove_file(&a).expect("remove");
        assert!(matches!(cache.lookup(&a), Lookup::NotFound));
        assert_eq!(cache.len(), 1);
        // The entry moved by the removal is still found under its path.
        let again = file(cache.lookup(&b));
        assert!(Rc::ptr_eq(&again, &file(cache.lookup(&b))));
    }

    #[test]
    fn eviction_spares_recently_used_entries() {
        let dir = TempDir::new();
        let paths: Vec<PathBuf> = (0..4).map(|i| dir.file(&i.to_string(), b"x", 1)).collect();
        let mut cache = FileCache::new(3);
        for p in &paths[..3] {
            file(cache.lookup(p));
        }
        let hot = file(cache.lookup(&paths[0]));
        file(cache.lookup(&paths[3]));
        assert_eq!(cache.len(), 3);
        // Entry 0 was used since it was cached, so entry 1 made room instead.
        assert!(Rc::ptr_eq(&hot, &file(cache.lookup(&paths[0]))));
        assert!(!cache.index.contains_key(paths[1].as_os_str().as_bytes()));
        assert!(cache.index.contains_key(paths[3].as_os_str().as_bytes()));
    }

    #[test]
    fn zero_entries_caches_nothing() {
        let dir = TempDir::new();
        let path = dir.file("a", b"x", 1);
        let mut cache = FileCache::new(0);
        let first = file(cache.lookup(&path));
        assert!(!Rc::ptr_eq(&first, &file(cache.lookup(&path))));
        assert!(cache.is_empty());
    }
}
