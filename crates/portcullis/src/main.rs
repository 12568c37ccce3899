//! `portcullis`: nginx's command line over the portcullis server.
//!
//! It reads the same flags as nginx and answers in nginx's words, so that scripts, service
//! files and habits written for nginx keep working:
//!
//! - [`cli`] parses the flags, [`version`] answers `-v`, `-V` and `-h`;
//! - [`config`] finds the configuration (`-c`, `-p`, or the built-in [`default_config`])
//!   and reads it for `-t`, for `-s`, at startup and on reload;
//! - [`master`] runs the server and turns signals into reloads and stops;
//! - [`process`] does the operating-system work: daemon, pid file, limits, `kill`.

mod cli;
mod config;
mod default_config;
mod master;
mod process;
mod version;

use std::alloc::{GlobalAlloc, Layout};
use std::io::Write;
use std::process::ExitCode;

use portcullis_server::Level;

use crate::config::Setup;
use crate::process::{say, Failure};

/// mimalloc instead of glibc's malloc: a request's short-lived buffers come from the worker
/// thread's own free lists, without the atomic operations and bin sorting glibc does
/// (BENCHMARKS.md, "The proxy path, measured again on an Intel machine", has the measurement).
#[global_allocator]
static ALLOCATOR: Mimalloc = Mimalloc;

/// Every mimalloc block is aligned to a word: its size classes are whole words.
const WORD: usize = std::mem::size_of::<usize>();

/// mimalloc's plain calls wherever a word's alignment is enough, which is nearly every Rust
/// allocation. Its aligned calls, which the `mimalloc` crate makes for all of them, take a
/// slower path for blocks over 1 KB, and over-allocate for those whose size class is not a
/// power of two.
struct Mimalloc;

// SAFETY: the plain calls return blocks aligned to a word, so to `layout.align()` when that is
// at most a word; larger alignments go to the aligned calls. Every block is freed by mi_free.
unsafe impl GlobalAlloc for Mimalloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        use libmimalloc_sys::{mi_malloc, mi_malloc_aligned};
        let p = match layout.align() <= WORD {
            true => unsafe { mi_malloc(layout.size()) },
            false => unsafe { mi_malloc_aligned(layout.size(), layout.align()) },
        };
        p.cast()
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        use libmimalloc_sys::{mi_zalloc, mi_zalloc_aligned};
        let p = match layout.align() <= WORD {
            true => unsafe { mi_zalloc(layout.size()) },
            false => unsafe { mi_zalloc_aligned(layout.size(), layout.align()) },
        };
        p.cast()
    }

    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        unsafe { libmimalloc_sys::mi_free(ptr.cast()) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        use libmimalloc_sys::{mi_realloc, mi_realloc_aligned};
        let p = match layout.align() <= WORD {
            true => unsafe { mi_realloc(ptr.cast(), new_size) },
            false => unsafe { mi_realloc_aligned(ptr.cast(), new_size, layout.align()) },
        };
        p.cast()
    }
}

/// Gives the calling thread's free pages back to the system at once: mimalloc does so on its
/// own only when the thread next allocates or frees, and only past a delay. Forced, since the
/// unforced collection left half of what parked connections had freed resident (0.59 KB per
/// idle connection against 0.33 with `bench/idle-memory.sh`).
fn release_memory() {
    // SAFETY: mi_collect takes no pointers and may be called from any thread at any time.
    unsafe { libmimalloc_sys::mi_collect(true) }
}

fn main() -> ExitCode {
    portcullis_server::set_memory_release(release_memory);
    let opts = match cli::parse(std::env::args_os().skip(1)) {
        Ok(opts) => opts,
        Err(e) => {
            say(e);
            return ExitCode::FAILURE;
        }
    };

    // As nginx: the version flags answer and exit, unless a test was asked for too.
    if opts.version {
        let _ = std::io::stderr().write_all(version::text(opts.help, opts.configure).as_bytes());
        if !opts.test {
            return ExitCode::SUCCESS;
        }
    }

    let setup = Setup::new(&opts);
    let (loaded, compiled) = match setup.read(|warning| say(Failure::new(Level::Warn, warning))) {
        Ok(read) => read,
        Err(e) => {
            say(Failure::new(Level::Emerg, e.to_string()));
            if opts.test {
                say(setup.test_failed());
            }
            return ExitCode::FAILURE;
        }
    };

    if opts.test {
        return config::report_test(&setup, &loaded, opts.quiet, opts.dump);
    }
    // The parsed text is not needed past this point; a long-running process should not
    // keep a copy of every configuration file.
    drop(loaded);

    if let Some(signal) = opts.signal {
        return match master::send(&setup, &compiled, signal) {
            Ok(()) => ExitCode::SUCCESS,
            Err(failure) => {
                say(failure);
                ExitCode::FAILURE
            }
        };
    }

    master::run(&setup, compiled)
}
