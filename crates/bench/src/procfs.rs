//! CPU time of a process tree, from /proc.
//!
//! A system under test is a root process and whatever it forks (nginx's master and workers,
//! HAProxy's or portcullis's threads). /proc/PID/stat covers all threads of a process, so
//! summing utime + stime (and the children's cutime + cstime, for workers that exited) over
//! the tree gives the CPU the whole system spent; stime + cstime is the kernel's part of it.

use std::collections::HashMap;
use std::fs;

/// The root `pid` and all its descendants, root first.
pub fn tree(pid: u32) -> Vec<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    if let Ok(entries) = fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Some(child) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
                continue;
            };
            // A process may exit between the listing and the read: skip it.
            if let Some(fields) = stat_fields(child) {
                if let Some(parent) = fields.get(1).and_then(|p| p.parse().ok()) {
                    children.entry(parent).or_default().push(child);
                }
            }
        }
    }
    let mut out = vec![pid];
    let mut i = 0;
    while let Some(&p) = out.get(i) {
        if let Some(kids) = children.get(&p) {
            out.extend(kids);
        }
        i += 1;
    }
    out
}

/// The fields of /proc/PID/stat after the command name, which may hold spaces and
/// parentheses: field 3 (state) is index 0.
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &text[text.rfind(')')? + 1..];
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

/// CPU time of a process tree, in clock ticks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ticks {
    /// utime + cutime: in the programs themselves.
    pub user: u64,
    /// stime + cstime: in the kernel on their behalf.
    pub system: u64,
}

impl Ticks {
    pub fn total(self) -> u64 {
        self.user + self.system
    }

    /// What was spent from `earlier` to `self`.
    pub fn since(self, earlier: Ticks) -> Ticks {
        Ticks {
            user: self.user.saturating_sub(earlier.user),
            system: self.system.saturating_sub(earlier.system),
        }
    }
}

/// The CPU time of `pid` and its descendants, children that exited included.
pub fn cpu_ticks(pid: u32) -> Ticks {
    tree(pid)
        .into_iter()
        .filter_map(stat_fields)
        .map(|fields| {
            // utime is stat field 14, index 11; stime, cutime, cstime follow.
            let field = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
            Ticks {
                user: field(11).unwrap_or(0) + field(13).unwrap_or(0),
                system: field(12).unwrap_or(0) + field(14).unwrap_or(0),
            }
        })
        .fold(Ticks::default(), |sum, t| Ticks {
            user: sum.user + t.user,
            system: sum.system + t.system,
        })
}

/// Whether `pid` is still running (and not a zombie).
pub fn alive(pid: u32) -> bool {
    stat_fields(pid).is_some_and(|f| f.first().is_some_and(|state| state != "Z"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process_is_found_and_uses_cpu() {
        let me = std::process::id();
        assert_eq!(tree(me).first(), Some(&me));
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        assert!(x != 1);
        let spent = cpu_ticks(me);
        assert!(spent.user > 0, "{spent:?}");
        assert_eq!(spent.since(spent).total(), 0);
        assert!(alive(me));
        assert!(!alive(u32::MAX));
    }
}
