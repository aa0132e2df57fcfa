//! `cordon bench all`: every speed target of issue 24 in order, each measured side by side with
//! its baseline in the same run, printed against its target with the command that reproduces it
//! alone, the machine and the date. `docs/performance.md` is regenerated from its `--json`.

use serde::Serialize;

use cordon::controller::Controller;
use cordon::error::Result;
use cordon::image::agent::{build_agent_image, AgentImageSpec};

use crate::bench::{GateBench, SeedBench};
use crate::bench_audit::AuditBench;
use crate::bench_claude::ClaudeInvokeBench;
use crate::bench_egress::EgressReport;
use crate::bench_snapshot::{DensityBench, SnapshotBench};

/// How a measured value is held to its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    AtMost,
    /// Strictly below (the "under").
    Under,
    AtLeast,
    /// A figure the issue asks to be stated, with no limit.
    Stated,
}

/// One target's figure.
#[derive(Debug, Clone, Serialize)]
pub struct Target {
    /// The number for the target (1 to 7).
    pub target: u8,
    pub measure: &'static str,
    pub value: f64,
    /// `x` for a ratio against the baseline beside it, else the unit.
    pub unit: &'static str,
    pub bound: Bound,
    pub limit: Option<f64>,
    pub met: bool,
    /// The benchmark that measures it alone.
    pub command: &'static str,
}

/// Where and when it ran.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub date: String,
    pub cpus: usize,
    pub kernel: String,
    pub engine: String,
    pub storage_driver: String,
}

/// Every target's figure and every benchmark's whole report.
#[derive(Debug, Clone, Serialize)]
pub struct AllBench {
    pub machine: Machine,
    pub runs: usize,
    pub met: usize,
    pub missed: usize,
    pub targets: Vec<Target>,
    pub snapshot: SnapshotBench,
    pub claude: ClaudeInvokeBench,
    /// Seeding a repository whose objects are in one pack, as a clone brings them.
    pub seed: SeedBench,
    /// The same with its objects loose, as `git add` and `git commit` leave them.
    pub seed_loose: SeedBench,
    pub audit: AuditBench,
    pub egress: EgressReport,
    pub density: DensityBench,
    pub gate: GateBench,
}

/// The sizes `bench all` measures at: the issue's.
pub const SNAPSHOT_FILES: usize = 5_000;
pub const SEED_FILES: usize = 20_000;
pub const SEED_BYTES: u64 = 200 << 20;
pub const AUDIT_ENTRIES: usize = 131_072;
pub const AUDIT_BYTES: u64 = 64 << 20;
pub const AUDIT_CHANGES: usize = 1_000;
pub const COMMIT_FILES: usize = 10_000;
pub const EGRESS_BYTES: u64 = 64 << 20;
pub const EGRESS_PINGS: usize = 500;
pub const DENSITY_INVOCATIONS: usize = 16;
pub const DENSITY_FILES: usize = 1_000;
pub const GATE_PARALLEL: usize = 6;

/// Run every benchmark, `runs` interleaved runs each (the gate once): seeding first, then the
/// issue's order.
pub async fn all(
    ctl: &Controller,
    test_image: &str,
    agent: &AgentImageSpec,
    runs: usize,
    say: &(dyn Fn(&str) + Sync),
) -> Result<AllBench> {
    let engine = ctl.engine();
    // Seeding's peak RSS is this process's resident size when it begins plus what seeding adds:
    // first, so no other benchmark's retained heap is in it (49.6 MiB alone, 60-65 MiB after
    // the snapshot and real-CLI benchmarks, seeding and the plain upload alike).
    say("seeding (target 3)");
    let seed = crate::bench::seed(ctl, test_image, (SEED_FILES, SEED_BYTES), true, runs).await?;
    let seed_loose =
        crate::bench::seed(ctl, test_image, (SEED_FILES, SEED_BYTES), false, runs).await?;
    say("snapshot (target 1)");
    let snapshot = crate::bench_snapshot::snapshot(ctl, test_image, SNAPSHOT_FILES, runs).await?;
    say("the real CLI over a warm snapshot (target 2)");
    let claude =
        crate::bench_claude::invoke_claude(ctl, test_image, agent, SNAPSHOT_FILES, runs).await?;
    say("commit (target 4)");
    let audit = crate::bench_audit::audit(
        ctl,
        test_image,
        AUDIT_ENTRIES,
        AUDIT_BYTES,
        AUDIT_CHANGES,
        COMMIT_FILES,
        runs,
        true,
    )
    .await?;
    say("egress (target 5)");
    let egress =
        crate::bench_egress::egress(ctl, test_image, runs, EGRESS_BYTES, EGRESS_PINGS).await?;
    say("density (target 6)");
    let density =
        crate::bench_snapshot::density(ctl, test_image, DENSITY_INVOCATIONS, DENSITY_FILES, runs)
            .await?;
    say("the gate (target 7)");
    let built = build_agent_image(engine, agent, &|_| {}).await?;
    let gate = crate::bench::gate(ctl, test_image, Some((&built).into()), GATE_PARALLEL).await?;
    let info = engine.info();
    let machine = Machine {
        date: time::OffsetDateTime::now_utc().date().to_string(),
        cpus: std::thread::available_parallelism().map_or(1, usize::from),
        kernel: info.kernel.clone(),
        engine: format!("Docker {} (API {})", info.version, info.api),
        storage_driver: info.storage_driver.clone(),
    };
    Ok(AllBench::new(
        machine,
        runs,
        snapshot,
        claude,
        (seed, seed_loose),
        audit,
        egress,
        density,
        gate,
    ))
}

