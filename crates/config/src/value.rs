//! Typed readers for directive arguments, with nginx's syntax and error messages.
//!
//! Each takes the directive and the argument's index and fails with the message nginx gives
//! for that kind of value, at the directive's place:
//!
//! | reader | nginx slot | accepts | message |
//! |---|---|---|---|
//! | [`size`] | `ngx_conf_set_size_slot` | `512`, `8k`, `1m` | `"d" directive invalid value` |
//! | [`offset`] | `ngx_conf_set_off_slot` | also `1g` | `"d" directive invalid value` |
//! | [`time_ms`] | `ngx_conf_set_msec_slot` | `65`, `1m30s`, `500ms`, `1h`, `1d`, `1w` | `"d" directive invalid value` |
//! | [`time_s`] | `ngx_conf_set_sec_slot` | also `1M`, `1y`; not `ms` | `"d" directive invalid value` |
//! | [`flag`] | `ngx_conf_set_flag_slot` | `on`, `off` | `invalid value "x" in "d" directive, it must be "on" or "off"` |
//! | [`number`] | `ngx_conf_set_num_slot` | `0`, `1024` | `"d" directive invalid number` |

use crate::{ConfigError, Directive};

/// Largest value of nginx's `ngx_int_t`/`off_t`/`size_t` on 64-bit targets: every reader
/// refuses results above it, as nginx does.
const MAX_VALUE: u64 = i64::MAX as u64;

const MINUTE: u64 = 60;
const HOUR: u64 = 60 * MINUTE;
const DAY: u64 = 24 * HOUR;
const WEEK: u64 = 7 * DAY;
/// nginx counts a month as 30 days and a year as 365.
const MONTH: u64 = 30 * DAY;
const YEAR: u64 = 365 * DAY;

/// A size in bytes: a number with an optional `k` or `m` suffix (either case).
pub fn size(d: &Directive, i: usize) -> Result<u64, ConfigError> {
    parse_scaled(arg(d, i)?, false).ok_or_else(|| invalid_value(d))
}

/// A file offset in bytes: like [`size`], also with a `g` suffix.
pub fn offset(d: &Directive, i: usize) -> Result<u64, ConfigError> {
    parse_scaled(arg(d, i)?, true).ok_or_else(|| invalid_value(d))
}

/// A time in milliseconds. A bare number is seconds; units (`ms`, `s`, `m`, `h`, `d`, `w`)
/// may be combined from largest to smallest (`1m30s`), separated by spaces or not.
pub fn time_ms(d: &Directive, i: usize) -> Result<u64, ConfigError> {
    parse_time_units(arg(d, i)?, false).ok_or_else(|| invalid_value(d))
}

/// A time in seconds, for the directives nginx reads in seconds: like [`time_ms`], also with
/// `M` (30 days) and `y` (365 days), and without `ms`.
pub fn time_s(d: &Directive, i: usize) -> Result<u64, ConfigError> {
    parse_time_units(arg(d, i)?, true).ok_or_else(|| invalid_value(d))
}

/// [`time_s`] of a value that is part of an argument (`expires @15h30m`), in seconds.
pub fn parse_time_secs(s: &str) -> Option<u64> {
    parse_time_units(s, true)
}

/// [`number`] of a value that is part of an argument (`builtin:1000`).
pub fn parse_number(s: &str) -> Option<u64> {
    digits(s)
}

/// [`size`] of a value that is part of an argument (`buffer=32k`).
pub fn parse_size(s: &str) -> Option<u64> {
    parse_scaled(s, false)
}

/// [`time_ms`] of a value that is part of an argument (`flush=1m30s`), as a duration.
pub fn parse_time(s: &str) -> Option<std::time::Duration> {
    parse_time_units(s, false).map(std::time::Duration::from_millis)
}

/// `on` or `off`, in any case.
pub fn flag(d: &Directive, i: usize) -> Result<bool, ConfigError> {
    let value = arg(d, i)?;
    if value.eq_ignore_ascii_case("on") {
        Ok(true)
    } else if value.eq_ignore_ascii_case("off") {
        Ok(false)
    } else {
        Err(ConfigError::at(
            d,
            format!(
                "invalid value \"{value}\" in \"{}\" directive, it must be \"on\" or \"off\"",
                d.name
            ),
        ))
    }
}

/// A non-negative decimal number.
pub fn number(d: &Directive, i: usize) -> Result<u64, ConfigError> {
    digits(arg(d, i)?)
        .ok_or_else(|| ConfigError::at(d, format!("\"{}\" directive invalid number", d.name)))
}

