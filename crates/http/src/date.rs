//! The `Date` header: IMF-fixdate (RFC 9110 5.6.7), written once a second. Dates read from
//! requests and files are the server's (`files::date`).

use std::time::{SystemTime, UNIX_EPOCH};

/// Length of an IMF-fixdate, "Sun, 06 Nov 1994 08:49:37 GMT".
pub const HTTP_DATE_LEN: usize = 29;

const SECS_PER_DAY: u64 = 86_400;
const DAY_NAMES: [&[u8; 3]; 7] = [b"Thu", b"Fri", b"Sat", b"Sun", b"Mon", b"Tue", b"Wed"];
const MONTH_NAMES: [&[u8; 3]; 12] = [
    b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec",
];

/// Writes `t` as an IMF-fixdate into `out`. Times before 1970 are written as the epoch.
pub fn write_http_date(t: SystemTime, out: &mut [u8; HTTP_DATE_LEN]) {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let days = secs / SECS_PER_DAY;
    let rem = secs % SECS_PER_DAY;
    let (year, month, day) = civil_from_days(days);
    let weekday = DAY_NAMES[(days % 7) as usize];
    out[..3].copy_from_slice(weekday);
    out[3..5].copy_from_slice(b", ");
    put2(&mut out[5..7], day);
    out[7] = b' ';
    out[8..11].copy_from_slice(MONTH_NAMES[(month - 1) as usize]);
    out[11] = b' ';
    put2(&mut out[12..14], year / 100 % 100);
    put2(&mut out[14..16], year % 100);
    out[16] = b' ';
    put2(&mut out[17..19], rem / 3600);
    out[19] = b':';
    put2(&mut out[20..22], rem / 60 % 60);
    out[22] = b':';
    put2(&mut out[23..25], rem % 60);
    out[25..].copy_from_slice(b" GMT");
}

fn put2(out: &mut [u8], v: u64) {
    out[0] = b'0' + (v / 10 % 10) as u8;
    out[1] = b'0' + (v % 10) as u8;
}

/// Days since 1970-01-01 to (year, month 1-12, day 1-31), proleptic Gregorian.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    // Shift to an era starting on 0000-03-01 so leap days fall at the end of a year.
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

/// A formatter that renders the current time once per second, for the `Date` header.
#[derive(Debug, Clone)]
pub struct DateCache {
    second: u64,
    buf: [u8; HTTP_DATE_LEN],
}

impl Default for DateCache {
    fn default() -> Self {
        Self::new()
    }
}

impl DateCache {
    pub fn new() -> Self {
        let mut cache = DateCache {
            second: 0,
            buf: [0; HTTP_DATE_LEN],
        };
        write_http_date(UNIX_EPOCH, &mut cache.buf);
        cache
    }

    /// The current time as an IMF-fixdate.
    pub fn get(&mut self) -> &[u8] {
        self.get_at(SystemTime::now())
    }

    /// `now` as an IMF-fixdate, formatting only when the second changed.
    pub fn get_at(&mut self, now: SystemTime) -> &[u8] {
        let second = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        if second != self.second {
            self.second = second;
            write_http_date(now, &mut self.buf);
        }
        &self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const RFC_EXAMPLE: u64 = 784_111_777; // Sun, 06 Nov 1994 08:49:37 GMT

    fn fmt_http_date(t: SystemTime) -> String {
        let mut buf = [0u8; HTTP_DATE_LEN];
        write_http_date(t, &mut buf);
        String::from_utf8(buf.to_vec()).expect("ASCII")
    }

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn formats_imf_fixdate() {
        assert_eq!(
            fmt_http_date(at(RFC_EXAMPLE)),
            "Sun, 06 Nov 1994 08:49:37 GMT"
        );
        assert_eq!(fmt_http_date(UNIX_EPOCH), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(
            fmt_http_date(at(951_782_400)),
            "Tue, 29 Feb 2000 00:00:00 GMT"
        );
        assert_eq!(
            fmt_http_date(at(4_102_444_799)),
            "Thu, 31 Dec 2099 23:59:59 GMT"
        );
        assert_eq!(
            fmt_http_date(UNIX_EPOCH - Duration::from_secs(5)),
            "Thu, 01 Jan 1970 00:00:00 GMT"
        );
    }

    #[test]
    fn cache_formats_once_per_second() {
        let mut cache = DateCache::new();
        assert_eq!(
            cache.get_at(at(RFC_EXAMPLE)),
            b"Sun, 06 Nov 1994 08:49:37 GMT"
        );
        let later_same_second = at(RFC_EXAMPLE) + Duration::from_millis(999);
        assert_eq!(
            cache.get_at(later_same_second),
            b"Sun, 06 Nov 1994 08:49:37 GMT"
        );
        assert_eq!(
            cache.get_at(at(RFC_EXAMPLE + 1)),
            b"Sun, 06 Nov 1994 08:49:38 GMT"
        );
        assert_eq!(cache.get().len(), HTTP_DATE_LEN);
    }
}
