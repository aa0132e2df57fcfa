//! `cordon bench command`: an approved command's round trip against a bare run of the same image,
//! and what commands add to an execute invocation.
//!
//! - The round trip is the controller's side of one call, from the decided call to its answer:
//!   the command container's profile from the agent's, its volumes, create, read back and
//!   validation, start, the init's preflight and attestation, the command (`cordon-probe
//!   workload exit 0`), its output, and the removal of everything made for it. The call's two
//!   hops over the relay (a few small JSON lines over a unix socket and an attached stream) are
//!   not in it.
//! - The bare run is `docker run --rm` of the same image and argv through the same API: create
//!   (the probe as its entrypoint, nothing mounted, no hardening), start, wait, remove.
//! - The invocation is a one-shot execute with the fake vendor CLI on a small repository, with
//!   and without an approved command offered (the fake CLI calls none): what offering commands
//!   costs an invocation (the toolchain image found, its program checked, the relay), and one
//!   call's round trip as a share of the invocation.
//!
//! Pairs are interleaved; each figure is a median.

use std::time::{Duration, Instant};

use bollard::models::ContainerCreateBody;
use cordon::controller::Controller;
use cordon::engine::{objects, pending::Created};
use cordon::error::{Error, Result};
use cordon::launch::command::{self as run, CommandImage};
use cordon::launch::Launch;
use cordon::profile::Profile;
use cordon::storage::{self, TaskStorage};
use cordon_contract::command::{Answer, ApprovedCommand, Scratch, Writes};
use cordon_contract::{paths, Phase};

use crate::bench::median;

/// The report.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CommandBench {
    pub runs: usize,
    pub round_trip_ms: Vec<f64>,
    pub bare_ms: Vec<f64>,
    pub round_trip_median_ms: f64,
    pub bare_median_ms: f64,
    /// Round trip over bare (target: at most 1.2).
    pub ratio: f64,
    pub execute_ms: Vec<f64>,
    pub execute_with_commands_ms: Vec<f64>,
    pub execute_median_ms: f64,
    pub execute_with_commands_median_ms: f64,
    /// One call's round trip over an execute invocation with commands offered.
    pub call_share: f64,
}

/// The trivial command.
fn trivial(image: &str) -> ApprovedCommand {
    ApprovedCommand {
        name: "trivial".to_owned(),
        description: "exits 0".to_owned(),
        argv: vec![
            paths::PROBE.to_owned(),
            "workload".to_owned(),
            "exit".to_owned(),
            "0".to_owned(),
        ],
        image: image.to_owned(),
        env: vec![],
        workdir: paths::WORK.to_owned(),
        deadline_secs: 60,
        output_bytes: 64 * 1024,
        scratch: Scratch {
            bytes: 64 << 20,
            inodes: 4096,
        },
        runs: 1,
        writes: Writes::None,
    }
}

/// One call's round trip through cordon (ms).
async fn round_trip(
    ctl: &Controller,
    agent: &Profile,
    command: &ApprovedCommand,
    image: &CommandImage,
) -> Result<f64> {
    let t = Instant::now();
    let (outcome, left) = run::run(
        ctl,
        agent,
        command,
        image,
        Duration::from_secs(60),
        std::future::pending(),
    )
    .await;
    if !left.is_empty() {
        return Err(Error::Unreleased(
            left.leftovers().iter().map(|l| format!("{l:?}")).collect(),
        ));
    }
    let outcome = outcome?;
    let took = t.elapsed().as_secs_f64() * 1000.0;
    match outcome.answer {
        Answer::Ran(ran) if ran.exit == Some(0) => Ok(took),
        other => Err(Error::Internal(format!(
            "the benchmark's command did not run and exit 0: {other:?}"
        ))),
    }
}

/// One bare `docker run --rm` of the same image and argv (ms).
async fn bare(ctl: &Controller, image_id: &str, argv: &[String]) -> Result<f64> {
    let engine = ctl.engine();
    let mut created = Created::default();
    let t = Instant::now();
    let ran = async {
        let body = ContainerCreateBody {
            image: Some(image_id.to_owned()),
            entrypoint: Some(argv.to_vec()),
            labels: Some(
                cordon::labels::Allocation::new(
                    &cordon::labels::Owner::random("bench"),
                    "bench",
                    cordon::uids::Uid::new(1_999_999)?,
                )?
                .labels(cordon::labels::Kind::Tool),
            ),
            ..Default::default()
        };
        let id = objects::create_container(
            engine,
            &cordon::labels::tool_name(),
            body,
            &created.shared(),
        )
        .await?;
        let mut launch = Launch::adopt(id);
        launch.start(engine).await?;
        let code = launch.wait(engine, Duration::from_secs(60)).await?;
        if code != 0 {
            return Err(Error::Internal(format!("the bare run exited {code}")));
        }
        Ok(())
    }
    .await;
    let removed = created.remove_all(engine, Duration::from_secs(30)).await;
    let took = t.elapsed().as_secs_f64() * 1000.0;
    ran?;
    removed?;
    Ok(took)
}

