//! A connection's timeouts on one timer that stays armed between waits.
//!
//! A keepalive connection waits with a timeout once or twice per request: for the next request
//! from the client, for the upstream's response. A `tokio::time::timeout` per wait inserts an
//! entry into the runtime's timer wheel and removes it again, each time, although the timeout
//! almost never fires. A [`Timer`] keeps one entry per connection instead and moves it only
//! when a wait needs an earlier deadline than the one armed: while requests keep coming, the
//! entry fires once per timeout period, finds that the wait in progress has time left, and is
//! armed again for that wait's deadline. nginx's lazy timers (`NGX_TIMER_LAZY_DELAY`) save the
//! same work.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

/// A wait that ran out of time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimedOut;

/// One timer entry for all of a connection's waits; see the module's text.
#[derive(Debug, Default)]
pub struct Timer {
    /// Armed at the deadline of some wait, never later than the deadline of the wait in
    /// progress. Made when a wait first has to wait: a connection whose reads and writes are
    /// always ready costs no entry.
    sleep: Option<Pin<Box<Sleep>>>,
}

impl Timer {
    pub fn new() -> Timer {
        Timer::default()
    }

    /// Runs `f` for at most `timeout`; the future is polled first, so work that is ready
    /// touches the timer only to compare two instants.
    pub fn run<F: Future>(&mut self, timeout: Duration, f: F) -> Run<'_, F> {
        self.run_until(Instant::now() + timeout, f)
    }

    /// Runs `f` until `deadline` at the latest.
    pub fn run_until<F: Future>(&mut self, deadline: Instant, f: F) -> Run<'_, F> {
        Run {
            sleep: &mut self.sleep,
            deadline,
            f,
        }
    }
}

/// A wait on a [`Timer`]: `f`, cut short at `deadline`. A future of its own rather than an
/// async fn's, which would hold `f` twice (as its argument and as the local it pins), and its
/// caller's async fn twice again: a connection waiting for its next request held four copies
/// of that wait.
#[must_use = "a wait does nothing unless awaited"]
pub struct Run<'t, F> {
    sleep: &'t mut Option<Pin<Box<Sleep>>>,
    deadline: Instant,
    f: F,
}

impl<F: Future> Future for Run<'_, F> {
    type Output = Result<F::Output, TimedOut>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // SAFETY: `f` is pinned with the wait (never moved out of it, and the wait has no
        // Drop of its own); the other fields are not pinned through it.
        let this = unsafe { self.get_unchecked_mut() };
        // SAFETY: as above.
        let f = unsafe { Pin::new_unchecked(&mut this.f) };
        if let Poll::Ready(v) = f.poll(cx) {
            return Poll::Ready(Ok(v));
        }
        // The entry is made, or moved earlier, only when the work has to wait.
        let deadline = this.deadline;
        let sleep = this
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if sleep.deadline() > deadline {
            sleep.as_mut().reset(deadline);
        }
        // Fired: at this wait's deadline, or at an earlier one that a past wait set.
        while sleep.as_mut().poll(cx).is_ready() {
            if Instant::now() >= this.deadline {
                return Poll::Ready(Err(TimedOut));
            }
            sleep.as_mut().reset(this.deadline);
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How long a wait that never finishes lasts on `t` with `timeout`; it must time out.
    async fn time_out(t: &mut Timer, timeout: Duration) -> Duration {
        let start = Instant::now();
        let r = t.run(timeout, std::future::pending::<()>()).await;
        assert_eq!(r, Err(TimedOut));
        start.elapsed()
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_times_out_at_its_own_deadline() {
        let mut t = Timer::new();
        let secs = Duration::from_secs(5);
        assert_eq!(time_out(&mut t, secs).await, secs);
    }

    /// Work that finishes after `after`.
    async fn slow(after: Duration) -> u32 {
        tokio::time::sleep(after).await;
        1
    }

    #[tokio::test(start_paused = true)]
    async fn work_that_is_ready_arms_no_timer() {
        let mut t = Timer::new();
        assert_eq!(t.run(Duration::from_secs(5), async { 1 }).await, Ok(1));
        assert!(t.sleep.is_none());
        assert_eq!(
            t.run(Duration::from_secs(5), slow(Duration::from_millis(1)))
                .await,
            Ok(1)
        );
        assert!(t.sleep.is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn a_later_wait_outlives_the_deadline_armed_before_it() {
        let mut t = Timer::new();
        let first = t.run(Duration::from_secs(5), slow(Duration::from_secs(1)));
        assert_eq!(first.await, Ok(1));
        tokio::time::sleep(Duration::from_secs(2)).await;
        // Armed for 0 + 5 s; this wait may last until 3 + 5 s.
        let secs = Duration::from_secs(5);
        assert_eq!(time_out(&mut t, secs).await, secs);
    }

    #[tokio::test(start_paused = true)]
    async fn a_shorter_wait_moves_the_deadline_earlier() {
        let mut t = Timer::new();
        let first = t.run(Duration::from_secs(60), slow(Duration::from_secs(1)));
        assert_eq!(first.await, Ok(1));
        let secs = Duration::from_secs(2);
        assert_eq!(time_out(&mut t, secs).await, secs);
    }

    #[tokio::test(start_paused = true)]
    async fn work_that_finishes_in_time_is_not_cut_short() {
        let mut t = Timer::new();
        let slow = async {
            tokio::time::sleep(Duration::from_secs(4)).await;
            7
        };
        assert_eq!(t.run(Duration::from_secs(5), slow).await, Ok(7));
    }
}
