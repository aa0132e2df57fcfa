//! `cordon bench audit`: the post-run inspection of a large generated tree with changed files
//! against git's own answer to the same question on the host, interleaved run by run; then the
//! commit of 10,000 changed files against `git add -A` and `git commit` of the same changes on the
//! host, with the peak memory of each.
//!
//! Both sides read every byte. The inspection trusts no stat data: it hashes every file of the
//! work tree each time. git's side has its index rebuilt from HEAD without stat data (untimed),
//! then `update-index --really-refresh` (which hashes every file) and `status --porcelain` are
//! timed together, as in `cordon bench check`. The commit runs its inspection again (it never
//! trusts an earlier one), so its baseline, which hashes only what git's index shows as changed,
//! does less work: the ratio says what the distrust costs.

use std::path::Path;
use std::time::Instant;

use crate::bench::median;
use crate::bench_check::{git_baseline, prepared_tree};
use cordon::audit::{self, CommitRequest};
use cordon::controller::Controller;
use cordon::error::{Error, Result};
use cordon::labels::Owner;
use cordon::task::{self, StorageHandle};

/// What the benchmark measured.
/// The commit target of issue 24 (target 4): at most this times `git add -A && git commit`.
pub const COMMIT_RATIO_TARGET: f64 = 3.0;

#[derive(Debug, Clone, serde::Serialize)]
pub struct AuditBench {
    /// Files of the generated tree, and its bytes.
    pub entries: usize,
    pub tree_bytes: u64,
    /// Whether base's objects were in one pack (as a clone brings them) or loose.
    pub packed: bool,
    pub runs: usize,
    /// Files changed before the inspection runs.
    pub changed: usize,
    /// The inspection end to end: the metadata compared, the reader's container created, run
    /// (every file hashed), removed; the manifest judged and digested.
    pub inspect_ms: Vec<f64>,
    /// git on the host: `update-index --really-refresh` and `status --porcelain`.
    pub git_ms: Vec<f64>,
    pub inspect_median_ms: f64,
    pub git_median_ms: f64,
    /// inspect / git (target at most 1.0).
    pub ratio: f64,
    /// Files changed before the commits run.
    pub commit_files: usize,
    /// The commit end to end: its own inspection, the content streamed out and checked, the
    /// scratch repository built, the bundle written and its objects checked strictly.
    pub commit_ms: Vec<f64>,
    /// git on the host: `add -A` and `commit` of the same changes.
    pub git_commit_ms: Vec<f64>,
    pub commit_median_ms: f64,
    pub git_commit_median_ms: f64,
    /// commit / git add and commit.
    pub commit_ratio: f64,
    /// This process's resident memory as a commit starts, and its peak during the commit (the
    /// kernel's high-water mark, reset before each commit), largest over the runs.
    pub controller_rss_before_mib: f64,
    pub controller_peak_rss_mib: f64,
    /// The largest peak resident memory of git's `add -A` and `commit` processes.
    pub git_peak_rss_mib: f64,
    pub bundle_bytes: u64,
    /// Every commit run made the same commit.
    pub same_commit: bool,
}

/// The repository path of generated file `index` (as [`crate::bench::generate_repository`]
/// names it).
fn generated_path(index: usize) -> String {
    format!("d{:03}/f{index:05}.bin", index % 100)
}

/// Changed files: each path and its new bytes.
type Changes = Vec<(String, Vec<u8>)>;

/// The `count` generated files changed by step `from..from + count`: spread over the tree (131 is
/// prime to every power of two, so the indices are distinct), each with new bytes of `size`.
fn changes(entries: usize, from: usize, count: usize, size: usize) -> Changes {
    (from..from + count)
        .map(|step| {
            let index = step * 131 % entries;
            let line = format!("changed by the benchmark: file {index}\n");
            let data = line.bytes().cycle().take(size.max(line.len())).collect();
            (generated_path(index), data)
        })
        .collect()
}

