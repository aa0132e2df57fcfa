//! `cordon doctor`: what this engine gives a hardened container, and whether each fact is good
//! enough for cordon.

use std::time::Duration;

use cordon_contract::paths;

use cordon::controller::Controller;
use cordon::engine::pending::Created;
use cordon::engine::{EngineInfo, MIN_API, SUBPATH_API};
use cordon::error::{Error, Result};
use cordon::labels::{Kind, Owner};
use cordon::launch::MAX_OUTPUT_BYTES;
use cordon::profile::helper_body;
use cordon::profile::DEFAULT_LANDLOCK_ABI;

/// One fact and its judgement.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Fact {
    pub name: String,
    pub value: String,
    pub good: bool,
    pub need: String,
}

/// The doctor's findings.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DoctorReport {
    pub engine: EngineInfo,
    pub facts: Vec<Fact>,
    /// What `cordon-probe env-report` printed inside a hardened container.
    pub in_container: serde_json::Value,
    pub ok: bool,
}

fn fact(name: &str, value: impl Into<String>, good: bool, need: &str) -> Fact {
    Fact {
        name: name.to_owned(),
        value: value.into(),
        good,
        need: need.to_owned(),
    }
}

/// Run a hardened container (no init) that reports what the kernel and engine give it.
async fn in_container_report(ctl: &Controller, image_id: &str) -> Result<serde_json::Value> {
    let engine = ctl.engine();
    let owner = Owner::random("doctor");
    let allocation = cordon::storage::new_allocation(engine, &owner, "doctor").await?;
    let body = helper_body(
        image_id,
        &allocation,
        Kind::Probe,
        vec![paths::PROBE.to_owned(), "env-report".to_owned()],
        vec![],
    );
    let mut created = Created::default();
    let result = async {
        let id = cordon::engine::objects::create_container(
            engine,
            &allocation.name(Kind::Probe),
            body,
            &created.shared(),
        )
        .await?;
        let mut launch = cordon::launch::Launch::adopt(id);
        launch.start(engine).await?;
        let code = launch.wait(engine, Duration::from_secs(60)).await?;
        let output = launch.output(engine).await?;
        if code != 0 {
            return Err(Error::Internal(format!(
                "env-report exited {code}: {}",
                output.stderr
            )));
        }
        let line = output.stdout.lines().next().unwrap_or("");
        serde_json::from_str(&line[..line.len().min(MAX_OUTPUT_BYTES)])
            .map_err(|e| Error::Internal(format!("env-report output {line:?}: {e}")))
    }
    .await;
    created.remove_all(engine, Duration::from_secs(30)).await?;
    result
}

/// Examine the engine and a hardened container on it.
pub async fn run(ctl: &Controller, image_id: &str) -> Result<DoctorReport> {
    let engine = ctl.engine();
    let info = engine.info().clone();
    let mut facts = vec![
        fact(
            "engine version",
            &info.version,
            !info.version.is_empty(),
            "any Docker Engine",
        ),
        fact(
            "engine API",
            format!("{} (requests pinned to {})", info.api, engine.api()),
            engine.api() >= MIN_API,
            &format!(">= {MIN_API}"),
        ),
        fact(
            "volume subpath",
            if engine.api() >= SUBPATH_API {
                "supported"
            } else {
                "not supported: profiles that pin directories are refused"
            },
            true,
            &format!("API {SUBPATH_API} for pinned directories (optional)"),
        ),
        fact(
            "storage driver",
            &info.storage_driver,
            !info.storage_driver.is_empty() && info.storage_driver != "vfs",
            "a copy-on-write driver",
        ),
        fact(
            "cgroup version",
            format!("{} ({})", info.cgroup_version, info.cgroup_driver),
            matches!(info.cgroup_version.as_str(), "1" | "2"),
            "1 or 2",
        ),
        fact(
            "daemon seccomp",
            info.security_options.join(" "),
            info.security_options
                .iter()
                .any(|o| o.contains("name=seccomp")),
            "seccomp enabled with a profile",
        ),
        fact("kernel", &info.kernel, true, "Linux with Landlock"),
    ];
    let inside = in_container_report(ctl, image_id).await?;
    let landlock = inside["landlock_abi"].as_u64();
    facts.push(fact(
        "Landlock ABI in a container",
        landlock.map_or_else(|| inside["landlock_abi"].to_string(), |v| v.to_string()),
        landlock.is_some_and(|v| v >= u64::from(DEFAULT_LANDLOCK_ABI)),
        &format!(">= {DEFAULT_LANDLOCK_ABI}"),
    ));
    let seccomp = inside["seccomp"].as_str().unwrap_or("").to_owned();
    facts.push(fact(
        "seccomp mode in a container",
        &seccomp,
        seccomp == "2",
        "2 (filter)",
    ));
    let nnp = inside["no_new_privs"].as_str().unwrap_or("").to_owned();
    facts.push(fact("NoNewPrivs in a container", &nnp, nnp == "1", "1"));
    let caps = inside["cap_eff"].as_str().unwrap_or("").to_owned();
    facts.push(fact(
        "CapEff in a container",
        &caps,
        caps.trim_start_matches('0').is_empty() && !caps.is_empty(),
        "0",
    ));
    let ok = facts.iter().all(|f| f.good);
    Ok(DoctorReport {
        engine: info,
        facts,
        in_container: inside,
        ok,
    })
}

impl DoctorReport {
    /// Plain text.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for f in &self.facts {
            out.push_str(&format!(
                "{:<4} {:<30} {}  (need {})\n",
                if f.good { "ok" } else { "BAD" },
                f.name,
                f.value,
                f.need
            ));
        }
        out.push_str(if self.ok {
            "good enough for cordon\n"
        } else {
            "NOT good enough for cordon\n"
        });
        out
    }
}
