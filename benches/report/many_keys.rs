//! Many locks, no hold: 16 threads over 1,000 locks, as a service locking entities by id
//! does. Acquisitions per second against the seed articles' HSET scripts (plain and with a
//! fencing token added), against raw EVALSHA round trips and against redlatch's own
//! try_lock(ZERO); and the CPU per acquisition, client's and server's, since with both cores
//! busy the two together bound the rate.

use std::time::Duration;

use crate::contenders::connection;
use crate::cpu;
use crate::figures::Figures;
use crate::scenario;

/// Acquisitions and the CPU they took, over a scenario's blocks.
#[derive(Default, Clone, Copy)]
struct CpuTally {
    acquisitions: f64,
    time: Duration,
    client: Duration,
    server: Duration,
}

impl CpuTally {
    /// Acquisitions per second, and the client's and the server's CPU per acquisition (µs).
    fn figures(&self) -> (f64, f64, f64) {
        let micros = |d: Duration| d.as_secs_f64() * 1e6 / self.acquisitions.max(1.0);
        (
            self.acquisitions / self.time.as_secs_f64(),
            micros(self.client),
            micros(self.server),
        )
    }
}

/// The five contenders, in four interleaved blocks each of `secs / 4`.
pub fn figures(f: &mut Figures, url: &str, secs: Duration) {
    // CPU per acquisition, this process's and the server's: the scenario keeps both cores
    // busy, so the two together bound it. Each contender runs in four blocks, interleaved
    // with the others', so that a slow spell of the machine (they last seconds here) falls
    // on all of them alike rather than on whichever ran then.
    let mut admin = connection(url);
    let block = secs / 4;
    let contenders: [&dyn Fn() -> f64; 5] = [
        &|| scenario::many_keys(url, 4, 4, 1000, scenario::MAX_WAIT, block),
        &|| scenario::many_keys_seed(url, 16, 1000, block, false),
        &|| scenario::many_keys_seed(url, 16, 1000, block, true),
        &|| scenario::raw_evalsha(url, 16, block),
        &|| scenario::many_keys(url, 4, 4, 1000, Duration::ZERO, block),
    ];
    let mut tallies = [CpuTally::default(); 5];
    for _ in 0..4 {
        for (run, tally) in contenders.iter().zip(tallies.iter_mut()) {
            let (ours, server) = (cpu::process_cpu(), cpu::server_cpu(&mut admin));
            tally.acquisitions += run() * block.as_secs_f64();
            tally.client += cpu::process_cpu() - ours;
            tally.server += cpu::server_cpu(&mut admin) - server;
            tally.time += block;
        }
    }
    let [ours, seed, seed_fenced, raw, try_zero] = tallies;
    let (acq_per_s, client_cpu, server_cpu) = ours.figures();
    let (seed_per_s, seed_client_cpu, seed_server_cpu) = seed.figures();
    let seed_fenced_per_s = seed_fenced.figures().0;
    let raw_per_s = raw.figures().0;
    let try_per_s = try_zero.figures().0;
    f.put(
        "many_keys_over_seed_hset",
        acq_per_s / seed_per_s,
        ">= 0.85",
        "acquisitions/s over the seed HSET scripts', 16 threads, 1,000 locks, hold 0",
    );
    f.put(
        "seed_fenced_many_keys_over_seed_hset",
        seed_fenced_per_s / seed_per_s,
        "",
        "the same for the seed scripts with a fencing token added as ours keeps one / the seed scripts'",
    );
    f.put(
        "many_keys_over_seed_fenced",
        acq_per_s / seed_fenced_per_s,
        "",
        "ours / that fenced seed's",
    );
    f.put(
        "many_keys_cpu_us_per_acq",
        client_cpu + server_cpu,
        "(reference)",
        "CPU per acquisition, µs, client process + Redis (1,000 locks, 16 threads)",
    );
    f.put(
        "many_keys_server_cpu_us_per_acq",
        server_cpu,
        "(reference)",
        "of which Redis's",
    );
    f.put(
        "many_keys_seed_cpu_us_per_acq",
        seed_client_cpu + seed_server_cpu,
        "(reference)",
        "the same for the seed scripts",
    );
    f.put(
        "many_keys_seed_server_cpu_us_per_acq",
        seed_server_cpu,
        "(reference)",
        "of which Redis's",
    );
    // The seed scripts' threads move on from a held lock; these wait for it (queue,
    // subscribe, hand-over). The same scenario with try_lock(ZERO) tells that cost apart from
    // the weight of the scripts and the client.
    f.put(
        "many_keys_try_over_seed_hset",
        try_per_s / seed_per_s,
        "",
        "the same with try_lock(ZERO): a held lock is skipped, as the seed scripts' threads do",
    );
    f.put(
        "many_keys_acq_per_s_over_raw",
        acq_per_s / raw_per_s,
        ">= 0.45",
        "acquisitions/s over raw EVALSHA round trips/s, 16 threads",
    );
}
