//! cordon-init's supervision, in real containers: exit codes, signals, reaping, the deadline,
//! killing what the workload leaves, and a panic.

use std::time::Duration;

use cordon::launch::{InitVerdict, Prepared};
use cordon_contract::report::{EXIT_DEADLINE, EXIT_INIT_FAILURE};
use cordon_contract::{paths, InitLine};
use cordon_tests::{fixture, launch_valid, launch_with, serial, Finished, Run};

async fn run_workload(run: Run) -> Finished {
    let f = fixture("t-init").await;
    let finished = launch_valid(&f.ctl, &f.profile(&run)).await;
    f.finish().await;
    assert!(
        matches!(
            finished.verdict,
            InitVerdict::Attested {
                digest_matches: true,
                ..
            }
        ),
        "{:?}",
        finished.verdict
    );
    finished
}

/// Start `run`, send `signal` to the container once the workload is up, return how it ended.
async fn run_and_signal(run: Run, signal: &str) -> Finished {
    let f = fixture("t-sig").await;
    let profile = f.profile(&run);
    let prepared = Prepared::new(&f.engine, &profile).unwrap();
    let (refusals, finished) = launch_with(&f.ctl, &profile, prepared, |launch| {
        let engine = f.engine.clone();
        let container = launch.container.clone();
        let signal = signal.to_owned();
        async move {
            // The init prints its attestation before it starts the workload: wait for it.
            for _ in 0..100 {
                let logs = cordon::launch::Launch::adopt(container.clone())
                    .output(&engine)
                    .await
                    .unwrap();
                if logs.stderr.contains("\"attestation\"") {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
            cordon::launch::Launch::adopt(container)
                .kill(&engine, &signal)
                .await
                .unwrap();
        }
    })
    .await;
    assert!(refusals.is_empty(), "{refusals:?}");
    f.finish().await;
    finished
}

#[tokio::test]
async fn exit_code_0() {
    assert_eq!(run_workload(Run::workload(&["exit", "0"])).await.code, 0);
}

#[tokio::test]
async fn exit_code_1() {
    assert_eq!(run_workload(Run::workload(&["exit", "1"])).await.code, 1);
}

#[tokio::test]
async fn exit_code_255() {
    assert_eq!(
        run_workload(Run::workload(&["exit", "255"])).await.code,
        255
    );
}

/// A workload killed by signal n gives 128+n.
#[tokio::test]
async fn self_signal_gives_128_plus_n() {
    for (signal, n) in [("15", 15), ("2", 2), ("1", 1), ("9", 9), ("10", 10)] {
        let finished = run_workload(Run::workload(&["signal-self", signal])).await;
        assert_eq!(
            finished.code,
            128 + n,
            "signal {signal}: {:?}",
            finished.output
        );
    }
}

/// Signals sent to the container reach the workload through the init; SIGKILL ends PID 1 itself.
#[tokio::test]
async fn forwarded_signals_give_128_plus_n() {
    for (signal, n) in [
        ("TERM", 15),
        ("INT", 2),
        ("HUP", 1),
        ("USR1", 10),
        ("KILL", 9),
    ] {
        let finished = run_and_signal(Run::workload(&["sleep", "60000"]), signal).await;
        assert_eq!(finished.code, 128 + n, "{signal}: {:?}", finished.output);
        if signal != "KILL" {
            assert_eq!(
                finished.exit_line(),
                Some(InitLine::Exit {
                    code: 128 + n as i32,
                    terminated: 0,
                    killed: 0
                }),
                "{signal}"
            );
        }
    }
}

/// 1,000 orphans exiting at the same moment are all reaped (the workload counts zombies).
#[tokio::test]
async fn burst_of_1000_children_all_reaped() {
    let _serial = serial().await;
    let mut run = Run::workload(&["burst", "1000"]);
    run.limits.pids = 2048;
    let finished = run_workload(run).await;
    assert!(
        finished
            .output
            .stdout
            .contains("{\"orphans\":1000,\"zombies\":0}"),
        "{:?}",
        finished.output
    );
    assert_eq!(finished.code, 0);
}

/// A grandchild that ignores TERM is sent TERM, then KILL after the grace period.
#[tokio::test]
async fn grandchild_ignoring_term_is_killed_after_grace() {
    let finished = run_workload(Run::workload(&["ignore-term-grandchild"])).await;
    assert_eq!(finished.code, 0, "the main child's code");
    assert!(
        finished
            .output
            .stdout
            .contains("grandchild ignored SIGTERM"),
        "{:?}",
        finished.output
    );
    match finished.exit_line() {
        Some(InitLine::Exit {
            code: 0,
            terminated,
            killed,
        }) => assert!(terminated >= 1 && killed >= 1),
        other => panic!("exit line {other:?}"),
    }
}

/// A child that left the workload's session with setsid still gets TERM.
#[tokio::test]
async fn setsid_child_is_still_terminated() {
    let finished = run_workload(Run::workload(&["setsid-child"])).await;
    assert_eq!(finished.code, 0);
    assert!(
        finished.output.stdout.contains("setsid child got SIGTERM"),
        "{:?}",
        finished.output
    );
    assert!(
        matches!(
            finished.exit_line(),
            Some(InitLine::Exit {
                code: 0,
                terminated: 1..,
                killed: 0
            })
        ),
        "{:?}",
        finished.exit_line()
    );
}

/// The policy's deadline ends the workload with the reserved code.
#[tokio::test]
async fn deadline_is_enforced() {
    let mut run = Run::workload(&["sleep", "60000"]);
    run.limits.deadline = Duration::from_millis(1500);
    let finished = run_workload(run).await;
    assert_eq!(finished.code, i64::from(EXIT_DEADLINE));
    assert!(
        finished
            .output
            .stderr
            .contains("{\"cordon\":\"deadline\",\"deadline_ms\":1500}"),
        "{:?}",
        finished.output
    );
}

/// A panic in the init takes the container down with a non-zero code (PID 1 exiting kills the
/// workload too).
#[tokio::test]
async fn init_panic_exits_nonzero() {
    let f = fixture("t-panic").await;
    let profile = f.profile(&Run::workload(&["sleep", "60000"]));
    let mut prepared = Prepared::new(&f.engine, &profile).unwrap();
    prepared.plan.create.entrypoint = Some(vec![paths::INIT.into(), "self-test-panic".into()]);
    let (refusals, finished) = launch_with(&f.ctl, &profile, prepared, |_| async {}).await;
    // The validator sees the changed entrypoint; this test starts it anyway.
    assert!(
        refusals
            .iter()
            .any(|r| r.id == cordon_contract::Id::InitEntrypoint),
        "{refusals:?}"
    );
    assert_eq!(finished.code, i64::from(EXIT_INIT_FAILURE));
    assert!(
        finished.output.stderr.contains("panic: ") && finished.output.stderr.contains("self-test"),
        "{:?}",
        finished.output
    );
    f.finish().await;
}
