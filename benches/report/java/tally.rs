//! One side's figures over the blocks of a scenario, and the quantiles they are read with.

use std::collections::HashMap;
use std::time::Duration;

use super::{Run, Stats};

/// One side's figures over every block of one scenario.
#[derive(Default)]
pub(super) struct Tally {
    pub(super) acquisitions: u64,
    pub(super) timeouts: u64,
    pub(super) errors: u64,
    pub(super) first_error: Option<String>,
    pub(super) elapsed: Duration,
    pub(super) cpu: Duration,
    /// The JVM's JIT time over the measured runs (zero for ours).
    pub(super) jit: Duration,
    pub(super) waits: Vec<u64>,
    pub(super) cycles: Vec<u64>,
    pub(super) handoffs: Vec<u64>,
    pub(super) pairs: u64,
    pub(super) self_handoffs: u64,
    pub(super) per_thread: Vec<u64>,
    pub(super) server: Stats,
    /// From the `MONITOR` run: commands the client sent, by name, and the acquisitions.
    pub(super) sent: HashMap<String, u64>,
    pub(super) sent_acquisitions: u64,
}

impl Tally {
    pub(super) fn add(&mut self, mut run: Run, server: Stats) {
        if run.errors > 0 {
            eprintln!(
                "    {} errors, the first: {}",
                run.errors,
                run.first_error.as_deref().unwrap_or("?")
            );
        }
        self.acquisitions += run.acquisitions;
        self.timeouts += run.timeouts;
        self.errors += run.errors;
        if self.first_error.is_none() {
            self.first_error = run.first_error.take();
        }
        self.elapsed += run.elapsed;
        self.cpu += run.cpu;
        self.jit += run.jit;
        self.per_thread.extend(&run.per_thread);
        for (name, (calls, usec)) in server {
            let entry = self.server.entry(name).or_default();
            entry.0 += calls;
            entry.1 += usec;
        }
        run.samples.sort_by_key(|s| s.t1);
        self.waits.extend(run.samples.iter().map(|s| s.t1 - s.t0));
        self.cycles.extend(run.samples.iter().map(|s| s.t3 - s.t0));
        for pair in run.samples.windows(2) {
            let (before, next) = (pair[0], pair[1]);
            self.pairs += 1;
            self.self_handoffs += u64::from(before.thread == next.thread);
            if next.t0 < before.t2 && next.t1 >= before.t2 {
                self.handoffs.push(next.t1 - before.t2);
            }
        }
    }

    pub(super) fn per_acquisition(&self, v: f64) -> f64 {
        v / self.acquisitions.max(1) as f64
    }

    pub(super) fn throughput(&self) -> f64 {
        self.acquisitions as f64 / self.elapsed.as_secs_f64()
    }

    pub(super) fn cpu_us_per_acquisition(&self) -> f64 {
        self.per_acquisition(self.cpu.as_secs_f64() * 1e6)
    }

    /// Commands the server ran per acquisition, those inside scripts included.
    pub(super) fn server_commands(&self) -> f64 {
        self.per_acquisition(self.server.values().map(|c| c.0).sum::<u64>() as f64)
    }

    /// The server's µs per acquisition, each request counted once: a script's own time
    /// includes the commands it runs, which `INFO commandstats` also counts under their names,
    /// so of every other command only the share the client sent itself is counted (the sent
    /// commands per acquisition are the `MONITOR` run's).
    pub(super) fn server_usec(&self) -> f64 {
        let sent_per_acq = |name: &str| {
            self.sent.get(name).copied().unwrap_or(0) as f64 / self.sent_acquisitions.max(1) as f64
        };
        let usec: f64 = self
            .server
            .iter()
            .map(|(name, &(calls, usec))| {
                if name.starts_with("eval") || name.starts_with("fcall") {
                    usec as f64
                } else {
                    let sent = sent_per_acq(name) * self.acquisitions as f64;
                    usec as f64 * (sent / calls.max(1) as f64).min(1.0)
                }
            })
            .sum();
        self.per_acquisition(usec)
    }

    /// Every server µs per acquisition, script-internal commands counted twice (in the
    /// script's time and under their own names), as `INFO commandstats` sums them.
    pub(super) fn server_usec_all(&self) -> f64 {
        self.per_acquisition(self.server.values().map(|c| c.1).sum::<u64>() as f64)
    }

    pub(super) fn requests(&self) -> f64 {
        self.sent.values().sum::<u64>() as f64 / self.sent_acquisitions.max(1) as f64
    }
}

/// µs at quantile `q` of ns samples (nearest rank); NaN when there are none.
pub(super) fn quantile_us(v: &mut [u64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_unstable();
    v[((v.len() - 1) as f64 * q).round() as usize] as f64 / 1e3
}

pub(super) fn max_us(v: &[u64]) -> f64 {
    v.iter().copied().max().map_or(f64::NAN, |m| m as f64 / 1e3)
}
