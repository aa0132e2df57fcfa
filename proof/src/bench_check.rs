//! `cordon bench check`: the pre-launch tree check on a large generated tree against git's own
//! answer to the same question on the host, interleaved run by run, and what the check adds to
//! an execute invocation's start.
//!
//! The baseline reads every byte too: the index is rebuilt from HEAD without stat data (untimed),
//! then `git update-index --really-refresh` (which hashes every file) and `git status
//! --porcelain` are timed together. `git status` alone on the refreshed index is reported beside
//! it (it hashes nothing and trusts the stat data, which the check never does).

use std::time::{Duration, Instant};

use crate::bench::{generate_repository, median, questions_run};
use cordon::controller::Controller;
use cordon::error::{Error, Result};
use cordon::labels::Owner;
use cordon::task::{self, PrepareRequest, StorageHandle};

/// What the benchmark measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CheckBench {
    /// Index entries (files) of the generated tree, and its bytes.
    pub entries: usize,
    pub tree_bytes: u64,
    pub runs: usize,
    /// The check end to end: the reader's container created, run, removed; the report judged.
    pub check_ms: Vec<f64>,
    /// git on the host: `update-index --really-refresh` and `status --porcelain`.
    pub git_ms: Vec<f64>,
    /// `git status --porcelain` alone, right after the refresh.
    pub status_ms: Vec<f64>,
    pub check_median_ms: f64,
    pub git_median_ms: f64,
    pub status_median_ms: f64,
    /// check / git (target at most 1.5).
    pub ratio: f64,
    /// An execute invocation on a small repository: what the check took, and the invocation.
    pub start_files: usize,
    pub start_check_ms: Vec<f64>,
    pub start_invoke_ms: Vec<f64>,
    pub start_check_median_ms: f64,
    pub start_invoke_median_ms: f64,
}

fn git_timed(dir: &std::path::Path, args: &[&str]) -> Result<f64> {
    let t = Instant::now();
    cordon::repo::git::own_repository(dir, args)?;
    Ok(t.elapsed().as_secs_f64() * 1000.0)
}

/// git's answer on the host: the refresh that hashes every file, then status; and status alone.
pub(crate) fn git_baseline(dir: &std::path::Path) -> Result<(f64, f64)> {
    // An index without stat data: the refresh must read and hash every file.
    let _ = std::fs::remove_file(dir.join(".git/index"));
    cordon::repo::git::own_repository(dir, &["read-tree", "HEAD"])?;
    let refresh = git_timed(dir, &["update-index", "-q", "--really-refresh"])?;
    let status = git_timed(dir, &["status", "--porcelain"])?;
    Ok((refresh + status, status))
}

/// A generated repository of `entries` files and about `bytes` in `dir` (its objects loose, or
/// in one pack as a clone brings them), prepared as task storage of `owner` with room for it:
/// the handle and the tree's bytes.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn prepared_tree(
    ctl: &Controller,
    image_id: &str,
    owner: &Owner,
    dir: &std::path::Path,
    entries: usize,
    bytes: u64,
    packed: bool,
    attempt: &str,
) -> Result<(StorageHandle, u64)> {
    let big = dir.to_path_buf();
    let tree_bytes = tokio::task::spawn_blocking(move || {
        let bytes = generate_repository(&big, entries, bytes)?;
        if packed {
            cordon::repo::git::own_repository(&big, &["repack", "-a", "-d", "-q"])?;
        }
        Ok::<_, Error>(bytes)
    })
    .await
    .map_err(|e| Error::Internal(format!("generator: {e}")))??;
    let work = cordon::profile::Area {
        // A page per file and the directories, twice over.
        bytes: (entries as u64 * 4096 * 2 + tree_bytes).div_ceil(4096) * 4096,
        inodes: entries as u64 * 2 + 1024,
    };
    let request = PrepareRequest {
        repo: dir.to_path_buf(),
        head: "HEAD".to_owned(),
        owner: owner.clone(),
        attempt: attempt.to_owned(),
        allocation: None,
        work,
        deadline: Duration::from_secs(900),
        uids: cordon::uids::UidRange::default(),
        shared: false,
    };
    let storage = task::prepare(&ctl.clone().with_helper_image(image_id), &request).await?;
    Ok((storage, tree_bytes))
}

