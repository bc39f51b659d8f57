//! Soak: the safety checker under random faults, for a while, watching for leaks.
//!
//! ```text
//! cargo run --release --example soak -- --seconds 600
//! cargo run --release --example soak -- --seconds 600 --seed 0x5eed1234abcdef01   # replay
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
//! Options (the command line wins over the environment):
//! - `--seconds N` or `--seconds=N`, or `SOAK_SECS`: how long (default 60);
//! - `--seed N` or `--seed=N`, or `SOAK_SEED`: which faults, when (decimal, or hex with `0x`).
//!   Without one, a random seed is drawn and printed first, so a failure can be replayed.
//! - `--faults KIND,KIND...`, or `SOAK_FAULTS`: only these kinds of fault (`restart,reset`;
//!   `none` for none), named as the soak prints them with `-` for spaces; default every kind.
//!
//! An unknown argument or a bad number prints the usage and exits with status 2.

#[path = "../tests/support/mod.rs"]
mod support;

/// Live heap for the leak check (`support::heap`): the children are this binary.
#[global_allocator]
static HEAP: support::heap::Counting = support::heap::Counting;

use std::process::{Command, ExitCode};
use std::time::Duration;

use support::soak::{Soak, USAGE, parse_options, random_seed};

fn main() -> ExitCode {
    // RUST_LOG=redlatch=warn shows what the crate logs; only errors by default, since every
    // injected fault makes the children warn.
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("error")).init();
    // The same executable is the checker's child process, started with the checker's
    // environment and no arguments: it must not get as far as the soak's command line.
    if support::checker::run_child() {
        return ExitCode::SUCCESS;
    }
    let options = match parse_options(std::env::args().skip(1), |var| std::env::var(var).ok()) {
        Ok(options) => options,
        Err(e) => {
            eprintln!("soak: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    if options.help {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let mut soak = Soak::new(Duration::from_secs(options.seconds), || {
        Command::new(std::env::current_exe().unwrap())
    });
    if let Some(faults) = options.faults {
        soak.faults = faults;
    }
    soak.seed = options.seed.unwrap_or_else(|| {
        let seed = random_seed();
        println!("soak: no seed given, drew {seed:#x}; replay with --seed {seed:#x}");
        seed
    });
    match soak.run() {
        Ok(_) => ExitCode::SUCCESS,
        Err(failed) => {
            println!("FAIL: {failed} (seed {:#x})", soak.seed);
            ExitCode::FAILURE
        }
    }
}
