//! HTTP dates (RFC 9110 section 5.6.7) as nginx writes and reads them.
//!
//! Written dates are always IMF-fixdate (`Thu, 02 Jan 2020 03:04:05 GMT`). Read dates may
//! be any of the three historical forms. Like nginx's `ngx_parse_http_time`, the parser
//! ignores the weekday's spelling and whatever follows the time, so a missing or wrong
//! `GMT` still parses; a date nginx rejects (bad field, 31 Feb) is `None`. The calendar and
//! the IMF-fixdate itself are the http crate's, which writes the `Date` header too.

use portcullis_http::{civil_from_days, days_from_civil};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const SECS_PER_DAY: i64 = 86_400;

const MONTHS: [&[u8; 3]; 12] = portcullis_http::MONTH_NAMES;

/// Whole seconds since the Unix epoch, rounded down, as `st_mtime` and HTTP dates count them.
pub(crate) fn unix_secs(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        Err(before) => {
            let d = before.duration();
            let secs = i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
            if d.subsec_nanos() > 0 {
                -secs - 1
            } else {
                -secs
            }
        }
    }
}

/// The time `secs` seconds after the Unix epoch (before it when negative).
pub(crate) fn from_unix_secs(secs: i64) -> SystemTime {
    let magnitude = Duration::from_secs(secs.unsigned_abs());
    if secs >= 0 {
        UNIX_EPOCH + magnitude
    } else {
        UNIX_EPOCH - magnitude
    }
}

/// Seconds since the epoch of a UTC date and time (a certificate's validity).
pub(crate) fn secs_from_civil(
    year: i64,
    month: u32,
    day: u32,
    hour: u32,
    min: u32,
    sec: u32,
) -> i64 {
    days_from_civil(year, month, day) * SECS_PER_DAY
        + i64::from(hour) * 3600
        + i64::from(min) * 60
        + i64::from(sec)
}

/// The UTC date and time of `secs`: year, month (1 to 12), day, hour, minute, second.
pub(crate) fn civil(secs: i64) -> (i64, u32, u32, u32, u32, u32) {
    let days = secs.div_euclid(SECS_PER_DAY);
    let in_day = secs.rem_euclid(SECS_PER_DAY) as u32;
    let (year, month, day) = civil_from_days(days);
    (
        year,
        month,
        day,
        in_day / 3600,
        in_day / 60 % 60,
        in_day % 60,
    )
}

/// The English abbreviation of month `m` (1 to 12), as HTTP dates write it.
pub(crate) fn month_name(m: u32) -> &'static str {
    std::str::from_utf8(MONTHS[(m as usize).clamp(1, 12) - 1]).unwrap_or("Jan")
}

/// `secs` as OpenSSL's `ASN1_TIME_print` writes it: `Nov  5 10:00:00 2026 GMT`.
pub(crate) fn fmt_openssl_time(secs: i64) -> String {
    let days = secs.div_euclid(SECS_PER_DAY);
    let in_day = secs.rem_euclid(SECS_PER_DAY);
    let (year, month, day) = civil_from_days(days);
    let month = std::str::from_utf8(MONTHS[month as usize - 1]).unwrap_or("Jan");
    format!(
        "{month} {day:2} {:02}:{:02}:{:02} {year} GMT",
        in_day / 3600,
        in_day / 60 % 60,
        in_day % 60
    )
}