/// Run the benchmark: `entries` files of `bytes` in all, `runs` interleaved pairs; then `runs`
/// execute invocations on a 5,000-file repository.
pub async fn check(
    ctl: &Controller,
    image_id: &str,
    entries: usize,
    bytes: u64,
    runs: usize,
) -> Result<CheckBench> {
    let owner = Owner::random("bench");
    let dir = std::env::temp_dir().join(format!("cordon-bench-tree-{}", owner.as_str()));
    let small = std::env::temp_dir().join(format!("cordon-bench-start-{}", owner.as_str()));
    let result = async {
        let few = small.clone();
        tokio::task::spawn_blocking(move || generate_repository(&few, 5_000, 5_000 * 512))
            .await
            .map_err(|e| Error::Internal(format!("generator: {e}")))??;
        let (storage, tree_bytes) = prepared_tree(
            ctl,
            image_id,
            &owner,
            &dir,
            entries,
            bytes,
            false,
            "bench-check",
        )
        .await?;
        let mut report = CheckBench {
            entries,
            tree_bytes,
            runs,
            check_ms: vec![],
            git_ms: vec![],
            status_ms: vec![],
            check_median_ms: 0.0,
            git_median_ms: 0.0,
            status_median_ms: 0.0,
            ratio: 0.0,
            start_files: 5_000,
            start_check_ms: vec![],
            start_invoke_ms: vec![],
            start_check_median_ms: 0.0,
            start_invoke_median_ms: 0.0,
        };
        let measured = async {
            let helper = ctl.clone().with_helper_image(image_id);
            let bound = helper.task(&storage)?;
            for run in 0..runs {
                let ours = async {
                    let t = Instant::now();
                    bound
                        .check_tree(&[], cordon::audit::DEFAULT_DEADLINE)
                        .await?;
                    Ok::<_, Error>(t.elapsed().as_secs_f64() * 1000.0)
                };
                let theirs = || {
                    let dir = dir.clone();
                    async move {
                        tokio::task::spawn_blocking(move || git_baseline(&dir))
                            .await
                            .map_err(|e| Error::Internal(format!("git baseline: {e}")))?
                    }
                };
                let ((git, status), check) = if run % 2 == 0 {
                    let c = ours.await?;
                    (theirs().await?, c)
                } else {
                    let g = theirs().await?;
                    (g, ours.await?)
                };
                report.check_ms.push(check);
                report.git_ms.push(git);
                report.status_ms.push(status);
            }
            Ok::<_, Error>(())
        }
        .await;
        task::remove(ctl, &storage).await?;
        measured?;
        for run in 0..runs {
            let execute = cordon::invoke::oneshot::OneShot {
                phase: cordon_contract::Phase::Execute,
                ..questions_run(&small, run)
            };
            let done = crate::bench::answered(
                cordon::invoke::oneshot::oneshot(
                    ctl,
                    image_id,
                    &execute,
                    std::future::pending(),
                    &|_| {},
                )
                .await?,
            )?;
            report.start_check_ms.push(done.timings.check_ms);
            report.start_invoke_ms.push(done.timings.invoke_ms);
        }
        report.check_median_ms = median(&report.check_ms);
        report.git_median_ms = median(&report.git_ms);
        report.status_median_ms = median(&report.status_ms);
        report.ratio = report.check_median_ms / report.git_median_ms;
        report.start_check_median_ms = median(&report.start_check_ms);
        report.start_invoke_median_ms = median(&report.start_invoke_ms);
        Ok::<_, Error>(report)
    }
    .await;
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&small);
    result
}

impl CheckBench {
    /// Plain text.
    pub fn text(&self) -> String {
        format!(
            "check: {} index entries, {:.1} MiB, {} interleaved runs\n\
             tree check (container, read, hash, judge) median {:.0} ms\n\
             git update-index --really-refresh + status median {:.0} ms (status alone {:.0} ms)\n\
             ratio check/git                          {:.3} (target <= 1.5)\n\
             execute on {} files: the check adds median {:.0} ms to an invocation of {:.0} ms\n",
            self.entries,
            self.tree_bytes as f64 / 1_048_576.0,
            self.runs,
            self.check_median_ms,
            self.git_median_ms,
            self.status_median_ms,
            self.ratio,
            self.start_files,
            self.start_check_median_ms,
            self.start_invoke_median_ms,
        )
    }
}
