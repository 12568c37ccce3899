//! `limit_rate`, `limit_rate_after` and `$limit_rate` (nginx's http core module): a response
//! sent no faster than a rate, per request, after its first bytes go at full speed.
//!
//! As nginx's write filter: in the second `s` since the request began, the bytes sent past
//! `limit_rate_after` may reach `rate * (s + 1)`; past that, the writer waits until they may
//! go again. After each write it waits as long as the rate says those bytes take, so a
//! response of `n` bytes takes about `(n - after) / rate` seconds whatever the socket's pace.
//! The head counts, as nginx counts every byte of the connection.

use std::io;
use std::time::Duration;

use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;

/// The most a paced write hands the socket at once.
const MOST: usize = 2 * 1024 * 1024;

/// One response's pace.
#[derive(Debug, Clone)]
pub(crate) struct Pace {
    /// Bytes per second, never 0.
    rate: u64,
    /// `limit_rate_after`.
    after: u64,
    start: Instant,
    /// Bytes written so far, the head's too.
    sent: u64,
    /// No write before this.
    until: Option<Instant>,
    /// What the last allowance still lets go, and what went of it: the wait for a batch's
    /// bytes comes when the batch is spent, as nginx waits after each write it makes of
    /// what it holds.
    budget: usize,
    batch: usize,
}

impl Pace {
    /// `None` when `rate` is 0: no limit.
    pub(crate) fn new(rate: u64, after: u64, start: Instant) -> Option<Pace> {
        (rate > 0).then_some(Pace {
            rate,
            after,
            start,
            sent: 0,
            until: None,
            budget: 0,
            batch: 0,
        })
    }

    /// A new rate (`X-Accel-Limit-Rate`), from now on.
    pub(crate) fn set_rate(this: &mut Option<Pace>, rate: u64, after: u64, start: Instant) {
        match this {
            Some(p) if rate > 0 => p.rate = rate,
            _ => *this = Pace::new(rate, after, start),
        }
    }

    /// Waits until some bytes may go; returns how many, at most `want`. Those that go are
    /// told with [`Pace::spent`].
    pub(crate) async fn grant(&mut self, want: usize) -> usize {
        if self.budget == 0 {
            let batch = std::mem::take(&mut self.batch);
            if batch > 0 {
                self.wrote(batch);
            }
            self.budget = self.allowance().await;
        }
        want.min(self.budget)
    }

    /// `n` bytes of a grant went.
    pub(crate) fn spent(&mut self, n: usize) {
        self.budget = self.budget.saturating_sub(n);
        self.batch += n;
    }

    /// Waits until some bytes may go; returns how many.
    async fn allowance(&mut self) -> usize {
        loop {
            if let Some(t) = self.until.take() {
                tokio::time::sleep_until(t).await;
            }
            let secs = u128::from(self.start.elapsed().as_secs() + 1);
            let allowed = u128::from(self.rate) * secs + u128::from(self.after);
            let sent = u128::from(self.sent);
            if allowed > sent {
                return usize::try_from(allowed - sent).unwrap_or(MOST).min(MOST);
            }
            let ms = (sent - allowed) * 1000 / u128::from(self.rate) + 1;
            self.until = Some(Instant::now() + Duration::from_millis(ms as u64));
        }
    }

    /// `n` bytes went: the next wait is as long as they take at the rate.
    fn wrote(&mut self, n: usize) {
        let before = self.sent.saturating_sub(self.after);
        self.sent += n as u64;
        let past = self.sent.saturating_sub(self.after) - before;
        let ms = past * 1000 / self.rate;
        if ms > 0 {
            self.until = Some(Instant::now() + Duration::from_millis(ms));
        }
    }

    /// Writes `bufs` in order at the pace; `timeout` bounds each write (not the waits
    /// between them), as `send_timeout` bounds nginx's.
    pub(crate) async fn write_all<S: AsyncWrite + Unpin>(
        &mut self,
        stream: &mut S,
        bufs: &[&[u8]],
        timeout: Duration,
    ) -> io::Result<()> {
        for buf in bufs {
            let mut done = 0;
            while done < buf.len() {
                let most = self.grant(buf.len() - done).await;
                let n = tokio::time::timeout(timeout, stream.write(&buf[done..done + most]))
                    .await
                    .map_err(|_| io::Error::from(io::ErrorKind::TimedOut))??;
                if n == 0 {
                    return Err(io::Error::from(io::ErrorKind::WriteZero));
                }
                self.spent(n);
                done += n;
            }
        }
        tokio::time::timeout(timeout, stream.flush())
            .await
            .map_err(|_| io::Error::from(io::ErrorKind::TimedOut))?
    }

    /// Writes `len` bytes of `file` from `offset` at the pace, read in pieces as large as
    /// the pace allows at once.
    pub(crate) async fn write_file<S: AsyncWrite + Unpin>(
        &mut self,
        stream: &mut S,
        file: &std::fs::File,
        offset: u64,
        len: u64,
        timeout: Duration,
    ) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        const PIECE: usize = 256 * 1024;
        let mut buf = vec![0u8; usize::try_from(len).unwrap_or(PIECE).min(PIECE)];
        let mut done = 0u64;
        while done < len {
            let want = usize::try_from(len - done).unwrap_or(PIECE).min(PIECE);
            let n = file.read_at(&mut buf[..want], offset + done)?;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "file was truncated while being sent",
                ));
            }
            self.write_all(stream, &[&buf[..n]], timeout).await?;
            done += n as u64;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn bytes_past_the_first_go_at_the_rate() {
        let start = Instant::now();
        let mut pace = Pace::new(1000, 500, start).unwrap();
        let mut sink = Vec::new();
        let body = vec![b'x'; 4500];
        pace.write_all(&mut sink, &[&body], Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(sink.len(), 4500);
        // 500 free, 4000 at 1000 a second: the last write begins at 3 s.
        let took = start.elapsed();
        assert!(
            took >= Duration::from_secs(3) && took < Duration::from_millis(3100),
            "{took:?}"
        );
    }

    #[test]
    fn no_rate_no_pace() {
        assert!(Pace::new(0, 100, Instant::now()).is_none());
    }
}
