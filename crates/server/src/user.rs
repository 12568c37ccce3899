//! `user`: whom the workers serve requests as when the server starts as root.
//!
//! nginx's master keeps root to bind ports and read keys and logs, and its worker processes
//! switch to the `user` directive's user and group (`nobody` when there is none) before
//! their first request. portcullis's workers are threads, and on Linux credentials belong to
//! each thread: a worker thread switches its own with the raw `setgroups`, `setresgid` and
//! `setresuid` system calls (glibc's wrappers would switch every thread of the process), so
//! the main thread keeps root for reloads, as nginx's master does, and every request is
//! served without it. A thread a worker starts inherits what it has by then.
//!
//! Names are resolved at load, as root, so a missing user or group is a configuration error
//! with its file and line, in nginx's words. Started as another user, there is nothing to
//! switch from: `user` is ignored with nginx's warning.

use std::ffi::CString;
use std::io;

use portcullis_config::{ConfigError, Directive};

/// The calls that take 32-bit ids: on 32-bit x86 and ARM the plain numbers are the old
/// 16-bit-id calls, which would cut an id above 65535 to another.
#[cfg(any(target_arch = "x86", target_arch = "arm"))]
const SYS_SETGROUPS: libc::c_long = libc::SYS_setgroups32;
#[cfg(any(target_arch = "x86", target_arch = "arm"))]
const SYS_SETRESGID: libc::c_long = libc::SYS_setresgid32;
#[cfg(any(target_arch = "x86", target_arch = "arm"))]
const SYS_SETRESUID: libc::c_long = libc::SYS_setresuid32;
#[cfg(not(any(target_arch = "x86", target_arch = "arm")))]
const SYS_SETGROUPS: libc::c_long = libc::SYS_setgroups;
#[cfg(not(any(target_arch = "x86", target_arch = "arm")))]
const SYS_SETRESGID: libc::c_long = libc::SYS_setresgid;
#[cfg(not(any(target_arch = "x86", target_arch = "arm")))]
const SYS_SETRESUID: libc::c_long = libc::SYS_setresuid;

/// nginx's default user when `user` is absent.
const DEFAULT_USER: &str = "nobody";
/// nginx's default group: `nobody` where such a group exists, else `nogroup` (Debian's).
const DEFAULT_GROUPS: [&str; 2] = ["nobody", "nogroup"];
/// Most supplementary groups asked of `getgrouplist`; Linux's own limit is 65536.
const MAX_GROUPS: usize = 65536;

/// The credentials a worker thread takes before it serves anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Credentials {
    pub user: String,
    pub uid: libc::uid_t,
    pub gid: libc::gid_t,
    /// The user's supplementary groups with `gid`, as `initgroups` makes them.
    pub groups: Vec<libc::gid_t>,
}