/// Apply `changed` to the host copy and, as one upload, to the storage's work tree.
async fn apply(
    ctl: &Controller,
    storage: &StorageHandle,
    dir: &Path,
    changed: &[(String, Vec<u8>)],
) -> Result<()> {
    let task_storage = storage.storage()?;
    let mut archive =
        cordon::archive::Archive::in_memory(task_storage.allocation.uid.get(), "bench changes");
    for (path, data) in changed {
        std::fs::write(dir.join(path), data).map_err(|e| Error::io("changing the host copy", e))?;
        archive.file(path, 0o644, data)?;
    }
    task_storage
        .upload(
            ctl.engine(),
            cordon_contract::paths::WORK,
            archive.finish()?,
        )
        .await
}

/// This process's resident memory now and its peak, in MiB, from `/proc/self/status`.
fn rss_mib() -> Result<(f64, f64)> {
    let status = std::fs::read_to_string("/proc/self/status")
        .map_err(|e| Error::io("reading /proc/self/status", e))?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map(|kib| kib / 1024.0)
            .ok_or_else(|| Error::Internal(format!("no {name} in /proc/self/status")))
    };
    Ok((field("VmRSS:")?, field("VmHWM:")?))
}

/// Reset this process's resident-memory high-water mark to what it holds now.
fn reset_peak_rss() -> Result<()> {
    std::fs::write("/proc/self/clear_refs", "5")
        .map_err(|e| Error::io("resetting the peak resident memory", e))
}

/// Run git on the host copy to its end: milliseconds and its own peak resident memory in MiB
/// (`wait4` gives the child's, not the largest of every child so far).
fn git_measured(dir: &Path, args: &[&str]) -> Result<(f64, f64)> {
    let started = Instant::now();
    let child = cordon::repo::git::own_command(dir, args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| Error::io("running git", e))?;
    let pid = i32::try_from(child.id()).map_err(|_| Error::Internal("a pid over i32".into()))?;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to fill.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: the child is ours and not yet waited for; both pointers are to live locals.
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    if waited != pid || !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        return Err(Error::Git {
            context: args.first().unwrap_or(&"").to_string(),
            message: format!("wait4 {waited}, status {status}"),
        });
    }
    Ok((ms, usage.ru_maxrss as f64 / 1024.0))
}

/// git's commit of the host copy's changes, then (untimed) the commit undone so the next run
/// commits the same changes again: milliseconds and the larger peak memory of the two.
fn git_commit_baseline(dir: &Path) -> Result<(f64, f64)> {
    let (add_ms, add_rss) = git_measured(dir, &["add", "-A"])?;
    let (commit_ms, commit_rss) = git_measured(dir, &["commit", "--quiet", "-m", "bench"])?;
    cordon::repo::git::own_repository(dir, &["reset", "--quiet", "HEAD~1"])?;
    Ok((add_ms + commit_ms, add_rss.max(commit_rss)))
}

/// The host side of a run, on a blocking thread.
async fn on_host<T: Send + 'static>(
    dir: &Path,
    f: impl FnOnce(&Path) -> Result<T> + Send + 'static,
) -> Result<T> {
    let dir = dir.to_path_buf();
    tokio::task::spawn_blocking(move || f(&dir))
        .await
        .map_err(|e| Error::Internal(format!("git baseline: {e}")))?
}

