//! Median and spread of repeated runs.
//!
//! The machine a benchmark runs on is rarely quiet, so each figure is measured several times
//! and reported as the median, with the spread (lowest and highest) beside it to show how
//! far one run may be trusted.

/// The median, lowest and highest of some measurements.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    /// The spread of `values`, or `None` when there are none or one is not a number.
    pub fn of(values: &[f64]) -> Option<Spread> {
        if values.iter().any(|v| v.is_nan()) {
            return None;
        }
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        let (&min, &max) = (sorted.first()?, sorted.last()?);
        let mid = sorted.len() / 2;
        let median = if sorted.len() % 2 == 1 {
            sorted[mid]
        } else {
            (sorted[mid - 1] + sorted[mid]) / 2.0
        };
        Some(Spread { median, min, max })
    }

    /// Half the range as a share of the median (±), 0 for a single run.
    pub fn relative(&self) -> f64 {
        if self.median == 0.0 {
            return 0.0;
        }
        (self.max - self.min) / 2.0 / self.median.abs()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn odd_and_even_counts() {
        let s = Spread::of(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
        let s = Spread::of(&[4.0, 1.0, 2.0, 3.0]).unwrap();
        assert_eq!(s.median, 2.5);
        assert!((s.relative() - 0.6).abs() < 1e-12);
    }

    #[test]
    fn nothing_to_summarize() {
        assert_eq!(Spread::of(&[]), None);
        assert_eq!(Spread::of(&[1.0, f64::NAN]), None);
        assert_eq!(Spread::of(&[5.0]).unwrap().relative(), 0.0);
        assert_eq!(Spread::of(&[0.0]).unwrap().relative(), 0.0);
    }
}
