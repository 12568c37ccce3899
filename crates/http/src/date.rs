//! The `Date` header: IMF-fixdate (RFC 9110 5.6.7), written once a second. Dates read from
//! requests and files are the server's (`files::date`).

use std::time::{SystemTime, UNIX_EPOCH};

/// Length of an IMF-fixdate, "Sun, 06 Nov 1994 08:49:37 GMT".
pub const HTTP_DATE_LEN: usize = 29;

const SECS_PER_DAY: i64 = 86_400;
const DAY_NAMES: [&[u8; 3]; 7] = [b"Thu", b"Fri", b"Sat", b"Sun", b"Mon", b"Tue", b"Wed"];
/// The months as HTTP dates (and nginx's logs) name them.
pub const MONTH_NAMES: [&[u8; 3]; 12] = [
    b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec",
];

/// Writes `t` as an IMF-fixdate into `out`. Times before 1970 are written as the epoch.
pub fn write_http_date(t: SystemTime, out: &mut [u8; HTTP_DATE_LEN]) {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    write_http_date_secs(i64::try_from(secs).unwrap_or(i64::MAX), out);
}

/// Writes the time `secs` seconds from the epoch (before it when negative) as an
/// IMF-fixdate into `out`; a year past 9999 is written as its last four digits.
pub fn write_http_date_secs(secs: i64, out: &mut [u8; HTTP_DATE_LEN]) {
    let days = secs.div_euclid(SECS_PER_DAY);
    let rem = secs.rem_euclid(SECS_PER_DAY);
    let (year, month, day) = civil_from_days(days);
    let year = year.clamp(0, 9999);
    // The epoch was a Thursday, the first of DAY_NAMES.
    let weekday = DAY_NAMES[days.rem_euclid(7) as usize];
    out[..3].copy_from_slice(weekday);
    out[3..5].copy_from_slice(b", ");
    put2(&mut out[5..7], i64::from(day));
    out[7] = b' ';
    out[8..11].copy_from_slice(MONTH_NAMES[(month - 1) as usize]);
    out[11] = b' ';
    put2(&mut out[12..14], year / 100);
    put2(&mut out[14..16], year % 100);
    out[16] = b' ';
    put2(&mut out[17..19], rem / 3600);
    out[19] = b':';
    put2(&mut out[20..22], rem / 60 % 60);
    out[22] = b':';
    put2(&mut out[23..25], rem % 60);
    out[25..].copy_from_slice(b" GMT");
}

fn put2(out: &mut [u8], v: i64) {
    out[0] = b'0' + (v / 10 % 10) as u8;
    out[1] = b'0' + (v % 10) as u8;
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
pub fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year.rem_euclid(400);
    let month = i64::from(month);
    let day_of_year =
        (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The inverse of [`days_from_civil`]: (year, month from 1, day from 1).
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    // Shift to an era starting on 0000-03-01 so leap days fall at the end of a year.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
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