impl AllBench {
    #[allow(clippy::too_many_arguments)]
    fn new(
        machine: Machine,
        runs: usize,
        snapshot: SnapshotBench,
        claude: ClaudeInvokeBench,
        (seed, seed_loose): (SeedBench, SeedBench),
        audit: AuditBench,
        egress: EgressReport,
        density: DensityBench,
        gate: GateBench,
    ) -> AllBench {
        let seeds = (&seed, &seed_loose);
        let targets = targets(&snapshot, &claude, seeds, &audit, &egress, &density, &gate);
        let met = targets
            .iter()
            .filter(|t| t.bound != Bound::Stated && t.met)
            .count();
        let missed = targets.iter().filter(|t| !t.met).count();
        AllBench {
            machine,
            runs,
            met,
            missed,
            targets,
            snapshot,
            claude,
            seed,
            seed_loose,
            audit,
            egress,
            density,
            gate,
        }
    }

    /// Plain text: the machine, then one line per target.
    pub fn text(&self) -> String {
        let m = &self.machine;
        let mut out = format!(
            "cordon bench all, {}: {} CPUs, kernel {}, {}, storage driver {}; medians of {} \
             interleaved runs (the gate once)\n",
            m.date, m.cpus, m.kernel, m.engine, m.storage_driver, self.runs
        );
        for t in &self.targets {
            let limit = match (t.bound, t.limit) {
                (Bound::AtMost, Some(l)) => format!("<= {l}"),
                (Bound::Under, Some(l)) => format!("< {l}"),
                (Bound::AtLeast, Some(l)) => format!(">= {l}"),
                _ => "stated".to_owned(),
            };
            let verdict = match (t.bound, t.met) {
                (Bound::Stated, _) => "",
                (_, true) => "meets",
                (_, false) => "MISSES",
            };
            out.push_str(&format!(
                "{}. {:<58} {:>10.2} {:<3} {:<10} {:<6}  ({})\n",
                t.target, t.measure, t.value, t.unit, limit, verdict, t.command
            ));
        }
        out.push_str(&format!(
            "{} targets met, {} missed\n",
            self.met, self.missed
        ));
        out
    }
}

fn target(
    number: u8,
    measure: &'static str,
    value: f64,
    unit: &'static str,
    bound: Bound,
    limit: Option<f64>,
    command: &'static str,
) -> Target {
    let met = match (bound, limit) {
        (Bound::Stated, _) => true,
        (_, None) => false,
        // A value that is not a number (a median of nothing) meets nothing.
        (Bound::AtMost, Some(l)) => value <= l,
        (Bound::Under, Some(l)) => value < l,
        (Bound::AtLeast, Some(l)) => value >= l,
    };
    Target {
        target: number,
        measure,
        value,
        unit,
        bound,
        limit,
        met,
        command,
    }
}

/// Each benchmark's figures held to the targets, in the order.
fn targets(
    snapshot: &SnapshotBench,
    claude: &ClaudeInvokeBench,
    seeds: (&SeedBench, &SeedBench),
    audit: &AuditBench,
    egress: &EgressReport,
    density: &DensityBench,
    gate: &GateBench,
) -> Vec<Target> {
    let mut all = invocation_targets(snapshot, claude, density);
    all.extend(data_targets(seeds, audit, egress));
    all.extend(gate_targets(gate));
    // Stable: each target's figures keep their order.
    all.sort_by_key(|t| t.target);
    all
}

/// Targets 1, 2 and 6: invocations over a snapshot, alone and sixteen at once.
fn invocation_targets(
    snapshot: &SnapshotBench,
    claude: &ClaudeInvokeBench,
    density: &DensityBench,
) -> Vec<Target> {
    use Bound::{AtMost, Stated, Under};
    vec![
        target(
            1,
            "warm questions invocation / bare hardened run",
            snapshot.warm_ratio,
            "x",
            AtMost,
            Some(crate::bench_snapshot::WARM_RATIO_TARGET),
            "cordon bench snapshot",
        ),
        target(
            1,
            "cold questions invocation, 5,000 files",
            snapshot.cold_median_ms,
            "ms",
            AtMost,
            Some(crate::bench_snapshot::COLD_TARGET_MS),
            "cordon bench snapshot",
        ),
        target(
            2,
            "cordon's own part of a warm real-CLI invocation",
            claude.warm_own_median_ms,
            "ms",
            Under,
            Some(crate::bench_claude::OWN_TARGET_MS),
            "cordon bench invoke --vendor claude --fake-vendor",
        ),
        // The fake vendor is a container the invocation starts and removes; the real vendor is
        // not: its serial share taken out (its CPU beside the other starts is left in).
        target(
            2,
            "the same less the fake vendor's serial share",
            claude.warm_own_less_fixtures_median_ms,
            "ms",
            Stated,
            None,
            "cordon bench invoke --vendor claude --fake-vendor",
        ),
        target(
            6,
            "16 attested invocations / 16 bare runs, at once",
            density.ratio,
            "x",
            AtMost,
            Some(crate::bench_snapshot::DENSITY_RATIO_TARGET),
            "cordon bench density",
        ),
    ]
}