/// Formats `t` as an IMF-fixdate, the form of `Last-Modified` and `Date`.
pub fn fmt_http_date(t: SystemTime) -> String {
    let mut out = [0; portcullis_http::HTTP_DATE_LEN];
    portcullis_http::write_http_date_secs(unix_secs(t), &mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// Parses an IMF-fixdate, an RFC 850 date or an asctime date.
pub fn parse_http_date(value: &[u8]) -> Option<SystemTime> {
    // The weekday ends at ',' in the first two forms and at ' ' in asctime's.
    let end_of_weekday = value.iter().position(|&b| b == b',' || b == b' ')?;
    let mut c = Cursor {
        rest: &value[end_of_weekday + 1..],
    };
    c.skip_spaces();

    let (year, month, day) = if value[end_of_weekday] == b',' {
        let day = c.digits(2)?;
        if c.eat(b' ') {
            // IMF-fixdate: "06 Nov 1994 08:49:37 GMT"
            let month = c.month()?;
            c.expect(b' ')?;
            (Some(c.digits(4)?), month, day)
        } else {
            // RFC 850: "06-Nov-94 08:49:37 GMT"; two-digit years pivot at 1970 as in nginx.
            c.expect(b'-')?;
            let month = c.month()?;
            c.expect(b'-')?;
            let yy = c.digits(2)?;
            let year = if yy < 70 { 2000 + yy } else { 1900 + yy };
            (Some(year), month, day)
        }
    } else {
        // asctime: "Nov  6 08:49:37 1994"; the day is space padded.
        let month = c.month()?;
        c.expect(b' ')?;
        c.eat(b' ');
        let mut day = c.digits(1)?;
        if let Some(d) = c.digits(1) {
            day = day * 10 + d;
        }
        (None, month, day)
    };

    c.expect(b' ')?;
    let hour = c.digits(2)?;
    c.expect(b':')?;
    let minute = c.digits(2)?;
    c.expect(b':')?;
    let second = c.digits(2)?;
    let year = match year {
        Some(year) => year,
        None => {
            c.expect(b' ')?;
            c.digits(4)?
        }
    };

    if hour > 23 || minute > 59 || second > 59 || day == 0 || day > days_in_month(year, month) {
        return None;
    }
    let days = days_from_civil(i64::from(year), month, day);
    let secs =
        days * SECS_PER_DAY + i64::from(hour) * 3600 + i64::from(minute) * 60 + i64::from(second);
    Some(from_unix_secs(secs))
}

/// A read position in a date being parsed; each step either consumes what it expects or
/// reports `None`, which the parser propagates with `?`.
pub(super) struct Cursor<'a> {
    pub(super) rest: &'a [u8],
}

impl Cursor<'_> {
    pub(super) fn skip_spaces(&mut self) {
        while self.eat(b' ') {}
    }

    pub(super) fn eat(&mut self, b: u8) -> bool {
        match self.rest.split_first() {
            Some((&first, rest)) if first == b => {
                self.rest = rest;
                true
            }
            _ => false,
        }
    }

    fn expect(&mut self, b: u8) -> Option<()> {
        self.eat(b).then_some(())
    }

    fn digits(&mut self, n: usize) -> Option<u32> {
        let field = self.rest.get(..n)?;
        if !field.iter().all(u8::is_ascii_digit) {
            return None;
        }
        self.rest = &self.rest[n..];
        Some(
            field
                .iter()
                .fold(0, |acc, &d| acc * 10 + u32::from(d - b'0')),
        )
    }

    /// A month's three-letter name, as a number from 1.
    fn month(&mut self) -> Option<u32> {
        let name = self.rest.get(..3)?;
        let index = MONTHS.iter().position(|m| m.as_slice() == name)?;
        self.rest = &self.rest[3..];
        Some(index as u32 + 1)
    }
}