/// One execute invocation of the fake CLI on the repository at `dir` (ms), with `commands`.
async fn execute(
    ctl: &Controller,
    image_id: &str,
    dir: &std::path::Path,
    run: usize,
    commands: Vec<ApprovedCommand>,
) -> Result<f64> {
    let execute = cordon::invoke::oneshot::OneShot {
        phase: Phase::Execute,
        commands,
        ..crate::bench::questions_run(dir, run)
    };
    let t = Instant::now();
    crate::bench::answered(
        cordon::invoke::oneshot::oneshot(ctl, image_id, &execute, std::future::pending(), &|_| {})
            .await?,
    )?;
    Ok(t.elapsed().as_secs_f64() * 1000.0)
}

/// Run `runs` interleaved pairs of each.
pub async fn command(ctl: &Controller, image_id: &str, runs: usize) -> Result<CommandBench> {
    let engine = ctl.engine();
    let owner = cordon::labels::Owner::random("bench");
    let allocation = storage::new_allocation(engine, &owner, "bench").await?;
    let task = TaskStorage::create(
        engine,
        &allocation,
        image_id,
        storage::DEFAULT_WORK,
        storage::DEFAULT_METADATA,
    )
    .await?;
    let dir = std::env::temp_dir().join(format!("cordon-bench-command-{}", owner.as_str()));
    let result = async {
        let agent = crate::bench::profile_in(Phase::Execute, &owner, image_id, &task)?;
        let command = trivial(image_id);
        // The toolchain image as an invocation derives it (from the test image itself).
        let init = cordon::image::toolchain::init_of(engine, image_id, agent.allocation()).await?;
        let toolchain = cordon::image::toolchain::derive(engine, image_id, &init, &|_| {}).await?;
        let programs = cordon::image::toolchain::check_programs(
            engine,
            &toolchain,
            agent.allocation(),
            &[paths::PROBE],
        )
        .await?;
        let image = CommandImage {
            id: toolchain.id.clone(),
            env: toolchain.env.clone(),
            program: programs.into_iter().next().unwrap_or_default(),
        };
        // One unmeasured pair warms the image and the engine's caches.
        round_trip(ctl, &agent, &command, &image).await?;
        bare(ctl, &toolchain.id, &command.argv).await?;
        let (mut cordon, mut baseline) = (Vec::new(), Vec::new());
        for i in 0..runs {
            if i % 2 == 0 {
                cordon.push(round_trip(ctl, &agent, &command, &image).await?);
                baseline.push(bare(ctl, &toolchain.id, &command.argv).await?);
            } else {
                baseline.push(bare(ctl, &toolchain.id, &command.argv).await?);
                cordon.push(round_trip(ctl, &agent, &command, &image).await?);
            }
        }
        crate::bench::generate_repository(&dir, 200, 1 << 20)?;
        let (mut plain, mut offered) = (Vec::new(), Vec::new());
        for i in 0..runs {
            let with = vec![trivial(image_id)];
            if i % 2 == 0 {
                plain.push(execute(ctl, image_id, &dir, i, Vec::new()).await?);
                offered.push(execute(ctl, image_id, &dir, i, with).await?);
            } else {
                offered.push(execute(ctl, image_id, &dir, i, with).await?);
                plain.push(execute(ctl, image_id, &dir, i, Vec::new()).await?);
            }
        }
        let (rt, bm) = (median(&cordon), median(&baseline));
        let (pm, om) = (median(&plain), median(&offered));
        Ok::<_, Error>(CommandBench {
            runs,
            round_trip_median_ms: rt,
            bare_median_ms: bm,
            ratio: rt / bm,
            round_trip_ms: cordon,
            bare_ms: baseline,
            execute_median_ms: pm,
            execute_with_commands_median_ms: om,
            call_share: rt / (om + rt),
            execute_ms: plain,
            execute_with_commands_ms: offered,
        })
    }
    .await;
    let _ = std::fs::remove_dir_all(&dir);
    task.remove(engine).await?;
    result
}

impl CommandBench {
    /// Plain text.
    pub fn text(&self) -> String {
        format!(
            "command: {} interleaved pairs (cordon-probe workload exit 0, writes: none)\n\
             one call's round trip (profile, volumes, create, validate, start, attest, run, output, remove) median {:.0} ms\n\
             bare docker run --rm of the same image and argv (create, start, wait, remove) median {:.0} ms\n\
             ratio round trip/bare {:.2} (target <= 1.2)\n\
             execute invocation, fake CLI, 200 files: median {:.0} ms; with a command offered {:.0} ms (+{:.0} ms: toolchain found, program checked, relay)\n\
             one call's share of an execute invocation that makes it: {:.0} %\n",
            self.runs,
            self.round_trip_median_ms,
            self.bare_median_ms,
            self.ratio,
            self.execute_median_ms,
            self.execute_with_commands_median_ms,
            self.execute_with_commands_median_ms - self.execute_median_ms,
            self.call_share * 100.0,
        )
    }
}
