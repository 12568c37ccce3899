//! `ngx_http_split_clients_module`: `split_clients string $variable { 0.5% one; 2% two; *
//! ""; }` makes a variable for A/B testing: the string, evaluated for the request, is hashed
//! with MurmurHash2 as nginx hashes it, and the variable takes the value of the first part
//! whose share of the 32-bit hash space (cumulative, from the top of the list) holds the
//! hash; `*` takes the rest; past every part the value is empty. The same client string
//! lands in the same part as with nginx.

use std::sync::Arc;

use portcullis_config::{ConfigError, Directive};

use crate::module::{self, Load, Module, Slot};
use crate::request::{Handlers, Request, Response};
use crate::vars::{variable_name, Names, Template};

pub(crate) struct SplitClientsModule;

pub(crate) static MODULE: SplitClientsModule = SplitClientsModule;

/// Every `split_clients` of the `http` block, in order: a variable holds its block's place.
#[derive(Clone, Default)]
struct Splits(Vec<Arc<Split>>);

struct Split {
    source: Template,
    /// The upper end of each part in the hash space (`None` for `*`), and its value.
    parts: Vec<(Option<u32>, String)>,
}

impl Module for SplitClientsModule {
    fn name(&self) -> &'static str {
        "http_split_clients_module"
    }

    fn declare(&self, http: &[Directive], names: &mut Names, me: usize) -> Result<(), ConfigError> {
        names.add_block_targets(me, http, "split_clients", |d| {
            variable_name(d.arg(1)).unwrap_or("")
        })
    }

    fn defaults(&self) -> Slot {
        Arc::new(Splits::default())
    }

    fn directive(
        &self,
        conf: &mut Slot,
        d: &Directive,
        cx: &mut Load<'_>,
    ) -> Result<(), ConfigError> {
        if variable_name(d.arg(1)).is_none() {
            return Err(ConfigError::at(
                d,
                format!("invalid variable name \"{}\"", d.arg(1)),
            ));
        }
        let source = Template::compile(d.arg(0), d, cx.names)?;
        let mut parts = Vec::new();
        let (mut sum, mut last) = (0u64, 0u64);
        for e in d.children() {
            let [value] = e.args.as_slice() else {
                return Err(ConfigError::at(
                    e,
                    format!("invalid parameter \"{}\"", e.name),
                ));
            };
            let percent = if e.name == "*" {
                None
            } else {
                let n = e
                    .name
                    .strip_suffix('%')
                    .and_then(hundredths)
                    .filter(|&n| n > 0)
                    .ok_or_else(|| {
                        ConfigError::at(e, format!("invalid percent value \"{}\"", e.name))
                    })?;
                Some(n)
            };
            sum = match percent {
                Some(n) => sum + n,
                None => 10000,
            };
            if sum > 10000 {
                return Err(ConfigError::at(e, "percent total is greater than 100%"));
            }
            // nginx's upper end of the part: its cumulative share of 0xffffffff.
            let end = percent.map(|n| {
                last += n * u64::from(u32::MAX) / 10000;
                last as u32
            });
            parts.push((end, value.value.clone()));
        }
        module::edit::<Splits>(conf)
            .0
            .push(Arc::new(Split { source, parts }));
        Ok(())
    }

    /// Variables only: no phase handler.
    fn is_active(&self, _conf: &Slot) -> bool {
        false
    }

    fn handlers(&self) -> &'static (dyn std::any::Any + Send + Sync) {
        static HANDLERS: Handlers = Handlers {
            variable: Some(variable),
            empty_is_a_value: true,
            ..Handlers::NONE
        };
        &HANDLERS
    }
}

/// nginx's `ngx_atofp(text, len, 2)`: a decimal number with at most two decimals, in
/// hundredths.
fn hundredths(text: &str) -> Option<u64> {
    let (whole, frac) = text.split_once('.').unwrap_or((text, ""));
    if frac.len() > 2 || (whole.is_empty() && frac.is_empty()) {
        return None;
    }
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || !digits(frac) {
        return None;
    }
    let whole: u64 = if whole.is_empty() {
        0
    } else {
        whole.parse().ok()?
    };
    let frac: u64 = format!("{frac:0<2}").parse().ok()?;
    whole.checked_mul(100)?.checked_add(frac)
}

fn variable(
    req: &Request<'_>,
    conf: &Slot,
    var: &Slot,
    out: &mut Vec<u8>,
    _resp: Option<(&Response, u64)>,
) {
    let Some(split) = module::get::<Splits>(conf)
        .0
        .get(*module::get::<usize>(var))
    else {
        return;
    };
    let hash = murmur_hash2(&req.eval(&split.source));
    let part = split
        .parts
        .iter()
        .find(|(end, _)| end.is_none_or(|end| hash < end));
    if let Some((_, value)) = part {
        out.extend_from_slice(value.as_bytes());
    }
}

/// nginx's `ngx_murmur_hash2`: MurmurHash2 with a seed of 0, little-endian words.
fn murmur_hash2(data: &[u8]) -> u32 {
    const M: u32 = 0x5bd1_e995;
    let mut h = data.len() as u32;
    let mut words = data.chunks_exact(4);
    for w in &mut words {
        let mut k = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> 24;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M) ^ k;
    }
    let tail = words.remainder();
    if !tail.is_empty() {
        if tail.len() >= 3 {
            h ^= u32::from(tail[2]) << 16;
        }
        if tail.len() >= 2 {
            h ^= u32::from(tail[1]) << 8;
        }
        h ^= u32::from(tail[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^ (h >> 15)
}

#[cfg(test)]
mod tests {
    use super::{hundredths, murmur_hash2};

    #[test]
    fn percents_are_read_as_nginx_reads_them() {
        assert_eq!(hundredths("0.5"), Some(50));
        assert_eq!(hundredths("12"), Some(1200));
        assert_eq!(hundredths("12.34"), Some(1234));
        assert_eq!(hundredths(".5"), Some(50));
        assert_eq!(hundredths("0.555"), None);
        assert_eq!(hundredths("x"), None);
        assert_eq!(hundredths(""), None);
    }

    #[test]
    fn murmur_hash2_of_nothing_is_zero() {
        // The integration test compares whole splits with nginx's.
        assert_eq!(murmur_hash2(b""), 0);
    }
}