/// Run the benchmark: `entries` files of `bytes` in all; `changed` of them changed, then `runs`
/// interleaved inspection pairs; `commit_files` changed in all, then `runs` interleaved commit
/// pairs.
#[allow(clippy::too_many_arguments)]
pub async fn audit(
    ctl: &Controller,
    image_id: &str,
    entries: usize,
    bytes: u64,
    changed: usize,
    commit_files: usize,
    runs: usize,
    packed: bool,
) -> Result<AuditBench> {
    if changed > commit_files || commit_files > cordon_contract::audit::MAX_CHANGES.min(entries) {
        return Err(Error::Invalid(format!(
            "{changed} changed files, then {commit_files}: at most {} and in that order",
            cordon_contract::audit::MAX_CHANGES.min(entries)
        )));
    }
    let owner = Owner::random("bench");
    let dir = std::env::temp_dir().join(format!("cordon-bench-audit-{}", owner.as_str()));
    let bundles = std::env::temp_dir().join(format!("cordon-bench-bundles-{}", owner.as_str()));
    let result = async {
        let (storage, tree_bytes) = prepared_tree(
            ctl,
            image_id,
            &owner,
            &dir,
            entries,
            bytes,
            packed,
            "bench-audit",
        )
        .await?;
        let measured = measure(ctl, image_id, &storage, &dir, &bundles, runs, {
            let size = (bytes / entries.max(1) as u64) as usize;
            (
                changes(entries, 0, changed, size),
                changes(entries, changed, commit_files - changed, size),
            )
        })
        .await;
        task::remove(ctl, &storage).await?;
        let mut report = measured?;
        report.entries = entries;
        report.tree_bytes = tree_bytes;
        report.packed = packed;
        Ok::<_, Error>(report)
    }
    .await;
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&bundles);
    result
}

/// Both halves over prepared storage: `first` changed before the inspections, `more` before the
/// commits.
#[allow(clippy::too_many_arguments)]
async fn measure(
    ctl: &Controller,
    image_id: &str,
    storage: &StorageHandle,
    dir: &Path,
    bundles: &Path,
    runs: usize,
    (first, more): (Changes, Changes),
) -> Result<AuditBench> {
    let deadline = audit::DEFAULT_DEADLINE;
    let helper = ctl.clone().with_helper_image(image_id);
    let bound = &helper.task(storage)?;
    let snapshot = bound.snapshot_links(&[], deadline).await?;
    let mut report = AuditBench {
        entries: 0,
        tree_bytes: 0,
        packed: false,
        runs,
        changed: first.len(),
        inspect_ms: vec![],
        git_ms: vec![],
        inspect_median_ms: 0.0,
        git_median_ms: 0.0,
        ratio: 0.0,
        commit_files: first.len() + more.len(),
        commit_ms: vec![],
        git_commit_ms: vec![],
        commit_median_ms: 0.0,
        git_commit_median_ms: 0.0,
        commit_ratio: 0.0,
        controller_rss_before_mib: 0.0,
        controller_peak_rss_mib: 0.0,
        git_peak_rss_mib: 0.0,
        bundle_bytes: 0,
        same_commit: true,
    };
    // The manifest must say what was changed: a fast wrong answer measures nothing.
    let taken = &snapshot;
    let manifest_of = |expected: usize| async move {
        let t = Instant::now();
        let manifest = bound.inspect(taken, deadline).await?;
        if manifest.changes.len() != expected || manifest.metadata_changed {
            return Err(Error::Internal(format!(
                "the manifest lists {} changes (metadata changed: {}), {expected} were made",
                manifest.changes.len(),
                manifest.metadata_changed
            )));
        }
        Ok::<_, Error>((t.elapsed().as_secs_f64() * 1000.0, manifest))
    };
    apply(ctl, storage, dir, &first).await?;
    for run in 0..runs {
        let (inspect, git) = if run % 2 == 0 {
            let (ours, _) = manifest_of(first.len()).await?;
            (ours, on_host(dir, git_baseline).await?.0)
        } else {
            let (theirs, _) = on_host(dir, git_baseline).await?;
            (manifest_of(first.len()).await?.0, theirs)
        };
        report.inspect_ms.push(inspect);
        report.git_ms.push(git);
    }
    apply(ctl, storage, dir, &more).await?;
    let (_, manifest) = manifest_of(report.commit_files).await?;
    std::fs::create_dir_all(bundles).map_err(|e| Error::io("the bundle directory", e))?;
    let mut heads = Vec::new();
    for run in 0..runs {
        let request = CommitRequest {
            snapshot: snapshot.clone(),
            digest: manifest.digest.clone(),
            message: format!("bench: {} changed files\n", report.commit_files),
            trailers: vec![],
            author: "cordon bench <bench@cordon.invalid> 1700000000 +0000".to_owned(),
            committer: "cordon bench <bench@cordon.invalid> 1700000000 +0000".to_owned(),
            bundle: bundles.join(format!("run-{run}.bundle")),
            allow_non_portable: false,
        };
        let ours = async {
            reset_peak_rss()?;
            let (before, _) = rss_mib()?;
            let t = Instant::now();
            let committed = bound.commit(&request, deadline).await?;
            let ms = t.elapsed().as_secs_f64() * 1000.0;
            let (_, peak) = rss_mib()?;
            Ok::<_, Error>((ms, before, peak, committed))
        };
        let ((ms, before, peak, committed), (git_ms, git_rss)) = if run % 2 == 0 {
            let o = ours.await?;
            (o, on_host(dir, git_commit_baseline).await?)
        } else {
            let g = on_host(dir, git_commit_baseline).await?;
            (ours.await?, g)
        };
        report.commit_ms.push(ms);
        report.git_commit_ms.push(git_ms);
        report.controller_rss_before_mib = report.controller_rss_before_mib.max(before);
        report.controller_peak_rss_mib = report.controller_peak_rss_mib.max(peak);
        report.git_peak_rss_mib = report.git_peak_rss_mib.max(git_rss);
        report.bundle_bytes = committed.bundle_bytes;
        heads.push(committed.head);
        if let Some(bundle) = committed.bundle.as_ref() {
            let _ = std::fs::remove_file(bundle);
        }
    }
    report.same_commit = heads.windows(2).all(|w| w[0] == w[1]);
    report.inspect_median_ms = median(&report.inspect_ms);
    report.git_median_ms = median(&report.git_ms);
    report.ratio = report.inspect_median_ms / report.git_median_ms;
    report.commit_median_ms = median(&report.commit_ms);
    report.git_commit_median_ms = median(&report.git_commit_ms);
    report.commit_ratio = report.commit_median_ms / report.git_commit_median_ms;
    Ok(report)
}

