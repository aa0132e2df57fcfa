//! `cordon bench launch`: cold launch of the C0 container through cordon (create, validate,
//! start, init preflight, workload exit) against a bare create + start + wait of the same image
//! with the same create request, interleaved, alternating which goes first.

use std::time::{Duration, Instant};

use cordon_contract::{Phase, Vendor};

use cordon::controller::Controller;
use cordon::engine::pending::Created;

use cordon::engine::objects;
use cordon::error::{Error, Result};
use cordon::labels::{Allocation, Owner};
use cordon::launch::volumes::InvocationVolumes;
use cordon::launch::{self, InitVerdict, Launch, Prepared};
use cordon::profile::{Limits, Profile, ProfileSpec, DEFAULT_LANDLOCK_ABI};
use cordon::storage::{self, TaskStorage};

/// The seeding targets of issue 24 (target 3): at most this times a plain upload of the same
/// tree, with a peak RSS under [`SEED_RSS_TARGET_MIB`].
pub const SEED_RATIO_TARGET: f64 = 1.1;
pub const SEED_RSS_TARGET_MIB: f64 = 64.0;

/// Medians and ratios of one benchmark.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BenchReport {
    pub runs: usize,
    /// cordon: create + read-back validation + start + wait (ms per run).
    pub cordon_ms: Vec<f64>,
    /// bare: create + start + wait of the same request (ms per run).
    pub bare_ms: Vec<f64>,
    pub cordon_median_ms: f64,
    pub bare_median_ms: f64,
    /// cordon / bare (target: at most 1.15).
    pub ratio: f64,
    /// The read-back validation alone (inspect of the container and its five volumes).
    pub validate_median_ms: f64,
    /// Writing the invocation volumes (control with the policy, input, egress) through the loader;
    /// done for both arms, outside the timed part.
    pub prepare_median_ms: f64,
    /// cordon-init's own preflight, measured inside (target: under 5 ms).
    pub preflight_us: Vec<u64>,
    pub preflight_median_us: f64,
}

