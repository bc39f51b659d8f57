//! Soak: the safety checker under random faults, for a while, watching for leaks.
//!
//! ```text
//! SOAK_SECS=600 cargo run --release --example soak
//! ```
//!
//! Three child processes, each with its own client and three threads, take turns on three
//! locks and write to a protected resource with their fencing tokens, while a random fault
//! hits every one to three seconds: connections killed or reset, scripts flushed, the server
//! paused, stopped, or killed and restarted, the network partitioned, a holder process stopped
//! past its lease. Prints a line every 10 s; at the end, the checker's verdict and whether
//! threads, memory, connections and channels came back to their baseline. Exits non-zero if
//! anything failed. See `tests/support/soak.rs` for what exactly is checked.
//!
//! Knobs: `SOAK_SECS` (default 60), `SOAK_SEED` (a number: which faults, when).

#[path = "../tests/support/mod.rs"]
mod support;

use std::process::{Command, ExitCode};
use std::time::Duration;

fn main() -> ExitCode {
    // The same executable is the checker's child process.
    if support::checker::run_child() {
        return ExitCode::SUCCESS;
    }
    let secs = std::env::var("SOAK_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60);
    let mut soak = support::soak::Soak::new(Duration::from_secs(secs), || {
        Command::new(std::env::current_exe().unwrap())
    });
    if let Some(seed) = std::env::var("SOAK_SEED").ok().and_then(|s| s.parse().ok()) {
        soak.seed = seed;
    }
    match soak.run() {
        Ok(_) => ExitCode::SUCCESS,
        Err(failed) => {
            println!("FAIL: {failed}");
            ExitCode::FAILURE
        }
    }
}