fn days_in_month(year: u32, month: u32) -> u32 {
    match month {
        // February's length is the distance between its first day and March's, which the
        // calendar arithmetic below already knows, leap rules included.
        2 => {
            (days_from_civil(i64::from(year), 3, 1) - days_from_civil(i64::from(year), 2, 1)) as u32
        }
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openssl_times() {
        let leap = secs_from_civil(2024, 2, 29, 0, 0, 0);
        assert_eq!(fmt_openssl_time(leap), "Feb 29 00:00:00 2024 GMT");
        let later = secs_from_civil(2051, 1, 1, 10, 2, 3);
        assert_eq!(fmt_openssl_time(later), "Jan  1 10:02:03 2051 GMT");
    }

    /// The Last-Modified nginx sent for a file touched at 2020-01-02 03:04:05 UTC.
    const NGINX_LAST_MODIFIED: &str = "Thu, 02 Jan 2020 03:04:05 GMT";
    const NGINX_MTIME: i64 = 0x5e0d_5da5;

    #[test]
    fn formats_as_nginx() {
        assert_eq!(
            fmt_http_date(from_unix_secs(NGINX_MTIME)),
            NGINX_LAST_MODIFIED
        );
        assert_eq!(fmt_http_date(UNIX_EPOCH), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(
            fmt_http_date(from_unix_secs(951_782_400)),
            "Tue, 29 Feb 2000 00:00:00 GMT"
        );
        assert_eq!(
            fmt_http_date(from_unix_secs(-1)),
            "Wed, 31 Dec 1969 23:59:59 GMT"
        );
    }

    #[test]
    fn subsecond_times_round_down() {
        let t = from_unix_secs(NGINX_MTIME) + Duration::from_millis(999);
        assert_eq!(unix_secs(t), NGINX_MTIME);
        assert_eq!(unix_secs(UNIX_EPOCH - Duration::from_millis(1)), -1);
    }

    #[test]
    fn parses_all_three_forms() {
        let want = Some(from_unix_secs(NGINX_MTIME));
        assert_eq!(parse_http_date(NGINX_LAST_MODIFIED.as_bytes()), want);
        assert_eq!(parse_http_date(b"Thursday, 02-Jan-20 03:04:05 GMT"), want);
        assert_eq!(parse_http_date(b"Thu Jan  2 03:04:05 2020"), want);
        assert_eq!(parse_http_date(b"Thu Jan 2 03:04:05 2020"), want);
        assert_eq!(
            parse_http_date(b"Sunday, 06-Nov-94 08:49:37 GMT"),
            parse_http_date(b"Sun, 06 Nov 1994 08:49:37 GMT")
        );
    }

    #[test]
    fn trailing_zone_is_not_checked_as_in_nginx() {
        // nginx answered 304 to both of these for a file with that Last-Modified.
        let want = Some(from_unix_secs(NGINX_MTIME));
        assert_eq!(parse_http_date(b"Thu, 02 Jan 2020 03:04:05"), want);
        assert_eq!(parse_http_date(b"Thu, 02 Jan 2020 03:04:05 XYZ"), want);
    }

    #[test]
    fn rejects_bad_dates() {
        for bad in [
            &b""[..],
            b"garbage",
            b"Thu, 02 Jan 2020",
            b"Thu, 02 Foo 2020 03:04:05 GMT",
            b"Thu, 2 Jan 2020 03:04:05 GMT",
            b"Thu, 30 Feb 2020 03:04:05 GMT",
            b"Thu, 29 Feb 2019 03:04:05 GMT",
            b"Thu, 00 Jan 2020 03:04:05 GMT",
            b"Thu, 02 Jan 2020 24:04:05 GMT",
            b"Thu, 02 Jan 2020 03:60:05 GMT",
            b"Thu, 02 Jan 2020 03:04:60 GMT",
            b"Thu, 02 Jan 20x0 03:04:05 GMT",
            b"Thu Jan  2 03:04:05",
        ] {
            assert_eq!(
                parse_http_date(bad),
                None,
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        assert!(parse_http_date(b"Sat, 29 Feb 2020 03:04:05 GMT").is_some());
        assert!(parse_http_date(b"Tue, 29 Feb 2000 03:04:05 GMT").is_some());
        assert_eq!(parse_http_date(b"Thu, 29 Feb 1900 03:04:05 GMT"), None);
    }

    #[test]
    fn round_trips_across_centuries() {
        for secs in [
            0,
            86_399,
            951_868_800,
            4_107_542_400,
            253_402_300_799,
            -2_208_988_800,
        ] {
            let t = from_unix_secs(secs);
            assert_eq!(
                parse_http_date(fmt_http_date(t).as_bytes()),
                Some(t),
                "{secs}"
            );
        }
    }
}