/// Median of a sample (mean of the middle two for an even count).
pub fn median(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn profile(owner: &Owner, image_id: &str, storage: &TaskStorage) -> Result<Profile> {
    profile_in(Phase::Planning, owner, image_id, storage)
}

/// The fake CLI's `--version` in `phase` over `storage`, with the default limits.
pub(crate) fn profile_in(
    phase: Phase,
    owner: &Owner,
    image_id: &str,
    storage: &TaskStorage,
) -> Result<Profile> {
    let allocation = Allocation::new(owner, "bench", storage.allocation.uid)?;
    let cli = Vendor::Claude.cli_path().to_owned();
    Profile::new(ProfileSpec {
        phase,
        vendor: Vendor::Claude,
        image_id: image_id.to_owned(),
        storage: storage.mounts_for(&allocation),
        allocation,
        limits: Limits::default(),
        command: vec![cli.clone(), "--version".to_owned()],
        exec: vec![cli],
        env: vec![],
        gitlinks: vec![],
        pins: vec![],
        pin_mounts: false,
        input_files: vec![],
        landlock_abi: DEFAULT_LANDLOCK_ABI,
        egress: None,
    })
}

/// What the init said, in words for an error message.
fn verdict_text(verdict: &InitVerdict) -> String {
    match verdict {
        InitVerdict::Attested { digest_matches, .. } => {
            format!("attested (policy digest matches: {digest_matches})")
        }
        InitVerdict::Refused {
            check,
            expected,
            observed,
        } => format!("refused {check}: expected {expected}, observed {observed}"),
        InitVerdict::Failed { reason } => format!("the init failed: {reason}"),
        InitVerdict::Missing { first_line } => format!("no init line first: {first_line}"),
    }
}

/// One cordon launch: returns (timed ms, validate ms, prepare ms, preflight us).
async fn cordon_once(
    ctl: &Controller,
    owner: &Owner,
    image_id: &str,
    storage: &TaskStorage,
) -> Result<(f64, f64, f64, u64)> {
    let engine = ctl.engine();
    let profile = profile(owner, image_id, storage)?;
    let prepared = Prepared::new(engine, &profile)?;
    let mut launch = launch::create(ctl, &profile, prepared).await?;
    let run = async {
        if !launch.refusals.is_empty() {
            return Err(Error::Refused(launch.refusals.clone()));
        }
        launch.start(engine).await?;
        let code = launch.wait(engine, Duration::from_secs(60)).await?;
        let output = launch.output(engine).await?;
        match launch.verdict(&output) {
            InitVerdict::Attested {
                preflight_us,
                digest_matches: true,
                ..
            } if code == 0 => Ok(preflight_us),
            other => Err(Error::Internal(format!(
                "bench launch did not attest and exit 0: exit {code}, {}",
                verdict_text(&other)
            ))),
        }
    }
    .await;
    let t = launch.timings;
    launch.finish(engine).await?;
    let preflight = run?;
    Ok((
        t.create_ms + t.validate_ms + t.start_ms + t.wait_ms,
        t.validate_ms,
        t.volumes_ms,
        preflight,
    ))
}

/// One bare launch of the same create request against its own freshly written volumes.
async fn bare_once(
    ctl: &Controller,
    owner: &Owner,
    image_id: &str,
    storage: &TaskStorage,
) -> Result<f64> {
    let engine = ctl.engine();
    let profile = profile(owner, image_id, storage)?;
    let prepared = Prepared::new(engine, &profile)?;
    let mut created = Created::default();
    let run = async {
        // As cordon does it, without its checks: volumes and the loader made untimed; timed, the
        // container created, then started while the loader fills the control dir.
        let loader = {
            let record = cordon::engine::pending::Shared::new(&mut created);
            let (_, specs) =
                InvocationVolumes::create_volumes(engine, prepared.volumes, &record).await?;
            InvocationVolumes::create_loader(
                engine,
                profile.allocation(),
                image_id,
                &specs,
                &record,
            )
            .await?
        };
        let uploads = cordon::launch::volumes::Uploads::new(&prepared.plan.policy.to_bytes(), &[])?;
        let t = Instant::now();
        let id = objects::create_container(
            engine,
            &prepared.plan.name,
            prepared.plan.create,
            &created.shared(),
        )
        .await?;
        let mut launch = Launch::adopt(id);
        let (started, delivered) = tokio::join!(
            launch.start(engine),
            cordon::launch::volumes::deliver(
                engine,
                &loader,
                &uploads,
                cordon::launch::volumes::Part::Everything
            )
        );
        started?;
        delivered?;
        let code = launch.wait(engine, Duration::from_secs(60)).await?;
        let elapsed = t.elapsed().as_secs_f64() * 1000.0;
        if code != 0 {
            return Err(Error::Internal(format!("bare launch exited {code}")));
        }
        Ok(elapsed)
    }
    .await;
    created.remove_all(engine, Duration::from_secs(30)).await?;
    run
}

/// Run `runs` pairs.
pub async fn launch(ctl: &Controller, image_id: &str, runs: usize) -> Result<BenchReport> {
    let engine = ctl.engine();
    let owner = Owner::random("bench");
    let allocation = cordon::storage::new_allocation(engine, &owner, "bench").await?;
    let storage = TaskStorage::create(
        engine,
        &allocation,
        image_id,
        storage::DEFAULT_WORK,
        storage::DEFAULT_METADATA,
    )
    .await?;
    let result = async {
        // One unmeasured pair warms the image and the engine's caches.
        cordon_once(ctl, &owner, image_id, &storage).await?;
        bare_once(ctl, &owner, image_id, &storage).await?;
        let (mut cordon, mut bare, mut validate, mut prepare, mut preflight) =
            (vec![], vec![], vec![], vec![], vec![]);
        for i in 0..runs {
            let mut pair = |c: (f64, f64, f64, u64)| {
                cordon.push(c.0);
                validate.push(c.1);
                prepare.push(c.2);
                preflight.push(c.3);
            };
            if i % 2 == 0 {
                pair(cordon_once(ctl, &owner, image_id, &storage).await?);
                bare.push(bare_once(ctl, &owner, image_id, &storage).await?);
            } else {
                bare.push(bare_once(ctl, &owner, image_id, &storage).await?);
                pair(cordon_once(ctl, &owner, image_id, &storage).await?);
            }
        }
        let preflight_f: Vec<f64> = preflight.iter().map(|p| *p as f64).collect();
        let (cm, bm) = (median(&cordon), median(&bare));
        Ok::<_, Error>(BenchReport {
            runs,
            cordon_median_ms: cm,
            bare_median_ms: bm,
            ratio: cm / bm,
            validate_median_ms: median(&validate),
            prepare_median_ms: median(&prepare),
            preflight_median_us: median(&preflight_f),
            cordon_ms: cordon,
            bare_ms: bare,
            preflight_us: preflight,
        })
    }
    .await;
    storage.remove(engine).await?;
    result
}

impl BenchReport {
    /// Plain text.
    pub fn text(&self) -> String {
        format!(
            "launch, {} interleaved pairs (planning C0, fake claude --version)\n\
             cordon (create+validate+start+wait) median {:.1} ms\n\
             bare   (create+start+wait)          median {:.1} ms\n\
             ratio cordon/bare                   {:.3} (target <= 1.15)\n\
             read-back validation                median {:.1} ms\n\
             invocation volumes (both arms, untimed) median {:.1} ms\n\
             cordon-init preflight (inside)      median {:.0} us (target < 5000)\n",
            self.runs,
            self.cordon_median_ms,
            self.bare_median_ms,
            self.ratio,
            self.validate_median_ms,
            self.prepare_median_ms,
            self.preflight_median_us
        )
    }
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn medians() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
    }
}

