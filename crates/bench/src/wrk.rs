//! wrk's report, parsed: what one load run measured.
//!
//! wrk prints a fixed text report (with `--latency`, the latency distribution too); this
//! reads the lines it needs by their labels and ignores the rest, so a wrk that adds lines
//! still parses. Times become milliseconds and sizes bytes.

/// The figures of one wrk run.
#[derive(Debug, Clone, PartialEq)]
pub struct WrkReport {
    /// Requests completed, answered with any status.
    pub requests: u64,
    /// Length of the run as wrk measured it, seconds.
    pub duration_s: f64,
    pub requests_per_s: f64,
    /// Bytes read per second.
    pub transfer_per_s: f64,
    pub latency_ms: Latency,
    /// Answers whose status was not 2xx or 3xx.
    pub non_2xx: u64,
    /// Connect, read, write and timeout errors, summed.
    pub socket_errors: u64,
}

/// Latency percentiles and maximum, milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Latency {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

/// Why wrk's output is not a report.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WrkError {
    /// wrk printed no summary line; its first line says why (`unable to connect ...`).
    #[error("wrk produced no report: {0}")]
    NoReport(String),
    #[error("wrk's line {0:?} does not parse")]
    BadLine(String),
}

impl WrkReport {
    /// Non-2xx answers and socket errors: anything but a success.
    pub fn errors(&self) -> u64 {
        self.non_2xx + self.socket_errors
    }
}

/// Parses wrk's report (run with `--latency` for the percentiles; without it they are 0).
pub fn parse(text: &str) -> Result<WrkReport, WrkError> {
    let mut summary = None;
    let mut requests_per_s = None;
    let mut transfer_per_s = 0.0;
    let mut latency = Latency::default();
    let mut non_2xx = 0;
    let mut socket_errors = 0;
    for line in text.lines() {
        let bad = || WrkError::BadLine(line.trim().to_owned());
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            // "  31535 requests in 1.00s, 38.01MB read"
            [count, "requests", "in", time, ..] => {
                let count = count.parse().map_err(|_| bad())?;
                let time = time.trim_end_matches(',');
                summary = Some((count, seconds(time).ok_or_else(bad)?));
            }
            ["Requests/sec:", rate] => requests_per_s = Some(rate.parse().map_err(|_| bad())?),
            ["Transfer/sec:", size] => transfer_per_s = bytes(size).ok_or_else(bad)?,
            ["Latency", _avg, _stdev, max, ..] => {
                latency.max = seconds(max).ok_or_else(bad)? * 1e3;
            }
            ["50%", time] => latency.p50 = seconds(time).ok_or_else(bad)? * 1e3,
            ["90%", time] => latency.p90 = seconds(time).ok_or_else(bad)? * 1e3,
            ["99%", time] => latency.p99 = seconds(time).ok_or_else(bad)? * 1e3,
            ["Non-2xx", "or", "3xx", "responses:", count] => {
                non_2xx = count.parse().map_err(|_| bad())?;
            }
            ["Socket", "errors:", rest @ ..] => {
                // "connect 0, read 11429, write 0, timeout 0"
                for pair in rest.chunks(2) {
                    let count = pair.get(1).ok_or_else(bad)?.trim_end_matches(',');
                    socket_errors += count.parse::<u64>().map_err(|_| bad())?;
                }
            }
            _ => {}
        }
    }
    let Some((requests, duration_s)) = summary else {
        let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        return Err(WrkError::NoReport(first.trim().to_owned()));
    };
    Ok(WrkReport {
        requests,
        duration_s,
        requests_per_s: requests_per_s.unwrap_or(requests as f64 / duration_s),
        transfer_per_s,
        latency_ms: latency,
        non_2xx,
        socket_errors,
    })
}

/// A wrk time (`219.00us`, `2.00ms`, `1.00s`, `1.50m`, `1.00h`) in seconds.
fn seconds(text: &str) -> Option<f64> {
    let (number, scale) = if let Some(n) = text.strip_suffix("us") {
        (n, 1e-6)
    } else if let Some(n) = text.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = text.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = text.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = text.strip_suffix('h') {
        (n, 3600.0)
    } else {
        return None;
    };
    let value: f64 = number.parse().ok()?;
    value.is_finite().then_some(value * scale)
}

/// A wrk size (`446.45KB`, `37.87MB`, `12B`) in bytes; wrk's units are powers of 1024.
fn bytes(text: &str) -> Option<f64> {
    const UNITS: [(&str, f64); 5] = [
        ("TB", 1024.0 * 1024.0 * 1024.0 * 1024.0),
        ("GB", 1024.0 * 1024.0 * 1024.0),
        ("MB", 1024.0 * 1024.0),
        ("KB", 1024.0),
        ("B", 1.0),
    ];
    let (number, scale) = UNITS
        .iter()
        .find_map(|&(unit, scale)| text.strip_suffix(unit).map(|n| (n, scale)))?;
    let value: f64 = number.parse().ok()?;
    value.is_finite().then_some(value * scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> String {
        let path = format!("{}/tests/fixtures/wrk/{name}", env!("CARGO_MANIFEST_DIR"));
        std::fs::read_to_string(&path).unwrap()
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * b.abs().max(1.0)
    }

    #[test]
    fn keepalive_run() {
        let r = parse(&fixture("ok.txt")).unwrap();
        assert_eq!(r.requests, 31535);
        assert!(close(r.duration_s, 1.0));
        assert!(close(r.requests_per_s, 31414.12));
        assert!(close(r.transfer_per_s, 37.87 * 1024.0 * 1024.0));
        assert!(close(r.latency_ms.p50, 0.219));
        assert!(close(r.latency_ms.p90, 2.0));
        assert!(close(r.latency_ms.p99, 7.51));
        assert!(close(r.latency_ms.max, 13.55));
        assert_eq!(r.errors(), 0);
    }

    #[test]
    fn failures_are_counted() {
        let r = parse(&fixture("non2xx.txt")).unwrap();
        assert_eq!((r.non_2xx, r.socket_errors), (19507, 0));
        let r = parse(&fixture("sockerr.txt")).unwrap();
        assert_eq!((r.non_2xx, r.socket_errors), (0, 11429));
        assert!(close(r.transfer_per_s, 445.71 * 1024.0));
        let r = parse(&fixture("close.txt")).unwrap();
        assert_eq!((r.requests, r.errors()), (9072, 0));
        assert!(close(r.duration_s, 1.02));
    }

    #[test]
    fn no_report_says_why() {
        assert_eq!(
            parse(&fixture("refused.txt")),
            Err(WrkError::NoReport(
                "unable to connect to 127.0.0.1:18431 Connection refused".into()
            ))
        );
        assert!(matches!(
            parse("  12x requests in 1.00s, 1MB read"),
            Err(WrkError::BadLine(_))
        ));
    }

    #[test]
    fn units() {
        assert_eq!(seconds("1.50m"), Some(90.0));
        assert_eq!(seconds("2h"), Some(7200.0));
        assert_eq!(seconds("3"), None);
        assert_eq!(bytes("12B"), Some(12.0));
        assert_eq!(bytes("1.00GB"), Some(1024.0 * 1024.0 * 1024.0));
        assert_eq!(bytes("nanMB"), None);
    }
}
