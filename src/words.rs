//! Durations and counts as a person writes them, for error messages and the [`Stats`] line:
//! `100 years and 1 s`, `1 h 30 min`, `65,536`.
//!
//! [`Stats`]: crate::Stats

use std::fmt;
use std::time::Duration;

/// Nanoseconds in each unit a duration is written with, largest first; a year is 365 days.
const UNITS: [(u128, &str, &str); 7] = [
    (365 * 24 * 3600 * NANOS_PER_SEC, "year", "years"),
    (24 * 3600 * NANOS_PER_SEC, "day", "days"),
    (3600 * NANOS_PER_SEC, "h", "h"),
    (60 * NANOS_PER_SEC, "min", "min"),
    (NANOS_PER_SEC, "s", "s"),
    (1_000_000, "ms", "ms"),
    (1_000, "µs", "µs"),
];

const NANOS_PER_SEC: u128 = 1_000_000_000;

/// A duration in words: its largest unit and the next one that is not zero (`1 h 30 min`,
/// `100 years and 1 s`, `999 ms`). Never rounded up, and never equal in words to a value it
/// is not: what the two units leave out makes it `over 1 h 30 min`, and a duration under a
/// microsecond is `under 1 µs`; zero is `0 s`.
pub(crate) struct Words(pub Duration);

impl fmt::Display for Words {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut rest = self.0.as_nanos();
        match rest {
            0 => return f.write_str("0 s"),
            1..1_000 => return f.write_str("under 1 µs"),
            _ => {}
        }
        let mut parts = [None; 2];
        let mut taken = 0;
        for (i, (nanos, ..)) in UNITS.iter().enumerate() {
            let n = rest / nanos;
            if n > 0 {
                parts[taken] = Some((n, i));
                rest -= n * nanos;
                taken += 1;
                if taken == parts.len() {
                    break;
                }
            }
        }
        if rest > 0 {
            f.write_str("over ")?;
        }
        let unit = |n: u128, i: usize| {
            let (_, one, many) = UNITS[i];
            (Count(n), if n == 1 { one } else { many })
        };
        let Some((n, first)) = parts[0] else {
            unreachable!("a duration of a microsecond or more has a unit")
        };
        let (count, name) = unit(n, first);
        write!(f, "{count} {name}")?;
        if let Some((n, i)) = parts[1] {
            // The units written as words (years, days) read better joined by "and".
            let joint = if first <= 1 { " and " } else { " " };
            let (count, name) = unit(n, i);
            write!(f, "{joint}{count} {name}")?;
        }
        Ok(())
    }
}

/// A count with a comma between thousands: `65,536`.
pub(crate) struct Count<N>(pub N);

impl<N: Into<u128> + Copy> fmt::Display for Count<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let digits = self.0.into().to_string();
        for (i, digit) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i) % 3 == 0 {
                f.write_str(",")?;
            }
            write!(f, "{digit}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(d: Duration) -> String {
        Words(d).to_string()
    }

    const YEAR: u64 = 365 * 24 * 3600;

    #[test]
    fn durations_read_as_a_person_writes_them() {
        let cases = [
            (Duration::ZERO, "0 s"),
            (Duration::from_nanos(1), "under 1 µs"),
            (Duration::from_nanos(999), "under 1 µs"),
            (Duration::from_micros(1), "1 µs"),
            (Duration::from_nanos(1_500), "over 1 µs"),
            (Duration::from_micros(1_500), "1 ms 500 µs"),
            (Duration::from_millis(999), "999 ms"),
            (Duration::from_secs(1), "1 s"),
            (Duration::from_millis(1_250), "1 s 250 ms"),
            (Duration::from_secs(59), "59 s"),
            (Duration::from_secs(60), "1 min"),
            (Duration::from_secs(61), "1 min 1 s"),
            (Duration::from_secs(5400), "1 h 30 min"),
            (Duration::from_secs(5401), "over 1 h 30 min"),
            (Duration::from_secs(3601), "1 h 1 s"),
            (Duration::from_secs(24 * 3600), "1 day"),
            (
                Duration::from_secs(2 * 24 * 3600 + 3 * 3600),
                "2 days and 3 h",
            ),
            (Duration::from_secs(YEAR), "1 year"),
            (Duration::from_secs(100 * YEAR), "100 years"),
            (Duration::from_secs(100 * YEAR + 1), "100 years and 1 s"),
            (
                Duration::from_secs(100 * YEAR) + Duration::from_nanos(1),
                "over 100 years",
            ),
            (
                Duration::from_secs(100 * YEAR) + Duration::from_micros(1),
                "100 years and 1 µs",
            ),
            (
                Duration::from_millis(29) + Duration::from_micros(999),
                "29 ms 999 µs",
            ),
            (
                Duration::from_millis(30) - Duration::from_nanos(1),
                "over 29 ms 999 µs",
            ),
            (Duration::MAX, "over 584,942,417,355 years and 26 days"),
        ];
        for (d, expected) in cases {
            assert_eq!(words(d), expected, "{d:?}");
        }
    }

    #[test]
    fn counts_have_commas_between_thousands() {
        for (n, expected) in [
            (0u64, "0"),
            (999, "999"),
            (1_000, "1,000"),
            (65_536, "65,536"),
            (1_234_567, "1,234,567"),
            (u64::MAX, "18,446,744,073,709,551,615"),
        ] {
            assert_eq!(Count(n).to_string(), expected);
        }
    }
}
