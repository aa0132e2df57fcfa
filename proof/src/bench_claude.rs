//! `cordon bench invoke --vendor claude --fake-vendor`: the end-to-end questions invocation with
//! the real Claude Code CLI (the agent image, the fake Messages API behind the egress proxy)
//! against the same invocation with the fake vendor CLI (the test image, no network), interleaved
//! run by run on one generated repository; the real CLI's share of its own invocation; the agent
//! image's build time (as found, then reused) and size.

use std::time::Duration;

use cordon_contract::Vendor;

use crate::bench::{answered, median, questions_run};
use crate::bench_snapshot::Fixture;
use crate::fake_api::fake_api;
use cordon::controller::Controller;
use cordon::error::{Error, Result};
use cordon::image::agent::{build_agent_image, AgentImage, AgentImageSpec};
use cordon::invoke::oneshot::{oneshot, OneShot};
use cordon::labels::Owner;

/// What the benchmark measured (milliseconds).
#[derive(Debug, Clone, serde::Serialize)]
pub struct ClaudeInvokeBench {
    pub files: usize,
    pub runs: usize,
    /// End to end (prepare, run, settle, remove), each run.
    pub fake_cli_ms: Vec<f64>,
    pub real_cli_ms: Vec<f64>,
    pub fake_cli_median_ms: f64,
    pub real_cli_median_ms: f64,
    /// Real over fake, of the medians.
    pub ratio: f64,
    /// The real CLI's container run over its whole invocation (medians).
    pub real_cli_run_share: f64,
    /// The agent image build as found (cold unless an image of its tag existed), then again.
    pub image_first_ms: u128,
    pub image_first_reused: bool,
    pub image_reused_ms: u128,
    pub image_size_bytes: i64,
    /// Finding the built image by its recipe, against writing and hashing its context (what
    /// finding it cost before), interleaved: the medians and their ratio.
    pub image_found_median_ms: f64,
    pub image_rehash_median_ms: f64,
    pub image_found_ratio: f64,
    /// The real CLI over a shared snapshot of the same repository (warm: prepared once), each run
    /// end to end, and cordon's own part of it: everything but the container's run (target 2:
    /// under [`OWN_TARGET_MS`]).
    pub warm_real_cli_ms: Vec<f64>,
    pub warm_real_cli_median_ms: f64,
    pub warm_own_ms: Vec<f64>,
    pub warm_own_median_ms: f64,
    /// The fake vendor's serial share of each own part (the proxy's start waiting for its
    /// address; its removal and the settle after it: what a run against the real vendor, which
    /// starts nothing on the machine, does not pay), and the own part less it, each run.
    pub warm_fixtures_ms: Vec<f64>,
    pub warm_own_less_fixtures_ms: Vec<f64>,
    pub warm_own_less_fixtures_median_ms: f64,
    /// Each step's median over the warm invocation's: setup (volumes, the egress network and
    /// proxy, create, read-back, start, delivery), the container's run, cleanup, and the rest
    /// (capture, the fake vendor's removal and the settle after it, the result's assembly).
    pub warm_shares: Vec<(String, f64)>,
}

/// Target 2 of issue 24: cordon's own part of a warm real-CLI invocation.
pub const OWN_TARGET_MS: f64 = 1000.0;

