//! HTTP dates (RFC 9110 5.6.7): IMF-fixdate out, the three historical formats in.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Length of an IMF-fixdate, "Sun, 06 Nov 1994 08:49:37 GMT".
pub const HTTP_DATE_LEN: usize = 29;

const SECS_PER_DAY: u64 = 86_400;
const DAY_NAMES: [&[u8; 3]; 7] = [b"Thu", b"Fri", b"Sat", b"Sun", b"Mon", b"Tue", b"Wed"];
const MONTH_NAMES: [&[u8; 3]; 12] = [
    b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec",
];
/// Two-digit RFC 850 years below this are 20xx, the others 19xx.
const RFC850_CENTURY_PIVOT: u64 = 70;
/// Years accepted when parsing; beyond them `SystemTime` arithmetic is not worth trusting.
const MAX_YEAR: u64 = 9999;
const EPOCH_YEAR: u64 = 1970;

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

/// `t` as an IMF-fixdate.
pub fn fmt_http_date(t: SystemTime) -> String {
    let mut buf = [0u8; HTTP_DATE_LEN];
    write_http_date(t, &mut buf);
    String::from_utf8_lossy(&buf).into_owned()
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

/// Days from 1970-01-01 to the given date (year >= 1970).
fn days_from_civil(year: u64, month: u64, day: u64) -> u64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y / 400;
    let yoe = y % 400;
    let mp = if month > 2 { month - 3 } else { month + 9 };
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn is_leap(year: u64) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

fn days_in_month(year: u64, month: u64) -> u64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
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

/// Parses an HTTP date in any of the three formats RFC 9110 asks recipients to accept:
/// IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT"), RFC 850 ("Sunday, 06-Nov-94 08:49:37 GMT")
/// and asctime ("Sun Nov  6 08:49:37 1994"). The weekday is not checked, as in nginx.
pub fn parse_http_date(v: &[u8]) -> Option<SystemTime> {
    let v = crate::request::trim_ows(v);
    let comma = v.iter().position(|&b| b == b',');
    let (year, month, day, time) = match comma {
        Some(c) => {
            let rest = v.get(c + 1..)?.strip_prefix(b" ")?;
            if rest.get(2) == Some(&b' ') {
                // IMF-fixdate: "06 Nov 1994 08:49:37 GMT"
                if rest.len() != 24 || &rest[6..7] != b" " || &rest[11..12] != b" " {
                    return None;
                }
                let day = digits(&rest[0..2])?;
                let month = month_number(&rest[3..6])?;
                let year = digits(&rest[7..11])?;
                let time = rest.get(12..20)?;
                if &rest[20..] != b" GMT" {
                    return None;
                }
                (year, month, day, time)
            } else {
                // RFC 850: "06-Nov-94 08:49:37 GMT"
                if rest.len() != 22 || rest[2] != b'-' || rest[6] != b'-' || rest[9] != b' ' {
                    return None;
                }
                let day = digits(&rest[0..2])?;
                let month = month_number(&rest[3..6])?;
                let yy = digits(&rest[7..9])?;
                let year = if yy < RFC850_CENTURY_PIVOT {
                    2000 + yy
                } else {
                    1900 + yy
                };
                if &rest[18..] != b" GMT" {
                    return None;
                }
                (year, month, day, &rest[10..18])
            }
        }
        None => {
            // asctime: "Sun Nov  6 08:49:37 1994"
            if v.len() != 24 || v[3] != b' ' || v[7] != b' ' || v[10] != b' ' || v[19] != b' ' {
                return None;
            }
            let month = month_number(&v[4..7])?;
            let day = match v[8] {
                b' ' => digits(&v[9..10])?,
                _ => digits(&v[8..10])?,
            };
            (digits(&v[20..24])?, month, day, &v[11..19])
        }
    };
    if time.len() != 8 || time[2] != b':' || time[5] != b':' {
        return None;
    }
    let (hour, minute, second) = (
        digits(&time[0..2])?,
        digits(&time[3..5])?,
        digits(&time[6..8])?,
    );
    if !(EPOCH_YEAR..=MAX_YEAR).contains(&year)
        || day == 0
        || day > days_in_month(year, month)
        || hour > 23
        || minute > 59
        || second > 59
    {
        return None;
    }
    let secs =
        days_from_civil(year, month, day) * SECS_PER_DAY + hour * 3600 + minute * 60 + second;
    UNIX_EPOCH.checked_add(Duration::from_secs(secs))
}

fn digits(v: &[u8]) -> Option<u64> {
    if v.is_empty() || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(v.iter().fold(0, |n, &b| n * 10 + u64::from(b - b'0')))
}

fn month_number(name: &[u8]) -> Option<u64> {
    MONTH_NAMES
        .iter()
        .position(|m| m.as_slice() == name)
        .map(|i| i as u64 + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const RFC_EXAMPLE: u64 = 784_111_777; // Sun, 06 Nov 1994 08:49:37 GMT

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
    fn parses_the_three_formats() {
        for v in [
            &b"Sun, 06 Nov 1994 08:49:37 GMT"[..],
            b"Sunday, 06-Nov-94 08:49:37 GMT",
            b"Sun Nov  6 08:49:37 1994",
            b"  Sun, 06 Nov 1994 08:49:37 GMT ",
        ] {
            assert_eq!(
                parse_http_date(v),
                Some(at(RFC_EXAMPLE)),
                "{:?}",
                String::from_utf8_lossy(v)
            );
        }
        assert_eq!(
            parse_http_date(b"Thursday, 01-Jan-30 00:00:00 GMT"),
            Some(at(1_893_456_000))
        );
    }

    #[test]
    fn round_trips() {
        for secs in [
            0,
            1,
            59,
            86_399,
            86_400,
            951_782_399,
            1_700_000_000,
            4_102_444_799,
        ] {
            assert_eq!(
                parse_http_date(fmt_http_date(at(secs)).as_bytes()),
                Some(at(secs))
            );
        }
    }

    #[test]
    fn refuses_bad_dates() {
        for v in [
            &b""[..],
            b"Sun, 06 Nov 1994 08:49:37 UTC",
            b"Sun, 06 Foo 1994 08:49:37 GMT",
            b"Sun, 31 Nov 1994 08:49:37 GMT",
            b"Sun, 29 Feb 1900 08:49:37 GMT",
            b"Sun, 06 Nov 1994 24:00:00 GMT",
            b"Sun, 06 Nov 1994 08:60:00 GMT",
            b"Sun, 06 Nov 1969 08:49:37 GMT",
            b"Sun, 6 Nov 1994 08:49:37 GMT",
            b"Sun, 06 Nov 1994 08-49-37 GMT",
            b"Sun Nov 06 08:49:37 94",
            b"Sun,",
            b"\xff\xff, 06 Nov 1994 08:49:37 GMT\xff",
        ] {
            assert_eq!(parse_http_date(v), None, "{:?}", String::from_utf8_lossy(v));
        }
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