/// Argument `i`, or nginx's argument-count error if the directive has fewer.
fn arg(d: &Directive, i: usize) -> Result<&str, ConfigError> {
    d.args.get(i).map(|a| a.value.as_str()).ok_or_else(|| {
        ConfigError::at(
            d,
            format!("invalid number of arguments in \"{}\" directive", d.name),
        )
    })
}

fn invalid_value(d: &Directive) -> ConfigError {
    ConfigError::at(d, format!("\"{}\" directive invalid value", d.name))
}

/// nginx's `ngx_atoi`: ASCII digits only, at least one, no sign, no overflow past
/// [`MAX_VALUE`].
fn digits(s: &str) -> Option<u64> {
    if s.is_empty() {
        return None;
    }
    s.bytes().try_fold(0u64, |acc, b| {
        if !b.is_ascii_digit() {
            return None;
        }
        let v = acc.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
        (v <= MAX_VALUE).then_some(v)
    })
}

/// nginx's `ngx_parse_size` (`with_g` false) and `ngx_parse_offset` (true).
fn parse_scaled(s: &str, with_g: bool) -> Option<u64> {
    let (number, scale) = match s.as_bytes().last()? {
        b'k' | b'K' => (&s[..s.len() - 1], 1u64 << 10),
        b'm' | b'M' => (&s[..s.len() - 1], 1 << 20),
        b'g' | b'G' if with_g => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    let value = digits(number)?;
    if value > MAX_VALUE / scale {
        return None;
    }
    Some(value * scale)
}

/// nginx's `ngx_parse_time`: seconds if `is_sec`, else milliseconds.
fn parse_time_units(s: &str, is_sec: bool) -> Option<u64> {
    // Units in the order they must appear; a unit may not follow itself or a smaller one.
    #[derive(PartialEq, PartialOrd)]
    enum Step {
        Start,
        Year,
        Month,
        Week,
        Day,
        Hour,
        Min,
        Sec,
        Msec,
        Last,
    }
    let bytes = s.as_bytes();
    let mut step = if is_sec { Step::Start } else { Step::Month };
    let mut valid = false;
    let mut value: u64 = 0;
    let mut total: u64 = 0;
    let mut p = 0;

    while p < bytes.len() {
        let ch = bytes[p];
        p += 1;
        if ch.is_ascii_digit() {
            value = value.checked_mul(10)?.checked_add(u64::from(ch - b'0'))?;
            if value > MAX_VALUE {
                return None;
            }
            valid = true;
            continue;
        }
        let (next, seconds) = match ch {
            b'y' if step == Step::Start => (Step::Year, YEAR),
            b'M' if step < Step::Month => (Step::Month, MONTH),
            b'w' if step < Step::Week => (Step::Week, WEEK),
            b'd' if step < Step::Day => (Step::Day, DAY),
            b'h' if step < Step::Hour => (Step::Hour, HOUR),
            b'm' if bytes.get(p) == Some(&b's') => {
                if is_sec || step >= Step::Msec {
                    return None;
                }
                p += 1;
                (Step::Msec, 0)
            }
            b'm' if step < Step::Min => (Step::Min, MINUTE),
            b's' if step < Step::Sec => (Step::Sec, 1),
            // A bare number followed by a space counts as seconds.
            b' ' if step < Step::Sec => (Step::Last, 1),
            _ => return None,
        };
        let scale = match next {
            Step::Msec => 1,
            _ if is_sec => seconds,
            _ => seconds * 1000,
        };
        step = next;
        total = total.checked_add(value.checked_mul(scale)?)?;
        if total > MAX_VALUE {
            return None;
        }
        value = 0;
        while bytes.get(p) == Some(&b' ') {
            p += 1;
        }
    }
    if !valid {
        return None;
    }
    let tail = if is_sec {
        value
    } else {
        value.checked_mul(1000)?
    };
    let total = total.checked_add(tail)?;
    (total <= MAX_VALUE).then_some(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Arg, Span};
    use std::path::Path;
    use std::sync::Arc;

    fn d(name: &str, value: &str) -> Directive {
        Directive {
            name: name.into(),
            args: vec![Arg {
                value: value.into(),
                quoted: false,
            }],
            span: Span {
                file: Arc::from(Path::new("/etc/nginx/nginx.conf")),
                line: 7,
            },
            block: None,
        }
    }

    #[test]
    fn values_inside_arguments_follow_the_same_rules() {
        assert_eq!(parse_size("32k"), Some(32 * 1024));
        assert_eq!(parse_size("10M"), Some(10 << 20));
        assert_eq!(parse_size("1g"), None);
        assert_eq!(parse_size("+5"), None, "no sign, as ngx_parse_size");
        assert_eq!(parse_size("m"), None);
        assert_eq!(parse_time("5s"), Some(std::time::Duration::from_secs(5)));
        assert_eq!(
            parse_time("250ms"),
            Some(std::time::Duration::from_millis(250))
        );
        assert_eq!(
            parse_time("1h30m"),
            Some(std::time::Duration::from_secs(5400))
        );
        assert_eq!(parse_time("+5"), None);
        assert_eq!(parse_number("1000"), Some(1000));
        assert_eq!(parse_number("+5"), None);
    }

    #[test]
    fn sizes() {
        assert_eq!(size(&d("x", "512"), 0), Ok(512));
        assert_eq!(size(&d("x", "8k"), 0), Ok(8192));
        assert_eq!(size(&d("x", "8K"), 0), Ok(8192));
        assert_eq!(size(&d("x", "1m"), 0), Ok(1 << 20));
        assert!(size(&d("x", "1g"), 0).is_err());
        assert_eq!(offset(&d("x", "1g"), 0), Ok(1 << 30));
        for bad in [
            "",
            "k",
            "-1",
            "1.5k",
            "1 k",
            "99999999999999999999",
            "9223372036854775807k",
        ] {
            assert!(size(&d("x", bad), 0).is_err(), "{bad:?}");
        }
        let e = size(&d("client_body_buffer_size", "1x"), 0).expect_err("bad");
        assert_eq!(
            e.to_string(),
            "\"client_body_buffer_size\" directive invalid value in /etc/nginx/nginx.conf:7"
        );
    }

    #[test]
    fn times_in_ms() {
        let ms = |s: &str| time_ms(&d("keepalive_timeout", s), 0);
        assert_eq!(ms("65"), Ok(65_000));
        assert_eq!(ms("65s"), Ok(65_000));
        assert_eq!(ms("1m30s"), Ok(90_000));
        assert_eq!(ms("1m 30s"), Ok(90_000));
        assert_eq!(ms("500ms"), Ok(500));
        assert_eq!(ms("1s500"), Ok(1_000 + 500_000));
        assert_eq!(ms("1h"), Ok(3_600_000));
        assert_eq!(ms("1d1h"), Ok(90_000_000));
        assert_eq!(ms("1w"), Ok(604_800_000));
        assert_eq!(ms("0"), Ok(0));
        // As nginx: months and years are not milliseconds values; units only descend.
        for bad in [
            "1y",
            "1M",
            "30s1m",
            "1h1h",
            "",
            "s",
            "1x",
            "-1",
            "1ms1s",
            "99999999999999999999",
        ] {
            assert!(ms(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn times_in_s() {
        let s = |v: &str| time_s(&d("ssl_session_timeout", v), 0);
        assert_eq!(s("1"), Ok(1));
        assert_eq!(s("1y"), Ok(YEAR));
        assert_eq!(s("1y1M"), Ok(YEAR + MONTH));
        assert_eq!(s("2h30m"), Ok(9_000));
        assert!(s("5ms").is_err());
    }

    #[test]
    fn flags() {
        assert_eq!(flag(&d("sendfile", "on"), 0), Ok(true));
        assert_eq!(flag(&d("sendfile", "ON"), 0), Ok(true));
        assert_eq!(flag(&d("sendfile", "off"), 0), Ok(false));
        let e = flag(&d("sendfile", "maybe"), 0).expect_err("bad");
        assert_eq!(
            e.message,
            "invalid value \"maybe\" in \"sendfile\" directive, it must be \"on\" or \"off\""
        );
    }

    #[test]
    fn numbers() {
        assert_eq!(
            number(&d("keepalive_requests", "1000000000"), 0),
            Ok(1_000_000_000)
        );
        for bad in ["-1", "1k", "", "+1", "99999999999999999999"] {
            let e = number(&d("keepalive_requests", bad), 0).expect_err("bad");
            assert_eq!(e.message, "\"keepalive_requests\" directive invalid number");
        }
    }

    #[test]
    fn missing_argument_is_an_error_not_a_panic() {
        let e = number(&d("worker_connections", "1"), 3).expect_err("no such arg");
        assert_eq!(
            e.message,
            "invalid number of arguments in \"worker_connections\" directive"
        );
    }
}
