//! `cordon bench snapshot`: questions invocations of the fake vendor CLI over one shared snapshot
//! (warm: the snapshot exists), over storage of their own (cold: prepare, run, remove), and a bare
//! hardened run of the same image with the same create request (the vendor CLI as its entrypoint,
//! only the snapshot's two volumes mounted, created, started, waited for and removed), interleaved
//! run by run.

use std::time::{Duration, Instant};

use cordon_contract::{paths, Phase};

use cordon::controller::Controller;
use cordon::engine::objects;
use cordon::engine::pending::Created;
use cordon::error::{Error, Result};
use cordon::labels::Owner;
use cordon::launch::{Launch, Prepared};
use cordon::storage::TaskStorage;
use cordon::task::{self, StorageHandle};

use crate::bench::{answered, median, profile_in, questions_run, SourceTree};

/// The targets of issue 24 (target 1).
pub const WARM_RATIO_TARGET: f64 = 1.3;
pub const COLD_TARGET_MS: f64 = 1500.0;

#[derive(Debug, Clone, serde::Serialize)]
pub struct SnapshotBench {
    pub files: usize,
    pub runs: usize,
    /// Preparing the shared snapshot, once (staging, seeding, the keeper's digest of the tree).
    pub snapshot_prepare_ms: f64,
    /// End to end over the snapshot: capture, start, run, settle, cleanup.
    pub warm_ms: Vec<f64>,
    /// End to end over storage of its own: prepare, run, remove.
    pub cold_ms: Vec<f64>,
    /// The bare hardened run: create, start, wait, remove.
    pub bare_ms: Vec<f64>,
    pub warm_median_ms: f64,
    pub cold_median_ms: f64,
    pub bare_median_ms: f64,
    /// warm / bare (target: at most [`WARM_RATIO_TARGET`]).
    pub warm_ratio: f64,
    /// Each step's share of the warm median: setup (volumes, create, read-back, start), the
    /// run (the init's preflight with its digest of the tree, and the CLI), cleanup.
    pub warm_shares: Vec<(String, f64)>,
}

impl SnapshotBench {
    pub fn text(&self) -> String {
        let verdict = |ok: bool| if ok { "meets" } else { "MISSES" };
        format!(
            "snapshot of {} files prepared once in {:.0} ms; {} interleaved runs\n\
             warm (over the snapshot): {:.0} ms median; bare hardened run: {:.0} ms; ratio {:.2} \
             ({} the target {WARM_RATIO_TARGET})\n\
             warm shares: {}\n\
             cold (own storage: prepare, run, remove): {:.0} ms median ({} the target \
             {COLD_TARGET_MS:.0} ms)\n",
            self.files,
            self.snapshot_prepare_ms,
            self.runs,
            self.warm_median_ms,
            self.bare_median_ms,
            self.warm_ratio,
            verdict(self.warm_ratio <= WARM_RATIO_TARGET),
            self.warm_shares
                .iter()
                .map(|(n, s)| format!("{n} {:.0} %", s * 100.0))
                .collect::<Vec<_>>()
                .join(", "),
            self.cold_median_ms,
            verdict(self.cold_median_ms <= COLD_TARGET_MS),
        )
    }
}

/// A generated repository seeded as a shared snapshot of an owner of its own.
pub(crate) struct Fixture {
    pub(crate) tree: SourceTree,
    pub(crate) owner: Owner,
    pub(crate) snap: StorageHandle,
    /// The snapshot's prepare (stage, seed, the keeper's digest), the generation excluded.
    pub(crate) prepare_ms: f64,
}

impl Fixture {
    pub(crate) async fn new(ctl: &Controller, name: &str, files: usize) -> Result<Fixture> {
        let tree = SourceTree::generate(name, files).await?;
        let owner = Owner::random(&format!("bench-{name}"));
        let base = questions_run(tree.path(), 0);
        let prepare = task::PrepareRequest {
            repo: tree.path().to_path_buf(),
            head: "HEAD".to_owned(),
            owner: owner.clone(),
            attempt: format!("bench-{name}"),
            allocation: None,
            work: base.work,
            deadline: Duration::from_secs(600),
            uids: base.uids,
            shared: true,
        };
        let t = Instant::now();
        let snap = task::prepare(ctl, &prepare).await?;
        Ok(Fixture {
            tree,
            owner,
            snap,
            prepare_ms: ms(t),
        })
    }

    /// Remove the snapshot once nothing mounts it (the tree goes when dropped).
    pub(crate) async fn remove(self, ctl: &Controller) -> Result<()> {
        task::remove_when_unused(ctl, &self.snap, Duration::from_secs(60)).await
    }
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1000.0
}

