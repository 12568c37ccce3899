//! Futures boxed where they are built.

use std::future::Future;
use std::pin::Pin;

/// The future `make` returns, in a box allocated before `make` is called, so that the future
/// is written straight into it. `Box::pin(f())` builds the future on the stack first and then
/// copies all of it, the room of every state it can be in, into a box allocated after: for a
/// request's future, 4 KB per request, most of it not yet written.
#[inline(always)]
pub(crate) fn boxed<F: Future>(make: impl FnOnce() -> F) -> Pin<Box<F>> {
    let mut slot = Box::<F>::new_uninit();
    slot.write(make());
    // SAFETY: written on the line above.
    Box::into_pin(unsafe { slot.assume_init() })
}