/// Find the built image by its recipe and hash its context, interleaved `runs` times: the medians.
async fn finding(ctl: &Controller, agent: &AgentImageSpec, runs: usize) -> Result<(f64, f64)> {
    let (mut found, mut rehash) = (Vec::new(), Vec::new());
    for _ in 0..runs.max(1) {
        let t = std::time::Instant::now();
        build_agent_image(ctl.engine(), agent, &|_| {}).await?;
        found.push(t.elapsed().as_secs_f64() * 1000.0);
        let t = std::time::Instant::now();
        cordon::image::agent::context_digest(agent).await?;
        rehash.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    Ok((median(&found), median(&rehash)))
}

/// Run the benchmark: `test_image` runs the fake CLI (and the fake API's fixtures), the agent
/// image is built from `agent`.
pub async fn invoke_claude(
    ctl: &Controller,
    test_image: &str,
    agent: &AgentImageSpec,
    files: usize,
    runs: usize,
) -> Result<ClaudeInvokeBench> {
    let ctl = &ctl.clone().with_helper_image(test_image);
    let first = build_agent_image(ctl.engine(), agent, &|_| {}).await?;
    let again = build_agent_image(ctl.engine(), agent, &|_| {}).await?;
    let (found_median, rehash_median) = finding(ctl, agent, runs).await?;
    // One generated repository: the snapshot's, and each cold run's own storage's source.
    let fixture = Fixture::new(ctl, "claude", files).await?;
    let dir = fixture.tree.path().to_path_buf();
    let measured = async {
        let mut samples: [Vec<f64>; 9] = Default::default();
        for run in 0..runs {
            let [fake, real, real_run, warm, own, setup, container, cleanup, fixtures] =
                &mut samples;
            let mut request = questions_run(&dir, run);
            request.owner = fixture.owner.clone();
            let warm_run = OneShot {
                deadline: Duration::from_secs(300),
                attempt: format!("{}-warm", request.attempt),
                snapshot: Some(fixture.snap.clone()),
                ..request
            };
            let report = real_cli(ctl, test_image, &first, warm_run).await?;
            let t = report.result.timings;
            warm.push(report.timings.total_ms);
            own.push(report.timings.total_ms - t.run_ms);
            setup.push(t.setup_ms);
            container.push(t.run_ms);
            cleanup.push(t.cleanup_ms);
            fixtures.push(t.fixtures_ms);
            let (f, r, share) = cold_pair(ctl, test_image, &first, &dir, run).await?;
            fake.push(f);
            real.push(r);
            real_run.push(share);
        }
        Ok::<_, Error>(samples)
    }
    .await;
    fixture.remove(ctl).await?;
    let [fake, real, real_run, warm, own, setup, container, cleanup, fixtures] = measured?;
    let own_less: Vec<f64> = own.iter().zip(&fixtures).map(|(o, f)| o - f).collect();
    let (fake_median, real_median) = (median(&fake), median(&real));
    let warm_median = median(&warm);
    let (setup, container, cleanup) = (median(&setup), median(&container), median(&cleanup));
    Ok(ClaudeInvokeBench {
        files,
        runs,
        fake_cli_median_ms: fake_median,
        real_cli_median_ms: real_median,
        ratio: real_median / fake_median,
        real_cli_run_share: median(&real_run),
        fake_cli_ms: fake,
        real_cli_ms: real,
        image_first_ms: first.built.build_ms,
        image_first_reused: first.built.reused,
        image_reused_ms: again.built.build_ms,
        image_size_bytes: again.built.size_bytes,
        image_found_median_ms: found_median,
        image_rehash_median_ms: rehash_median,
        image_found_ratio: found_median / rehash_median,
        warm_real_cli_median_ms: warm_median,
        warm_own_median_ms: median(&own),
        warm_real_cli_ms: warm,
        warm_own_ms: own,
        warm_own_less_fixtures_median_ms: median(&own_less),
        warm_own_less_fixtures_ms: own_less,
        warm_fixtures_ms: fixtures,
        warm_shares: vec![
            ("setup".to_owned(), setup / warm_median),
            ("container run".to_owned(), container / warm_median),
            ("cleanup".to_owned(), cleanup / warm_median),
            (
                "rest".to_owned(),
                (warm_median - setup - container - cleanup) / warm_median,
            ),
        ],
    })
}

/// `run` with the real CLI of the agent image, its vendor the fake Messages API: answered.
async fn real_cli(
    ctl: &Controller,
    test_image: &str,
    agent: &AgentImage,
    run: OneShot,
) -> Result<cordon::invoke::oneshot::OneShotReport> {
    let api = fake_api(Vendor::Claude, test_image)?;
    let run = OneShot {
        credential: Some(api.credential),
        allow: api.allow,
        egress: api.egress,
        vendor_options: api.vendor,
        exec: Some(agent.exec.clone()),
        ..run
    };
    answered(oneshot(ctl, &agent.built.id, &run, std::future::pending(), &|_| {}).await?)
}

/// One cold run of each CLI over storage of its own (prepare, run, remove): the fake CLI's total,
/// the real CLI's total, and the real CLI's container run over its total.
async fn cold_pair(
    ctl: &Controller,
    test_image: &str,
    agent: &AgentImage,
    dir: &std::path::Path,
    run: usize,
) -> Result<(f64, f64, f64)> {
    let base = OneShot {
        deadline: Duration::from_secs(300),
        ..questions_run(dir, run)
    };
    let fake = answered(oneshot(ctl, test_image, &base, std::future::pending(), &|_| {}).await?)?;
    let real = real_cli(
        ctl,
        test_image,
        agent,
        OneShot {
            owner: Owner::random("bench"),
            attempt: format!("{}-real", base.attempt),
            ..base
        },
    )
    .await?;
    Ok((
        fake.timings.total_ms,
        real.timings.total_ms,
        real.result.timings.run_ms / real.timings.total_ms,
    ))
}

impl ClaudeInvokeBench {
    /// Plain text.
    pub fn text(&self) -> String {
        format!(
            "invoke: questions phase, {} files, {} interleaved runs each\n\
             fake CLI (test image) median {:.0} ms; real CLI (agent image, fake API) median {:.0} ms; \
             ratio {:.2}\n\
             the real CLI's container run is {:.1} % of its invocation\n\
             agent image: {} bytes; first build {} ms{}, reused {} ms\n\
             finding it by its recipe median {:.0} ms against hashing its context {:.0} ms: ratio {:.3}\n\
             warm (over a shared snapshot): median {:.0} ms, cordon's own part {:.0} ms ({} the \
             target {OWN_TARGET_MS:.0} ms); shares: {}\n\
             the fake vendor's serial share of the own part median {:.0} ms; the own part less it \
             median {:.0} ms (its network is internal: a routed one's removal costs more)\n",
            self.files,
            self.runs,
            self.fake_cli_median_ms,
            self.real_cli_median_ms,
            self.ratio,
            self.real_cli_run_share * 100.0,
            self.image_size_bytes,
            self.image_first_ms,
            if self.image_first_reused { " (reused)" } else { " (cold)" },
            self.image_reused_ms,
            self.image_found_median_ms,
            self.image_rehash_median_ms,
            self.image_found_ratio,
            self.warm_real_cli_median_ms,
            self.warm_own_median_ms,
            if self.warm_own_median_ms < OWN_TARGET_MS {
                "meets"
            } else {
                "MISSES"
            },
            self.warm_shares
                .iter()
                .map(|(n, s)| format!("{n} {:.0} %", s * 100.0))
                .collect::<Vec<_>>()
                .join(", "),
            median(&self.warm_fixtures_ms),
            self.warm_own_less_fixtures_median_ms,
        )
    }
}
