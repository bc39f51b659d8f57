//! The soak (`tests/support/soak.rs`) for 30 s: every kind of fault at random, the checker's
//! verdict, and no leak. `SOAK_SECS=600 cargo run --release --example soak` is the long run.

mod support;

use std::time::Duration;

/// Entry point of the checker's child processes; does nothing unless started by a checker.
#[test]
#[ignore = "run as a child process by the checker"]
fn checker_child() {
    support::checker::run_child();
}

#[test]
fn thirty_seconds_of_random_faults_break_nothing_and_leak_nothing() {
    let mut soak = support::soak::Soak::new(Duration::from_secs(30), || {
        support::child_test_command("checker_child")
    });
    soak.period = Duration::from_secs(5);
    let counts = soak.run().unwrap_or_else(|failed| panic!("{failed}"));
    assert!(counts.sections > 1_000, "too little happened: {counts:?}");
    assert!(
        counts.reported_lost > 0,
        "30 s of faults that lose the lock state, and nobody was told: {counts:?}"
    );
}
