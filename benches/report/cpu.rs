//! CPU time of individual threads of this process, from /proc.

use std::collections::HashSet;
use std::time::Duration;

/// Thread ids of this process.
pub fn tids() -> HashSet<u32> {
    std::fs::read_dir("/proc/self/task")
        .map(|dir| {
            dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Time thread `tid` has run on a CPU: the scheduler's nanosecond count where the kernel
/// keeps one, else user + system clock ticks.
pub fn cpu_time(tid: u32) -> Duration {
    if let Ok(s) = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat"))
        && let Some(ns) = s.split_whitespace().next().and_then(|n| n.parse().ok())
    {
        return Duration::from_nanos(ns);
    }
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap_or_default();
    // Fields after the parenthesised name: state is field 3, utime 14, stime 15.
    let after_name = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or("");
    let fields: Vec<u64> = after_name
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|f| f.parse().ok())
        .collect();
    let ticks: u64 = fields.iter().sum();
    Duration::from_millis(ticks * 10) // USER_HZ is 100 on Linux
}

/// Total CPU time of a set of threads.
pub fn cpu_of(tids: &HashSet<u32>) -> Duration {
    tids.iter().map(|&t| cpu_time(t)).sum()
}

/// CPU time of this whole process so far, exited threads included (user + system clock
/// ticks, 10 ms each: meant for spans of seconds).
pub fn process_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after_name = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or("");
    let ticks: u64 = after_name
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|f| f.parse::<u64>().ok())
        .sum();
    Duration::from_millis(ticks * 10)
}

/// CPU time of this whole process so far (getrusage: user + system, to the microsecond).
pub fn rusage_self() -> Duration {
    // SAFETY: an all-zero rusage is a valid value for getrusage to overwrite.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid rusage for the call to write.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    assert_eq!(rc, 0, "getrusage");
    let micros = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    Duration::from_micros(micros(usage.ru_utime) + micros(usage.ru_stime))
}

/// CPU time the Redis server has used so far (INFO cpu: user + system).
pub fn server_cpu(admin: &mut redis::Connection) -> Duration {
    let info: String = redis::cmd("INFO").arg("cpu").query(admin).unwrap();
    let seconds: f64 = info
        .lines()
        .filter_map(|line| {
            let (key, value) = line.split_once(':')?;
            ["used_cpu_sys", "used_cpu_user"]
                .contains(&key)
                .then(|| value.trim().parse::<f64>().ok())?
        })
        .sum();
    Duration::from_secs_f64(seconds)
}