impl AuditBench {
    /// Plain text.
    pub fn text(&self) -> String {
        format!(
            "audit: {} files, {:.1} MiB, objects {}, {} interleaved runs\n\
             inspect with {} changed (container, every file hashed, manifest) median {:.0} ms\n\
             git update-index --really-refresh + status                median {:.0} ms\n\
             ratio inspect/git                                         {:.3} (target <= 1.0)\n\
             commit of {} changed files (inspect again, stream, build, bundle of {} bytes, checked) median {:.0} ms\n\
             git add -A + commit of the same changes                   median {:.0} ms\n\
             ratio commit/git                                          {:.3}\n\
             peak memory: controller {:.1} MiB (from {:.1} MiB at the start), git {:.1} MiB\n\
             every run made the same commit: {}\n",
            self.entries,
            self.tree_bytes as f64 / 1_048_576.0,
            if self.packed { "in one pack" } else { "loose" },
            self.runs,
            self.changed,
            self.inspect_median_ms,
            self.git_median_ms,
            self.ratio,
            self.commit_files,
            self.bundle_bytes,
            self.commit_median_ms,
            self.git_commit_median_ms,
            self.commit_ratio,
            self.controller_peak_rss_mib,
            self.controller_rss_before_mib,
            self.git_peak_rss_mib,
            self.same_commit,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_changes_are_distinct_generated_files() {
        let all = changes(131_072, 0, 10_000, 512);
        let paths: std::collections::BTreeSet<_> = all.iter().map(|(p, _)| p.clone()).collect();
        assert_eq!(paths.len(), 10_000);
        assert!(all.iter().all(|(_, d)| d.len() == 512));
        assert_eq!(generated_path(7), "d007/f00007.bin");
        // The two halves never touch one file twice.
        let first = changes(131_072, 0, 1_000, 512);
        let more = changes(131_072, 1_000, 9_000, 512);
        assert!(first.iter().all(|(p, _)| !more.iter().any(|(q, _)| q == p)));
    }

    #[test]
    fn this_process_reports_its_memory() {
        reset_peak_rss().unwrap();
        let (now, peak) = rss_mib().unwrap();
        assert!(now > 0.0 && peak >= now, "{now} {peak}");
    }
}