/// Targets 3, 4 and 5: the bytes in (seeding), out (the commit), and through the proxy.
fn data_targets(
    (seed, loose): (&SeedBench, &SeedBench),
    audit: &AuditBench,
    egress: &EgressReport,
) -> Vec<Target> {
    use Bound::{AtLeast, AtMost, Stated, Under};
    vec![
        target(
            3,
            "seeding / plain upload, 20,000 files, 200 MiB, objects in one pack",
            seed.ratio,
            "x",
            AtMost,
            Some(crate::bench::SEED_RATIO_TARGET),
            "cordon bench seed",
        ),
        target(
            3,
            "seeding / plain upload, the same objects loose",
            loose.ratio,
            "x",
            AtMost,
            Some(crate::bench::SEED_RATIO_TARGET),
            "cordon bench seed --loose",
        ),
        target(
            3,
            "peak controller RSS while seeding",
            seed.seed_peak_rss_kib.max(loose.seed_peak_rss_kib) as f64 / 1024.0,
            "MiB",
            Under,
            Some(crate::bench::SEED_RSS_TARGET_MIB),
            "cordon bench seed",
        ),
        target(
            4,
            "commit of 10,000 files / git add -A && git commit",
            audit.commit_ratio,
            "x",
            AtMost,
            Some(crate::bench_audit::COMMIT_RATIO_TARGET),
            "cordon bench audit",
        ),
        target(
            4,
            "peak controller RSS while committing",
            audit.controller_peak_rss_mib,
            "MiB",
            Stated,
            None,
            "cordon bench audit",
        ),
        target(
            5,
            "egress download / direct",
            egress.download_ratio,
            "x",
            AtLeast,
            Some(crate::bench_egress::RATIO_TARGET),
            "cordon bench egress",
        ),
        target(
            5,
            "egress upload / direct",
            egress.upload_ratio,
            "x",
            AtLeast,
            Some(crate::bench_egress::RATIO_TARGET),
            "cordon bench egress",
        ),
        // What one plain relay's hop reaches on this machine: where target 5's floor is.
        target(
            5,
            "one plain relay's download / direct (the hop's floor)",
            egress.relayed_download_ratio,
            "x",
            Stated,
            None,
            "cordon bench egress",
        ),
        target(
            5,
            "one plain relay's upload / direct (the hop's floor)",
            egress.relayed_upload_ratio,
            "x",
            Stated,
            None,
            "cordon bench egress",
        ),
    ]
}

/// Target 7: every cell of the gate, none failed, the slowest under a minute.
fn gate_targets(gate: &GateBench) -> Vec<Target> {
    use Bound::{AtMost, Stated, Under};
    let slowest_cell = gate.cases.iter().map(|c| c.2).max().unwrap_or(u64::MAX);
    vec![
        target(
            7,
            "the gate's slowest cell",
            slowest_cell as f64 / 1000.0,
            "s",
            Under,
            Some(60.0),
            "cordon bench gate",
        ),
        target(
            7,
            "the gate's cells that failed",
            gate.failed as f64,
            "",
            AtMost,
            Some(0.0),
            "cordon bench gate",
        ),
        target(
            7,
            "the gate's wall time",
            gate.wall_ms as f64 / 1000.0,
            "s",
            Stated,
            None,
            "cordon bench gate",
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each bound holds its value to its limit as the issue words it, and a value that is not a
    /// number (a median of no sample) meets no bound.
    #[test]
    fn bounds_hold_values_to_their_limits() {
        let t = |value, bound, limit| target(1, "m", value, "x", bound, limit, "c").met;
        assert!(t(1.3, Bound::AtMost, Some(1.3)));
        assert!(!t(1.31, Bound::AtMost, Some(1.3)));
        assert!(!t(1000.0, Bound::Under, Some(1000.0)));
        assert!(t(999.9, Bound::Under, Some(1000.0)));
        assert!(t(0.8, Bound::AtLeast, Some(0.8)));
        assert!(!t(0.79, Bound::AtLeast, Some(0.8)));
        for bound in [Bound::AtMost, Bound::Under, Bound::AtLeast] {
            assert!(!t(f64::NAN, bound, Some(1.0)), "{bound:?}");
            assert!(!t(0.5, bound, None), "{bound:?}");
        }
        assert!(t(f64::NAN, Bound::Stated, None));
    }
}
