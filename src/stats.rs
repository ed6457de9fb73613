//! Statistics across repeats (design.md §4 "Repeats"): medians, quartiles and
//! interquartile ranges of per-run figures. Pure functions over plain numbers
//! so experiments, `compare` and reports agree on one quantile definition.
//!
//! Quantiles use linear interpolation between order statistics, Hyndman and
//! Fan's type 7 (the default of R's `quantile`, NumPy's `linear` and
//! spreadsheets' `PERCENTILE.INC`): for sorted `x[0..n]` and probability `p`,
//! `h = (n - 1) p`, `Q(p) = x[floor h] + (h - floor h) (x[floor h + 1] - x[floor h])`.
//! With it, the 0.5 quantile is the ordinary median (mean of the middle two
//! for an even count).

use serde::{Deserialize, Serialize};

/// The quantile definition, as written into experiment files.
pub const QUANTILE_DEFINITION: &str =
    "type 7 (Hyndman-Fan): linear interpolation between order statistics, h = (n-1)p; as R quantile() default and numpy 'linear'";

/// The values sorted ascending, with NaN dropped (NaN is "no value").
pub fn sorted(values: &[f64]) -> Vec<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
    v.sort_by(f64::total_cmp);
    v
}

/// The type 7 quantile `p` (clamped to 0..=1) of values already sorted
/// ascending; `None` when there are none.
pub fn quantile_sorted(sorted: &[f64], p: f64) -> Option<f64> {
    let n = sorted.len();
    if n == 0 {
        return None;
    }
    let h = (n - 1) as f64 * p.clamp(0.0, 1.0);
    let lo = h.floor() as usize;
    let hi = (lo + 1).min(n - 1);
    let frac = h - lo as f64;
    Some(sorted[lo] + frac * (sorted[hi] - sorted[lo]))
}

/// The type 7 quantile `p` of unsorted values (NaN ignored); `None` when
/// empty. The tests' reference for [`Spread::of`].
#[cfg(test)]
pub fn quantile(values: &[f64], p: f64) -> Option<f64> {
    quantile_sorted(&sorted(values), p)
}

/// The median (NaN ignored); `None` when empty.
#[cfg(test)]
pub fn median(values: &[f64]) -> Option<f64> {
    quantile(values, 0.5)
}

/// Median and quartiles of one figure across runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    /// Number of runs that had a value (NaN and missing values not counted).
    pub n: usize,
    /// Median (type 7 quantile 0.5); `None` when `n = 0`.
    pub median: Option<f64>,
    /// First quartile (type 7 quantile 0.25); `None` when `n = 0`.
    pub q1: Option<f64>,
    /// Third quartile (type 7 quantile 0.75); `None` when `n = 0`.
    pub q3: Option<f64>,
}

impl Spread {
    /// The spread of `values` (NaN ignored).
    pub fn of(values: &[f64]) -> Spread {
        let v = sorted(values);
        Spread {
            n: v.len(),
            median: quantile_sorted(&v, 0.5),
            q1: quantile_sorted(&v, 0.25),
            q3: quantile_sorted(&v, 0.75),
        }
    }

    /// The spread of the values that are present (`None` is not counted in `n`).
    pub fn of_options(values: impl IntoIterator<Item = Option<f64>>) -> Spread {
        let v: Vec<f64> = values.into_iter().flatten().collect();
        Spread::of(&v)
    }

    /// The same spread with median and quartiles rounded to `decimals` places
    /// (interpolation leaves binary noise such as 3.0833500000000003).
    pub fn rounded(self, decimals: i32) -> Spread {
        let k = 10f64.powi(decimals);
        let r = |v: Option<f64>| v.map(|v| (v * k).round() / k);
        Spread { n: self.n, median: r(self.median), q1: r(self.q1), q3: r(self.q3) }
    }

    /// Interquartile range `q3 - q1`; `None` when `n = 0`.
    pub fn iqr(&self) -> Option<f64> {
        Some(self.q3? - self.q1?)
    }
}

/// Percent change of `value` relative to `reference`: `(value / reference - 1) * 100`.
/// Negative means `value` is lower. `None` when either is missing or the
/// reference is zero.
pub fn pct_change(value: Option<f64>, reference: Option<f64>) -> Option<f64> {
    let (v, r) = (value?, reference?);
    (r != 0.0).then(|| (v / r - 1.0) * 100.0)
}

