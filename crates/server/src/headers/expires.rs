//! `expires`: the `Expires` and `Cache-Control` fields of the headers filter.
//!
//! `expires [modified] time | epoch | max | off | @time-of-day`, a time in nginx's units that
//! may be negative, or a variable holding any of them. It applies to the same statuses as
//! `add_header` without `always`, and replaces the two fields a response (an upstream's, a
//! file's) already has. A daily time is a time of day in the server's time zone (`TZ`), as
//! nginx takes it.

use portcullis_config::{value, ConfigError, Directive};

use crate::vars::{Names, Template};

/// nginx's `expires max`: ten years, and its fixed date.
const MAX_AGE: i64 = 315_360_000;
const MAX_DATE: &str = "Thu, 31 Dec 2037 23:55:55 GMT";
/// nginx's `expires epoch`.
const EPOCH_DATE: &str = "Thu, 01 Jan 1970 00:00:01 GMT";
const DAY: i64 = 86_400;

/// A level's `expires`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Expires {
    Epoch,
    Max,
    /// Seconds from the time of the response, or (`modified`) from its Last-Modified.
    After {
        secs: i64,
        modified: bool,
    },
    /// A time of day, seconds after midnight.
    Daily(i64),
    /// A variable's value, read as the directive's argument would be.
    Variable {
        value: Template,
        modified: bool,
    },
}

/// Compiles `expires`: `None` for `off`.
pub(crate) fn compile(d: &Directive, names: &Names) -> Result<Option<Expires>, ConfigError> {
    let invalid = |what: &str| ConfigError::at(d, format!("\"expires\" directive {what}"));
    let (modified, text) = match d.args.len() {
        1 => (false, d.arg(0)),
        _ if d.arg(0) == "modified" => (true, d.arg(1)),
        _ => return Err(invalid("invalid value")),
    };
    if text.contains('$') {
        return Ok(Some(Expires::Variable {
            value: Template::compile(text, d, names)?,
            modified,
        }));
    }
    parse(text, modified).map_err(invalid)
}

/// nginx's `ngx_http_parse_expires`; the error is nginx's words.
fn parse(text: &str, modified: bool) -> Result<Option<Expires>, &'static str> {
    match text {
        "epoch" => return Ok(Some(Expires::Epoch)),
        "max" => return Ok(Some(Expires::Max)),
        "off" => return Ok(None),
        _ => {}
    }
    if let Some(time) = text.strip_prefix('@') {
        if modified {
            return Err("daily time cannot be used with \"modified\" parameter");
        }
        let secs = seconds(time).ok_or("invalid value")?;
        if secs > DAY {
            return Err("daily time value must be less than 24 hours");
        }
        return Ok(Some(Expires::Daily(secs)));
    }
    let (minus, time) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let secs = seconds(time).ok_or("invalid value")?;
    Ok(Some(Expires::After {
        secs: if minus { -secs } else { secs },
        modified,
    }))
}

fn seconds(time: &str) -> Option<i64> {
    value::parse_time_secs(time).and_then(|s| i64::try_from(s).ok())
}

/// The `Expires` date and `Cache-Control` value for a response made at `now` (seconds since
/// the epoch) with Last-Modified `last_modified`, or `None` when a variable's value is not a
/// valid `expires` or says `off`. `eval` gives a variable's value.
pub(crate) fn fields(
    expires: &Expires,
    now: i64,
    last_modified: Option<i64>,
    eval: &dyn Fn(&Template) -> Vec<u8>,
) -> Option<(String, String)> {
    let resolved;
    let expires = match expires {
        Expires::Variable { value, modified } => {
            let text = eval(value);
            resolved = parse(std::str::from_utf8(&text).ok()?, *modified).ok()??;
            &resolved
        }
        fixed => fixed,
    };
    let http_date = |secs: i64| crate::files::fmt_http_date(crate::files::from_unix_secs(secs));
    let (at, max_age, negative) = match *expires {
        Expires::Epoch => return Some((EPOCH_DATE.into(), "no-cache".into())),
        Expires::Max => return Some((MAX_DATE.into(), format!("max-age={MAX_AGE}"))),
        Expires::After { secs: 0, .. } => return Some((http_date(now), "max-age=0".into())),
        Expires::Daily(secs) => {
            let at = next_daily(now, secs);
            (at, at - now, false)
        }
        Expires::After { secs, modified } => match last_modified.filter(|_| modified) {
            Some(lm) => (lm + secs, lm + secs - now, secs < 0),
            None => (now + secs, secs, secs < 0),
        },
        Expires::Variable { .. } => return None,
    };
    let cache_control = if negative || max_age < 0 {
        "no-cache".to_string()
    } else {
        format!("max-age={max_age}")
    };
    Some((http_date(at), cache_control))
}