/// Run the snapshot benchmark on a generated repository of `files` files.
pub async fn snapshot(
    ctl: &Controller,
    image_id: &str,
    files: usize,
    runs: usize,
) -> Result<SnapshotBench> {
    let ctl = &ctl.clone().with_helper_image(image_id);
    let fixture = Fixture::new(ctl, "snapshot", files).await?;
    let (dir, owner, snap) = (fixture.tree.path(), &fixture.owner, &fixture.snap);
    let result = async {
        let mut samples: [Vec<f64>; 6] = Default::default();
        for run in 0..runs {
            let t = Instant::now();
            let mut request = questions_run(dir, run);
            request.owner = owner.clone();
            request.snapshot = Some(snap.clone());
            let report = answered(
                cordon::invoke::oneshot::oneshot(
                    ctl,
                    image_id,
                    &request,
                    std::future::pending(),
                    &|_| {},
                )
                .await?,
            )?;
            samples[0].push(ms(t));
            let r = report.result.timings;
            samples[3].push(r.setup_ms);
            samples[4].push(r.run_ms);
            samples[5].push(r.cleanup_ms);
            let t = Instant::now();
            answered(
                cordon::invoke::oneshot::oneshot(
                    ctl,
                    image_id,
                    &questions_run(dir, run),
                    std::future::pending(),
                    &|_| {},
                )
                .await?,
            )?;
            samples[1].push(ms(t));
            samples[2].push(bare_once(ctl, owner, image_id, snap).await?);
        }
        Ok::<_, Error>(samples)
    }
    .await;
    let snapshot_prepare_ms = fixture.prepare_ms;
    fixture.remove(ctl).await?;
    let s = result?;
    let warm = median(&s[0]);
    Ok(SnapshotBench {
        files,
        runs,
        snapshot_prepare_ms,
        warm_median_ms: warm,
        cold_median_ms: median(&s[1]),
        bare_median_ms: median(&s[2]),
        warm_ratio: warm / median(&s[2]),
        warm_shares: ["setup", "run", "cleanup"]
            .iter()
            .enumerate()
            .map(|(i, n)| ((*n).to_owned(), median(&s[i + 3]) / warm))
            .collect(),
        warm_ms: s[0].clone(),
        cold_ms: s[1].clone(),
        bare_ms: s[2].clone(),
    })
}

/// One bare hardened run over the snapshot: the agent's create request (same image, user,
/// capabilities, seccomp, limits, read-only root, scratch tmpfs, no network), with the vendor CLI
/// as its entrypoint and only the snapshot's volumes mounted; created, started, waited for and
/// removed, all timed.
async fn bare_once(
    ctl: &Controller,
    owner: &Owner,
    image_id: &str,
    snap: &StorageHandle,
) -> Result<f64> {
    let engine = ctl.engine();
    let mut storage: TaskStorage = snap.storage()?;
    // The bare run is the storage's own uid: nothing checks it.
    storage.snapshot = None;
    let profile = profile_in(Phase::Questions, owner, image_id, &storage)?;
    let mut create = Prepared::new(engine, &profile)?.plan.create;
    create.entrypoint = Some(vec![paths::CLAUDE_CLI.to_owned()]);
    create.cmd = Some(
        [
            "-p",
            "--output-format",
            "json",
            "what does this repository do?",
        ]
        .map(str::to_owned)
        .to_vec(),
    );
    create.user = Some(format!("{0}:{0}", snap.uid));
    if let Some(host) = create.host_config.as_mut() {
        if let Some(mounts) = host.mounts.as_mut() {
            mounts.retain(|m| {
                matches!(
                    m.target.as_deref(),
                    Some(paths::WORK) | Some(paths::METADATA)
                )
            });
        }
    }
    let mut created = Created::default();
    let t = Instant::now();
    let run = async {
        let id = objects::create_container(
            engine,
            &cordon::labels::tool_name(),
            create,
            &created.shared(),
        )
        .await?;
        let mut launch = Launch::adopt(id);
        launch.start(engine).await?;
        let code = launch.wait(engine, Duration::from_secs(60)).await?;
        if code != 0 {
            let output = launch.output(engine).await?;
            return Err(Error::Internal(format!(
                "bare run exited {code}: {}",
                output.stderr.chars().take(300).collect::<String>()
            )));
        }
        Ok(())
    }
    .await;
    let removed = created.remove_all(engine, Duration::from_secs(30)).await;
    let elapsed = ms(t);
    run?;
    removed?;
    Ok(elapsed)
}