impl Credentials {
    /// The workers' credentials for the `user` directive `d` (or nginx's default without
    /// one), `None` when the server does not run as root. `warn` takes nginx's warning for a
    /// `user` that cannot apply.
    pub fn for_directive(
        d: Option<&Directive>,
        warn: &mut dyn FnMut(String),
    ) -> Result<Option<Credentials>, ConfigError> {
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            if let Some(d) = d {
                warn(format!(
                    "the \"user\" directive makes sense only if the master process runs with super-user privileges, ignored in {}",
                    d.span
                ));
            }
            return Ok(None);
        }
        let Some(d) = d else {
            return Ok(Some(Credentials::default_user()?));
        };
        let user = d.arg(0);
        let group = d.args.get(1).map_or(user, |a| a.value.as_str());
        let uid = lookup_user(user)
            .ok_or_else(|| ConfigError::at(d, format!("getpwnam(\"{user}\") failed")))?;
        let gid = lookup_group(group)
            .ok_or_else(|| ConfigError::at(d, format!("getgrnam(\"{group}\") failed")))?;
        Credentials::new(user, uid, gid)
            .map(Some)
            .map_err(|e| ConfigError::at(d, e))
    }

    fn default_user() -> Result<Credentials, ConfigError> {
        let no_default = |what: String| ConfigError {
            message: what,
            span: None,
        };
        let uid = lookup_user(DEFAULT_USER)
            .ok_or_else(|| no_default(format!("getpwnam(\"{DEFAULT_USER}\") failed")))?;
        let gid = DEFAULT_GROUPS
            .iter()
            .find_map(|g| lookup_group(g))
            .ok_or_else(|| no_default(format!("getgrnam(\"{}\") failed", DEFAULT_GROUPS[1])))?;
        Credentials::new(DEFAULT_USER, uid, gid).map_err(no_default)
    }

    fn new(user: &str, uid: libc::uid_t, gid: libc::gid_t) -> Result<Credentials, String> {
        let groups = group_list(user, gid)
            .ok_or_else(|| format!("getgrouplist(\"{user}\", {gid}) failed"))?;
        Ok(Credentials {
            user: user.to_owned(),
            uid,
            gid,
            groups,
        })
    }

    /// Switches the calling thread, and only it, to these credentials: the groups first,
    /// then the group, then the user, after which it cannot switch back. nginx's error
    /// texts on failure.
    pub fn apply_to_this_thread(&self) -> io::Result<()> {
        let fail = |call: String| {
            let e = io::Error::last_os_error();
            io::Error::new(
                e.kind(),
                format!("{call} failed {}", crate::log::os_error(&e)),
            )
        };
        // SAFETY: the pointer and length describe `self.groups`, which outlives the call; the
        // raw calls change this thread's credentials only and touch no memory of ours.
        unsafe {
            if libc::syscall(SYS_SETGROUPS, self.groups.len(), self.groups.as_ptr()) != 0 {
                return Err(fail(format!("initgroups({}, {})", self.user, self.gid)));
            }
            if libc::syscall(SYS_SETRESGID, self.gid, self.gid, self.gid) != 0 {
                return Err(fail(format!("setgid({})", self.gid)));
            }
            if libc::syscall(SYS_SETRESUID, self.uid, self.uid, self.uid) != 0 {
                return Err(fail(format!("setuid({})", self.uid)));
            }
        }
        Ok(())
    }
}

/// The uid of user `name`.
fn lookup_user(name: &str) -> Option<libc::uid_t> {
    let cname = CString::new(name).ok()?;
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    // SAFETY: passwd is plain data that getpwnam_r fills; buf is valid for its length.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call; the result points into pwd or is null.
    let rc = unsafe {
        libc::getpwnam_r(
            cname.as_ptr(),
            &mut pwd,
            buf.as_mut_ptr(),
            buf.len(),
            &mut found,
        )
    };
    (rc == 0 && !found.is_null()).then_some(pwd.pw_uid)
}

/// The gid of group `name`.
fn lookup_group(name: &str) -> Option<libc::gid_t> {
    let cname = CString::new(name).ok()?;
    let mut buf = vec![0 as libc::c_char; 64 * 1024];
    // SAFETY: group is plain data that getgrnam_r fills; buf is valid for its length.
    let mut grp: libc::group = unsafe { std::mem::zeroed() };
    let mut found = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call; the result points into grp or is null.
    let rc = unsafe {
        libc::getgrnam_r(
            cname.as_ptr(),
            &mut grp,
            buf.as_mut_ptr(),
            buf.len(),
            &mut found,
        )
    };
    (rc == 0 && !found.is_null()).then_some(grp.gr_gid)
}

/// The groups `initgroups(user, gid)` would give: `gid` and every group listing `user`.
fn group_list(user: &str, gid: libc::gid_t) -> Option<Vec<libc::gid_t>> {
    let cname = CString::new(user).ok()?;
    let mut groups: Vec<libc::gid_t> = vec![0; 64];
    loop {
        let mut n = libc::c_int::try_from(groups.len()).ok()?;
        // SAFETY: `groups` holds `n` entries; getgrouplist writes at most that many and sets
        // `n` to the number it has (or needs, when it returns -1).
        let rc = unsafe { libc::getgrouplist(cname.as_ptr(), gid, groups.as_mut_ptr(), &mut n) };
        let n = usize::try_from(n).ok()?;
        if rc >= 0 {
            groups.truncate(n);
            return Some(groups);
        }
        if n <= groups.len() || n > MAX_GROUPS {
            return None;
        }
        groups.resize(n, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_resolves_with_its_groups() {
        assert_eq!(lookup_user("root"), Some(0));
        assert_eq!(lookup_group("root"), Some(0));
        let groups = group_list("root", 0).expect("groups");
        assert!(groups.contains(&0), "{groups:?}");
    }

    #[test]
    fn unknown_names_are_none() {
        assert_eq!(lookup_user("no-such-user-portcullis"), None);
        assert_eq!(lookup_group("no-such-group-portcullis"), None);
        assert_eq!(lookup_user("nul\0inside"), None);
    }
}