/// The full gate's wall time and each case's time.
#[derive(Debug, Clone, serde::Serialize)]
pub struct GateBench {
    pub wall_ms: u64,
    pub parallel: usize,
    pub cells: usize,
    pub passed: usize,
    pub failed: usize,
    /// (case, layer, ms), slowest first.
    pub cases: Vec<(String, String, u64)>,
}

/// Run the whole gate once and time it (target: under 3 minutes on 2 cores).
pub async fn gate(
    ctl: &Controller,
    image_id: &str,
    agent: Option<crate::gate::AgentRef>,
    parallel: usize,
) -> Result<GateBench> {
    let options = crate::gate::GateOptions {
        parallel,
        filter: None,
        agent,
    };
    let started = Instant::now();
    let report = crate::gate::run(ctl, image_id, &options).await?;
    let wall_ms = started.elapsed().as_millis() as u64;
    let mut cases: Vec<(String, String, u64)> = report
        .cases
        .iter()
        .map(|c| {
            let layer = serde_json::to_value(c.layer)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default();
            (c.case.clone(), layer, c.ms)
        })
        .collect();
    cases.sort_by_key(|c| std::cmp::Reverse(c.2));
    Ok(GateBench {
        wall_ms,
        parallel,
        cells: report.cases.len(),
        passed: report.passed,
        failed: report.failed,
        cases,
    })
}

impl GateBench {
    /// Plain text: totals, then the slowest cells.
    pub fn text(&self) -> String {
        let mut out = format!(
            "gate: {} cells ({} passed, {} failed), {} at once, wall {:.1} s (target < 180 s)\nslowest cells:\n",
            self.cells,
            self.passed,
            self.failed,
            self.parallel,
            self.wall_ms as f64 / 1000.0
        );
        for (case, layer, ms) in self.cases.iter().take(10) {
            out.push_str(&format!("  {ms:>6} ms  {layer:<9} {case}\n"));
        }
        let total: u64 = self.cases.iter().map(|c| c.2).sum();
        out.push_str(&format!(
            "sum of cell times {:.1} s (validator and init cells share one container)\n",
            total as f64 / 1000.0
        ));
        out
    }
}

/// Seeding against a plain upload of the same tree.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SeedBench {
    pub files: usize,
    pub tree_bytes: u64,
    /// Whether the repository's objects were in one pack (as a clone brings them) or loose.
    pub packed: bool,
    pub runs: usize,
    /// The checkout streamed from the staged objects (cordon's seeder), ms per run.
    pub seed_ms: Vec<f64>,
    /// The same files as a plain tar from disk, ms per run.
    pub plain_ms: Vec<f64>,
    pub seed_median_ms: f64,
    pub plain_median_ms: f64,
    /// seed / plain (target: at most [`SEED_RATIO_TARGET`]).
    pub ratio: f64,
    /// Staging (copy of the object store, head, connectivity, tree listing, link checks), ms.
    pub stage_median_ms: f64,
    /// The metadata upload, ms.
    pub metadata_median_ms: f64,
    /// Peak resident memory of this process while it seeded (KiB; target: under 64 MiB).
    pub seed_peak_rss_kib: u64,
    pub plain_peak_rss_kib: u64,
}