/// The density target of issue 24 (target 6).
pub const DENSITY_RATIO_TARGET: f64 = 2.0;

/// `cordon bench density`: `invocations` questions invocations started at once over one shared
/// snapshot, until the last settles (each must answer, attested), against as many bare hardened
/// runs started at once, the two rounds alternating which goes first.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DensityBench {
    pub invocations: usize,
    pub runs: usize,
    pub files: usize,
    /// Wall time of each round: all started, the last settled (ms).
    pub cordon_ms: Vec<f64>,
    pub bare_ms: Vec<f64>,
    pub cordon_median_ms: f64,
    pub bare_median_ms: f64,
    /// cordon / bare (target: at most [`DENSITY_RATIO_TARGET`]).
    pub ratio: f64,
}

impl DensityBench {
    pub fn text(&self) -> String {
        format!(
            "{} concurrent questions invocations over one snapshot of {} files, {} rounds: \
             {:.0} ms median; {} concurrent bare hardened runs: {:.0} ms; ratio {:.2} ({} the \
             target {DENSITY_RATIO_TARGET})\n",
            self.invocations,
            self.files,
            self.runs,
            self.cordon_median_ms,
            self.invocations,
            self.bare_median_ms,
            self.ratio,
            if self.ratio <= DENSITY_RATIO_TARGET {
                "meets"
            } else {
                "MISSES"
            },
        )
    }
}

/// Every invocation of one round answered and attested, or why not.
fn attested(report: cordon::invoke::oneshot::OneShotReport) -> Result<()> {
    let report = answered(report)?;
    if report.result.attestation.is_none() {
        return Err(Error::Internal(
            "a density run answered without an attestation".into(),
        ));
    }
    Ok(())
}

/// One round of the density benchmark, either arm. Every run of a round goes to its end (and its
/// own cleanup) before a failure is reported: none is dropped midway.
struct Round<'a> {
    ctl: &'a Controller,
    image_id: &'a str,
    owner: &'a Owner,
    snap: &'a StorageHandle,
    invocations: usize,
}

impl Round<'_> {
    /// All invocations started at once over the snapshot; the wall time until the last settled.
    async fn cordon(&self, dir: &std::path::Path, run: usize) -> Result<f64> {
        let t = Instant::now();
        let all = (0..self.invocations).map(|i| {
            let mut one = questions_run(dir, run * self.invocations + i);
            one.owner = self.owner.clone();
            one.snapshot = Some(self.snap.clone());
            async move {
                attested(
                    cordon::invoke::oneshot::oneshot(
                        self.ctl,
                        self.image_id,
                        &one,
                        std::future::pending(),
                        &|_| {},
                    )
                    .await?,
                )
            }
        });
        let ended = futures_util::future::join_all(all).await;
        let wall = ms(t);
        ended.into_iter().collect::<Result<Vec<()>>>()?;
        Ok(wall)
    }

    /// As many bare hardened runs at once; the wall time until the last was removed.
    async fn bare(&self) -> Result<f64> {
        let t = Instant::now();
        let all = (0..self.invocations)
            .map(|_| bare_once(self.ctl, self.owner, self.image_id, self.snap));
        let ended = futures_util::future::join_all(all).await;
        let wall = ms(t);
        ended.into_iter().collect::<Result<Vec<f64>>>()?;
        Ok(wall)
    }
}

/// Run the density benchmark.
pub async fn density(
    ctl: &Controller,
    image_id: &str,
    invocations: usize,
    files: usize,
    runs: usize,
) -> Result<DensityBench> {
    let ctl = &ctl.clone().with_helper_image(image_id);
    let fixture = Fixture::new(ctl, "density", files).await?;
    let result = async {
        let (mut cordon, mut bare) = (Vec::new(), Vec::new());
        for run in 0..runs {
            let first = run % 2 == 0;
            let mine = Round {
                ctl,
                image_id,
                owner: &fixture.owner,
                snap: &fixture.snap,
                invocations,
            };
            let dir = fixture.tree.path();
            if first {
                cordon.push(mine.cordon(dir, run).await?);
                bare.push(mine.bare().await?);
            } else {
                bare.push(mine.bare().await?);
                cordon.push(mine.cordon(dir, run).await?);
            }
        }
        Ok::<_, Error>((cordon, bare))
    }
    .await;
    fixture.remove(ctl).await?;
    let (cordon, bare) = result?;
    Ok(DensityBench {
        invocations,
        runs,
        files,
        cordon_median_ms: median(&cordon),
        bare_median_ms: median(&bare),
        ratio: median(&cordon) / median(&bare),
        cordon_ms: cordon,
        bare_ms: bare,
    })
}
