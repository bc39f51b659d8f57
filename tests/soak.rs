//! The soak (`tests/support/soak.rs`) for 30 s: every kind of fault at random, the checker's
//! verdict, and no leak. `cargo run --release --example soak -- --seconds 600` is the long
//! run; its command line is checked here too.

mod support;

/// Live heap for the leak check (`support::heap`): the children are this binary.
#[global_allocator]
static HEAP: support::heap::Counting = support::heap::Counting;

use std::collections::HashMap;
use std::time::Duration;

use support::soak::{Options, parse_options};

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

/// The soak example's command line: flags over the environment, both flag forms, decimal and
/// hex numbers, and an error (never a default run) for anything else.
#[test]
fn the_soak_command_line_is_read_or_refused() {
    let parse = |args: &[&str], env: &[(&str, &str)]| {
        let env: HashMap<String, String> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        parse_options(args.iter().map(|a| a.to_string()), |var| {
            env.get(var).cloned()
        })
    };
    let run = |seconds, seed| {
        Ok(Options {
            seconds,
            seed,
            faults: None,
            help: false,
        })
    };
    assert_eq!(parse(&[], &[]), run(60, None));
    assert_eq!(parse(&["--seconds", "300"], &[]), run(300, None));
    assert_eq!(
        parse(&["--seconds=300", "--seed=7"], &[]),
        run(300, Some(7))
    );
    assert_eq!(
        parse(&["--seed", "0x5eed1234abcdef01"], &[]),
        run(60, Some(0x5eed_1234_abcd_ef01))
    );
    let env = [("SOAK_SECS", "90"), ("SOAK_SEED", "11")];
    assert_eq!(parse(&[], &env), run(90, Some(11)));
    assert_eq!(
        parse(&["--seconds", "5", "--seed", "3"], &env),
        run(5, Some(3))
    );
    assert!(parse(&["--help"], &[]).unwrap().help);
    assert_eq!(
        parse(&["--faults", "restart,kill-pubsub"], &[])
            .unwrap()
            .faults,
        Some(vec![9, 1])
    );
    assert_eq!(parse(&["--faults=none"], &[]).unwrap().faults, Some(vec![]));
    let env = [("SOAK_FAULTS", "reset")];
    assert_eq!(parse(&[], &env).unwrap().faults, Some(vec![6]));
    assert_eq!(
        parse(&["--faults", "stop-long"], &env).unwrap().faults,
        Some(vec![8])
    );

    for (args, env, says) in [
        (&["--secs", "5"][..], &[][..], "unknown argument"),
        (&["300"], &[], "unknown argument"),
        (&["--seconds"], &[], "needs a number"),
        (&["--seconds", "five"], &[], "not a number"),
        (&["--seconds=-1"], &[], "not a number"),
        (&["--seconds", "0"], &[], "not between"),
        (&["--seconds", "99999999999999999999"], &[], "not a number"),
        (&["--seconds", "18446744073709551615"], &[], "not between"),
        (&["--seed", "0x"], &[], "not a number"),
        (&["--seed", "0"], &[], "seed 0"),
        (&["--help=yes"], &[], "unknown argument"),
        (&["--faults", "restart,reboot"], &[], "not a kind of fault"),
        (&["--faults"], &[], "needs a list"),
        (&[], &[("SOAK_FAULTS", "kill normal")], "SOAK_FAULTS"),
        (&[], &[("SOAK_SECS", "a minute")], "SOAK_SECS"),
        (&[], &[("SOAK_SEED", "")], "SOAK_SEED"),
    ] {
        match parse(args, env) {
            Err(e) => assert!(
                e.contains(says),
                "{args:?} {env:?}: {e:?} should say {says:?}"
            ),
            Ok(options) => panic!("{args:?} {env:?} was accepted as {options:?}"),
        }
    }
}