/// Reset the process's peak RSS (write 5 to clear_refs), then read it after `f`.
async fn peak_rss<T>(f: impl std::future::Future<Output = T>) -> (T, u64) {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let value = f.await;
    let hwm = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("VmHWM:")
                    .map(|v| v.trim().trim_end_matches(" kB").trim().parse().unwrap_or(0))
            })
        })
        .unwrap_or(0);
    (value, hwm)
}

/// Write a repository of `files` files totalling about `bytes`, committed.
pub(crate) fn generate_repository(dir: &std::path::Path, files: usize, bytes: u64) -> Result<u64> {
    let each = (bytes / files.max(1) as u64) as usize;
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut total = 0;
    let mut content = vec![0u8; each];
    for i in 0..files {
        for chunk in content.chunks_mut(8) {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let b = state.to_le_bytes();
            chunk.copy_from_slice(&b[..chunk.len()]);
        }
        let path = dir.join(format!("d{:03}/f{i:05}.bin", i % 100));
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| Error::io("generating the repository", e))?;
        }
        std::fs::write(&path, &content).map_err(|e| Error::io("generating the repository", e))?;
        total += each as u64;
    }
    cordon::repo::git::own_repository(dir, &["init", "--quiet"])?;
    cordon::repo::git::own_repository(dir, &["add", "-A"])?;
    cordon::repo::git::own_repository(dir, &["commit", "--quiet", "-m", "bench"])?;
    Ok(total)
}

/// Seed a generated repository `runs` times, interleaved with a plain upload of the same tree.
pub async fn seed(
    ctl: &Controller,
    image_id: &str,
    (files, bytes): (usize, u64),
    packed: bool,
    runs: usize,
) -> Result<SeedBench> {
    let engine = ctl.engine();
    let owner = Owner::random("bench");
    let dir = std::env::temp_dir().join(format!("cordon-bench-repo-{}", owner.as_str()));
    let repo = dir.clone();
    let tree_bytes = tokio::task::spawn_blocking(move || {
        let bytes = generate_repository(&repo, files, bytes)?;
        if packed {
            cordon::repo::git::own_repository(&repo, &["repack", "-a", "-d", "-q"])?;
        }
        Ok(bytes)
    })
    .await
    .map_err(|e| Error::Internal(format!("generator: {e}")))?;
    let tree_bytes = match tree_bytes {
        Ok(b) => b,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(e);
        }
    };
    let area = cordon::profile::Area {
        bytes: (tree_bytes * 2).div_ceil(4096) * 4096,
        inodes: files as u64 * 2 + 1024,
    };
    let mut report = SeedBench {
        files,
        tree_bytes,
        packed,
        runs,
        seed_ms: vec![],
        plain_ms: vec![],
        seed_median_ms: 0.0,
        plain_median_ms: 0.0,
        ratio: 0.0,
        stage_median_ms: 0.0,
        metadata_median_ms: 0.0,
        seed_peak_rss_kib: 0,
        plain_peak_rss_kib: 0,
    };
    let (mut stage, mut metadata) = (vec![], vec![]);
    let result = async {
        for run in 0..runs {
            let allocation = cordon::storage::new_allocation(engine, &owner, "bench").await?;
            let deadline = Instant::now() + Duration::from_secs(900);
            let t = Instant::now();
            let staged =
                cordon::repo::clone::stage(&dir, "HEAD", owner.as_str(), &allocation.id, deadline)
                    .await?;
            stage.push(t.elapsed().as_secs_f64() * 1000.0);
            let metadata_area = cordon::profile::Area {
                bytes: area.bytes,
                inodes: area.inodes,
            };
            let owner = &owner;
            let one = |plain: bool| {
                let (allocation, staged, dir) = (&allocation, &staged, &dir);
                async move {
                    let a = if plain {
                        cordon::storage::new_allocation(engine, owner, "bench-plain").await?
                    } else {
                        allocation.clone()
                    };
                    let s = TaskStorage::create(engine, &a, image_id, area, metadata_area).await?;
                    let t = Instant::now();
                    let (uploaded, rss) = if plain {
                        peak_rss(cordon::task::seed::upload_plain_dir(engine, &s, dir)).await
                    } else {
                        peak_rss(cordon::task::seed::upload_work(engine, &s, staged)).await
                    };
                    let ms = t.elapsed().as_secs_f64() * 1000.0;
                    let t = Instant::now();
                    let meta = if plain {
                        Ok(())
                    } else {
                        cordon::task::seed::upload_metadata(engine, &s, staged).await
                    };
                    let meta_ms = t.elapsed().as_secs_f64() * 1000.0;
                    s.remove(engine).await?;
                    uploaded?;
                    meta?;
                    Ok::<_, Error>((ms, rss, meta_ms))
                }
            };
            let order = if run % 2 == 0 {
                [false, true]
            } else {
                [true, false]
            };
            for plain in order {
                let (ms, rss, meta_ms) = one(plain).await?;
                if plain {
                    report.plain_ms.push(ms);
                    report.plain_peak_rss_kib = report.plain_peak_rss_kib.max(rss);
                } else {
                    report.seed_ms.push(ms);
                    report.seed_peak_rss_kib = report.seed_peak_rss_kib.max(rss);
                    metadata.push(meta_ms);
                }
            }
        }
        Ok::<_, Error>(())
    }
    .await;
    let _ = std::fs::remove_dir_all(&dir);
    result?;
    report.seed_median_ms = median(&report.seed_ms);
    report.plain_median_ms = median(&report.plain_ms);
    report.ratio = report.seed_median_ms / report.plain_median_ms;
    report.stage_median_ms = median(&stage);
    report.metadata_median_ms = median(&metadata);
    Ok(report)
}