/// `value / reference`; `None` when either is missing or the reference is zero.
pub fn ratio(value: Option<f64>, reference: Option<f64>) -> Option<f64> {
    let (v, r) = (value?, reference?);
    (r != 0.0).then(|| v / r)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: Option<f64>, b: f64) {
        let a = a.expect("a value");
        assert!((a - b).abs() < 1e-12, "{a} != {b}");
    }

    #[test]
    fn median_of_odd_and_even_counts() {
        close(median(&[3.0, 1.0, 2.0]), 2.0);
        close(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        close(median(&[5.0, 1.0, 9.0, 2.0, 7.0]), 5.0);
        close(median(&[10.0, 20.0]), 15.0);
    }

    #[test]
    fn single_value_is_every_quantile() {
        for p in [0.0, 0.25, 0.5, 0.75, 1.0] {
            close(quantile(&[42.0], p), 42.0);
        }
        let s = Spread::of(&[42.0]);
        assert_eq!(s, Spread { n: 1, median: Some(42.0), q1: Some(42.0), q3: Some(42.0) });
        assert_eq!(s.iqr(), Some(0.0));
    }

    #[test]
    fn empty_has_no_value() {
        assert_eq!(median(&[]), None);
        assert_eq!(quantile(&[], 0.25), None);
        assert_eq!(Spread::of(&[]), Spread { n: 0, median: None, q1: None, q3: None });
        assert_eq!(Spread::of(&[]).iqr(), None);
        assert_eq!(Spread::of(&[f64::NAN]).n, 0);
    }

    #[test]
    fn type7_quartiles_match_hand_computation() {
        // 1..=10: h(0.25) = 9 * 0.25 = 2.25 -> x[2] + 0.25 (x[3] - x[2]) = 3.25;
        // h(0.75) = 6.75 -> 7 + 0.75 = 7.75; median h = 4.5 -> 5.5.
        let v: Vec<f64> = (1..=10).map(f64::from).collect();
        let s = Spread::of(&v);
        assert_eq!(s.n, 10);
        close(s.q1, 3.25);
        close(s.median, 5.5);
        close(s.q3, 7.75);
        close(s.iqr(), 4.5);
        // [1, 2, 4, 8] (given unsorted): h(0.25) = 0.75 -> 1 + 0.75 * 1 = 1.75;
        // h(0.75) = 2.25 -> 4 + 0.25 * 4 = 5; median h = 1.5 -> 3.
        let s = Spread::of(&[8.0, 1.0, 4.0, 2.0]);
        close(s.q1, 1.75);
        close(s.median, 3.0);
        close(s.q3, 5.0);
        // Five runs [10, 20, 30, 40, 50]: h(0.25) = 1 -> 20 exactly; h(0.75) = 3 -> 40.
        let s = Spread::of(&[50.0, 10.0, 40.0, 20.0, 30.0]);
        assert_eq!((s.q1, s.median, s.q3), (Some(20.0), Some(30.0), Some(40.0)));
        // Two values: h(0.25) = 0.25 -> 0 + 0.25 * 4 = 1.
        close(quantile(&[0.0, 4.0], 0.25), 1.0);
        close(quantile(&[0.0, 4.0], 0.0), 0.0);
        close(quantile(&[0.0, 4.0], 1.0), 4.0);
    }

    #[test]
    fn missing_values_are_not_counted() {
        let s = Spread::of_options([Some(1.0), None, Some(3.0), None]);
        assert_eq!(s.n, 2);
        close(s.median, 2.0);
        close(s.q1, 1.5);
    }

    #[test]
    fn changes_and_ratios() {
        close(pct_change(Some(81.8), Some(100.0)), -18.2);
        close(pct_change(Some(150.0), Some(100.0)), 50.0);
        assert_eq!(pct_change(Some(1.0), Some(0.0)), None);
        assert_eq!(pct_change(None, Some(1.0)), None);
        close(ratio(Some(6.0), Some(3.0)), 2.0);
        assert_eq!(ratio(Some(6.0), None), None);
    }

    #[test]
    fn rounding_keeps_n_and_missing_values() {
        let s = Spread::of(&[2.25, 3.0833, 3.0834, 9.0]).rounded(6);
        assert_eq!(s.n, 4);
        assert_eq!(s.median, Some(3.08335));
        assert_eq!(Spread::default().rounded(6), Spread::default());
    }
}
