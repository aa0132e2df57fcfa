//! `cordon bench invoke --vendor claude --fake-vendor`: the end-to-end questions invocation with
//! the real Claude Code CLI (the agent image, the fake Messages API behind the egress proxy)
//! against the same invocation with the fake vendor CLI (the test image, no network), interleaved
//! run by run on one generated repository; the real CLI's share of its own invocation; the agent
//! image's build time (as found, then reused) and size.

use std::time::Duration;

use cordon_contract::Vendor;

use crate::bench::{answered, generate_repository, median, questions_run};
use crate::fake_api::fake_api;
use cordon::controller::Controller;
use cordon::error::{Error, Result};
use cordon::image::agent::{build_agent_image, AgentImageSpec};
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
}

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
    let first = build_agent_image(ctl.engine(), agent, &|_| {}).await?;
    let again = build_agent_image(ctl.engine(), agent, &|_| {}).await?;
    let (found_median, rehash_median) = finding(ctl, agent, runs).await?;
    let dir = std::env::temp_dir().join(format!(
        "cordon-bench-claude-{}",
        uuid::Uuid::new_v4().simple()
    ));
    let repo = dir.clone();
    let generated =
        tokio::task::spawn_blocking(move || generate_repository(&repo, files, files as u64 * 4096))
            .await
            .map_err(|e| Error::Internal(format!("generator: {e}")));
    let measured = async {
        generated??;
        let (mut fake, mut real, mut real_run) = (Vec::new(), Vec::new(), Vec::new());
        for run in 0..runs {
            let base = OneShot {
                deadline: Duration::from_secs(300),
                ..questions_run(&dir, run)
            };
            let report =
                answered(oneshot(ctl, test_image, &base, std::future::pending(), &|_| {}).await?)?;
            fake.push(report.timings.total_ms);
            let api = fake_api(Vendor::Claude, test_image)?;
            let claude = OneShot {
                owner: Owner::random("bench"),
                attempt: format!("{}-real", base.attempt),
                credential: Some(api.credential),
                allow: api.allow,
                egress: api.egress,
                vendor_options: api.vendor,
                exec: Some(first.exec.clone()),
                ..base
            };
            let report = answered(
                oneshot(
                    ctl,
                    &first.built.id,
                    &claude,
                    std::future::pending(),
                    &|_| {},
                )
                .await?,
            )?;
            real.push(report.timings.total_ms);
            real_run.push(report.result.timings.run_ms / report.timings.total_ms);
        }
        Ok::<_, Error>((fake, real, real_run))
    }
    .await;
    let _ = std::fs::remove_dir_all(&dir);
    let (fake, real, real_run) = measured?;
    let (fake_median, real_median) = (median(&fake), median(&real));
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
    })
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
             finding it by its recipe median {:.0} ms against hashing its context {:.0} ms: ratio {:.3}\n",
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
            self.image_found_ratio
        )
    }
}