impl SeedBench {
    /// Plain text.
    pub fn text(&self) -> String {
        format!(
            "seed: {} files, {:.1} MiB, objects {}, {} interleaved runs\n\
             seeder (checkout from the staged objects) median {:.0} ms\n\
             plain tar upload of the same files      median {:.0} ms\n\
             ratio seeder/plain                      {:.3} (target <= {SEED_RATIO_TARGET})\n\
             staging median {:.0} ms, metadata upload median {:.0} ms\n\
             peak RSS while seeding {:.1} MiB (plain {:.1} MiB; target < {SEED_RSS_TARGET_MIB} MiB)\n",
            self.files,
            self.tree_bytes as f64 / 1_048_576.0,
            if self.packed { "in one pack" } else { "loose" },
            self.runs,
            self.seed_median_ms,
            self.plain_median_ms,
            self.ratio,
            self.stage_median_ms,
            self.metadata_median_ms,
            self.seed_peak_rss_kib as f64 / 1024.0,
            self.plain_peak_rss_kib as f64 / 1024.0
        )
    }
}

/// `cordon bench invoke`: questions-phase invocations of the fake vendor CLI on a generated
/// repository, end to end (prepare storage, run, settle, remove storage), with the launch ratio
/// against a bare container measured beside it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct InvokeBench {
    pub files: usize,
    pub runs: usize,
    pub total_ms: Vec<f64>,
    pub total_median_ms: f64,
    /// Medians of each step (ms): prepare storage, invocation setup (volumes, create, read-back,
    /// start), the run, the invocation's cleanup, storage removal.
    pub prepare_median_ms: f64,
    pub setup_median_ms: f64,
    pub run_median_ms: f64,
    pub cleanup_median_ms: f64,
    pub remove_median_ms: f64,
    /// Each step's share of the median total.
    pub shares: Vec<(String, f64)>,
    /// From `bench launch` run beside it: cordon's launch over a bare create+start+wait.
    pub launch_ratio: f64,
    pub launch_runs: usize,
}

/// A generated repository of `files` files of about 4 KiB (a mid-sized source tree) in a
/// directory of its own, its objects in one pack as a clone brings them (`bench seed --loose`
/// measures what loose objects cost), removed when dropped.
pub(crate) struct SourceTree(std::path::PathBuf);

impl SourceTree {
    pub(crate) async fn generate(name: &str, files: usize) -> Result<SourceTree> {
        let tree = SourceTree(std::env::temp_dir().join(format!(
            "cordon-bench-{name}-{}",
            uuid::Uuid::new_v4().simple()
        )));
        let dir = tree.0.clone();
        tokio::task::spawn_blocking(move || {
            generate_repository(&dir, files, files as u64 * 4096)?;
            cordon::repo::git::own_repository(&dir, &["repack", "-a", "-d", "-q"])?;
            Ok::<_, Error>(())
        })
        .await
        .map_err(|e| Error::Internal(format!("generator: {e}")))??;
        Ok(tree)
    }

