//! Percentiles and means of durations, and the ratios every figure is taken as.

use std::time::Duration;

/// The `p` quantile (0..=1) by nearest rank; sorts `v`.
pub fn percentile(v: &mut [Duration], p: f64) -> Duration {
    if v.is_empty() {
        return Duration::ZERO;
    }
    v.sort_unstable();
    v[((v.len() - 1) as f64 * p).round() as usize]
}

pub fn mean(v: &[Duration]) -> Duration {
    if v.is_empty() {
        return Duration::ZERO;
    }
    v.iter().sum::<Duration>() / v.len() as u32
}

pub fn max(v: &[Duration]) -> Duration {
    v.iter().copied().max().unwrap_or_default()
}

/// How long `n` calls of `f` take each, in order.
pub fn time_each(n: usize, mut f: impl FnMut()) -> Vec<Duration> {
    (0..n)
        .map(|_| {
            let t = std::time::Instant::now();
            f();
            t.elapsed()
        })
        .collect()
}

/// How long one call of `f` takes.
pub fn time_one(f: impl FnOnce()) -> Duration {
    let t = std::time::Instant::now();
    f();
    t.elapsed()
}

pub fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64()
}

/// Quantile `q` of `ours` over the same quantile of `theirs`.
pub fn quantile_ratio(ours: &mut [Duration], theirs: &mut [Duration], q: f64) -> f64 {
    ratio(percentile(ours, q), percentile(theirs, q))
}