/// nginx's `ngx_next_time`: the first time after `now` that is `secs` past midnight in the
/// server's time zone (today's, else tomorrow's), as `mktime` counts across a change of
/// summer time. UTC's when the local time cannot be had.
fn next_daily(now: i64, secs: i64) -> i64 {
    let utc = || {
        let today = now.div_euclid(DAY) * DAY + secs;
        if today <= now {
            today + DAY
        } else {
            today
        }
    };
    let t = now as libc::time_t;
    // SAFETY: `tm` is plain data, zeroed is a valid value; localtime_r fills it from a valid
    // time_t and mktime reads and normalises it in place.
    unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&t, &mut tm).is_null() {
            return utc();
        }
        tm.tm_hour = (secs / 3600) as libc::c_int;
        tm.tm_min = (secs % 3600 / 60) as libc::c_int;
        tm.tm_sec = (secs % 60) as libc::c_int;
        let next = libc::mktime(&mut tm);
        if next == -1 {
            return utc();
        }
        if next > t {
            return next;
        }
        tm.tm_mday += 1;
        match libc::mktime(&mut tm) {
            -1 => utc(),
            next => next,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixed(text: &str) -> Expires {
        parse(text, false).expect("valid").expect("on")
    }

    #[test]
    fn parses_as_nginx() {
        assert_eq!(
            fixed("1h"),
            Expires::After {
                secs: 3600,
                modified: false
            }
        );
        assert_eq!(
            fixed("-30m"),
            Expires::After {
                secs: -1800,
                modified: false
            }
        );
        assert_eq!(fixed("@15h30m"), Expires::Daily(55_800));
        assert_eq!(parse("off", false), Ok(None));
        assert!(parse("@25h", false).is_err());
        assert!(parse("@1h", true).is_err());
        assert!(parse("soon", false).is_err());
    }

    #[test]
    fn fields_as_nginx_writes_them() {
        let none = |_: &Template| Vec::new();
        let now = 1_700_000_000;
        let (e, cc) = fields(&fixed("1h"), now, None, &none).expect("fields");
        assert_eq!(cc, "max-age=3600");
        assert_eq!(
            e,
            crate::files::fmt_http_date(crate::files::from_unix_secs(now + 3600))
        );
        assert_eq!(
            fields(&fixed("-1h"), now, None, &none).expect("f").1,
            "no-cache"
        );
        assert_eq!(
            fields(&fixed("epoch"), now, None, &none).expect("f").0,
            EPOCH_DATE
        );
        assert_eq!(
            fields(&fixed("0"), now, None, &none).expect("f").1,
            "max-age=0"
        );
        let modified = Expires::After {
            secs: 3600,
            modified: true,
        };
        let (_, cc) = fields(&modified, now, Some(now - 600), &none).expect("f");
        assert_eq!(cc, "max-age=3000");
        // The next midnight of the server's time zone, whichever it is.
        let (e, cc) = fields(&fixed("@0s"), now, None, &none).expect("f");
        let age: i64 = cc
            .strip_prefix("max-age=")
            .expect("age")
            .parse()
            .expect("n");
        assert!(age > 0 && age <= DAY, "{cc}");
        assert_eq!(
            e,
            crate::files::fmt_http_date(crate::files::from_unix_secs(now + age))
        );
        let t = (now + age) as libc::time_t;
        // SAFETY: as in next_daily.
        let tm = unsafe {
            let mut tm: libc::tm = std::mem::zeroed();
            assert!(!libc::localtime_r(&t, &mut tm).is_null());
            tm
        };
        assert_eq!((tm.tm_hour, tm.tm_min, tm.tm_sec), (0, 0, 0));
    }
}