    pub(crate) fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for SourceTree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Run `run` of an invocation benchmark: a questions-phase invocation of the fake vendor CLI on
/// the repository at `dir`, with its own owner and attempt, no network.
pub(crate) fn questions_run(dir: &std::path::Path, run: usize) -> cordon::invoke::oneshot::OneShot {
    cordon::invoke::oneshot::OneShot {
        phase: Phase::Questions,
        vendor: Vendor::Claude,
        repo: dir.to_path_buf(),
        head: "HEAD".to_owned(),
        prompt: "what does this repository do?".to_owned(),
        schema: None,
        owner: Owner::random("bench"),
        attempt: format!(
            "bench-{run}-{}",
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        ),
        referenced_code_hash: None,
        deadline: Duration::from_secs(120),
        credential: None,
        work: storage::DEFAULT_WORK,
        uids: cordon::uids::UidRange::default(),
        allow: Vec::new(),
        egress: Default::default(),
        vendor_options: Default::default(),
        exec: None,
        operations: Vec::new(),
        declared_paths: Vec::new(),
        commit: None,
        commands: Vec::new(),
        snapshot: None,
    }
}

/// A benchmark run that answered with its storage removed, or why not.
pub(crate) fn answered(
    report: cordon::invoke::oneshot::OneShotReport,
) -> Result<cordon::invoke::oneshot::OneShotReport> {
    if report.result.answer.is_some() && report.storage_left.is_none() {
        return Ok(report);
    }
    let failure = report
        .result
        .failure
        .as_ref()
        .map_or("no failure".to_owned(), |f| {
            format!("{}: {}", f.id, f.message)
        });
    Err(Error::Internal(format!(
        "a benchmark run did not answer cleanly: {failure}; storage left: {}",
        report.storage_left.as_deref().unwrap_or("none")
    )))
}

/// Run the invocation benchmark.
pub async fn invoke(
    ctl: &Controller,
    image_id: &str,
    files: usize,
    runs: usize,
    launch_runs: usize,
) -> Result<InvokeBench> {
    let tree = SourceTree::generate("invoke", files).await?;
    let dir = tree.path();
    let result = async {
        let mut steps: [Vec<f64>; 6] = Default::default();
        for run in 0..runs {
            let one = questions_run(dir, run);
            let report = answered(
                cordon::invoke::oneshot::oneshot(
                    ctl,
                    image_id,
                    &one,
                    std::future::pending(),
                    &|_| {},
                )
                .await?,
            )?;
            let t = report.timings;
            let r = report.result.timings;
            for (i, v) in [
                t.total_ms,
                t.prepare_ms,
                r.setup_ms,
                r.run_ms,
                r.cleanup_ms,
                t.remove_ms,
            ]
            .into_iter()
            .enumerate()
            {
                steps[i].push(v);
            }
        }
        Ok::<_, Error>(steps)
    }
    .await;
    drop(tree);
    let steps = result?;
    let launch = launch(ctl, image_id, launch_runs).await?;
    let total = median(&steps[0]);
    let names = ["prepare", "setup", "run", "cleanup", "remove"];
    let shares = names
        .iter()
        .enumerate()
        .map(|(i, n)| ((*n).to_owned(), median(&steps[i + 1]) / total))
        .collect();
    Ok(InvokeBench {
        files,
        runs,
        total_median_ms: total,
        prepare_median_ms: median(&steps[1]),
        setup_median_ms: median(&steps[2]),
        run_median_ms: median(&steps[3]),
        cleanup_median_ms: median(&steps[4]),
        remove_median_ms: median(&steps[5]),
        total_ms: steps[0].clone(),
        shares,
        launch_ratio: launch.ratio,
        launch_runs,
    })
}

impl InvokeBench {
    /// Plain text.
    pub fn text(&self) -> String {
        let mut out = format!(
            "invoke: questions phase, fake vendor, {} files, {} runs\n\
             end to end median {:.0} ms (target < 2000 ms)\n",
            self.files, self.runs, self.total_median_ms
        );
        for (name, share) in &self.shares {
            out.push_str(&format!("  {name:<8} {:>5.1} %\n", share * 100.0));
        }
        out.push_str(&format!(
            "launch ratio cordon/bare {:.3} over {} runs (target <= 1.15)\n",
            self.launch_ratio, self.launch_runs
        ));
        out
    }
}
