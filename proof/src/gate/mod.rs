//! The gate: a truth table over protections, proven on the real engine.
//!
//! Layer `validator`: the host validator accepts C0 and refuses each C_P naming exactly P.
//! Layer `init`: each C_P is started past the validator on purpose, with cordon-init as PID 1; the
//! init must refuse with exactly P's check id, and in C0 it must attest the policy we wrote and run
//! the workload. Every case removes everything it made; the gate then checks that nothing with its
//! owner label is left.

pub mod cases;
pub mod probe;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cordon_contract::{Id, Phase};
use cordon_fake_vendor::dns::{self, Answer, Entry};
use futures_util::StreamExt;

use cases::{Case, GateEnv, Mutable, StorageVariant, GATE_GITLINK};
use cordon::controller::Controller;
use cordon::error::{Error, Result};
use cordon::labels::{Allocation, Owner};
use cordon::launch::{self, InitVerdict, Prepared};
use cordon::profile::{Area, Limits, Profile, ProfileSpec, DEFAULT_LANDLOCK_ABI};
use cordon::storage::{self, TaskStorage};

/// A layer of the truth table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Layer {
    Validator,
    Init,
    Probe,
}

/// One cell: a case in one layer.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CaseResult {
    pub case: String,
    pub layer: Layer,
    pub removed: Option<Id>,
    pub expected: Vec<String>,
    pub observed: Vec<String>,
    pub pass: bool,
    /// Evidence: the refusal fields, or what went wrong.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub detail: String,
    /// Wall time of the container run this cell came from (one run serves both the validator and
    /// the init layer of a case).
    pub ms: u64,
}

/// The whole table.
#[derive(Debug, Clone, serde::Serialize)]
pub struct GateReport {
    pub cases: Vec<CaseResult>,
    pub passed: usize,
    pub failed: usize,
    /// Objects with the gate's owner label that could not be removed (must be empty).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub leftovers: Vec<String>,
}

impl GateReport {
    /// Every case passed and nothing was left behind.
    pub fn ok(&self) -> bool {
        self.failed == 0 && self.leftovers.is_empty() && !self.cases.is_empty()
    }

    /// A plain-text truth table.
    pub fn table(&self) -> String {
        let width = self
            .cases
            .iter()
            .map(|c| c.case.len())
            .max()
            .unwrap_or(4)
            .max(4);
        let mut out = format!(
            "{:<width$}  {:<9}  {:<28}  {:<28}  result\n",
            "case", "layer", "expected", "observed"
        );
        for c in &self.cases {
            let layer = match c.layer {
                Layer::Validator => "validator",
                Layer::Init => "init",
                Layer::Probe => "probe",
            };
            // Probe rows name operations (`id/probe/action`): show the ids and a count, and the
            // difference when the row fails.
            let show = |v: &[String]| {
                if v.is_empty() {
                    return "-".to_owned();
                }
                if c.layer != Layer::Probe {
                    return v.join(",");
                }
                let mut ids: Vec<&str> = v
                    .iter()
                    .map(|o| o.split('/').next().unwrap_or(""))
                    .collect();
                ids.dedup();
                format!("{} ({} ops)", ids.join(","), v.len())
            };
            out.push_str(&format!(
                "{:<width$}  {:<9}  {:<28}  {:<28}  {}\n",
                c.case,
                layer,
                show(&c.expected),
                show(&c.observed),
                if c.pass { "pass" } else { "FAIL" }
            ));
            if !c.pass && c.layer == Layer::Probe {
                let not_in = |v: &[String], other: &[String]| {
                    let left: Vec<&str> = v
                        .iter()
                        .filter(|e| !other.contains(e))
                        .map(String::as_str)
                        .collect();
                    if left.is_empty() {
                        "-".to_owned()
                    } else {
                        left.join(", ")
                    }
                };
                out.push_str(&format!(
                    "    missing {}\n    unexpected {}\n",
                    not_in(&c.expected, &c.observed),
                    not_in(&c.observed, &c.expected)
                ));
            }
        }
        out.push_str(&format!("{} passed, {} failed\n", self.passed, self.failed));
        for l in &self.leftovers {
            out.push_str(&format!("LEFT BEHIND: {l}\n"));
        }
        out
    }
}

/// Gate options.
#[derive(Debug, Clone)]
pub struct GateOptions {
    /// Cases run at once (they share only read-only storage).
    pub parallel: usize,
    /// Run only cases whose name contains this.
    pub filter: Option<String>,
    /// The production agent image for the `.../agent` rows (a row fails without one).
    pub agent: Option<AgentRef>,
}

/// A built agent image, as the gate runs it.
#[derive(Debug, Clone)]
pub struct AgentRef {
    pub id: String,
    /// Its exec allowlist: the CLI and its ELF interpreter.
    pub exec: Vec<String>,
}

impl From<&cordon::image::agent::AgentImage> for AgentRef {
    fn from(image: &cordon::image::agent::AgentImage) -> AgentRef {
        AgentRef {
            id: image.built.id.clone(),
            exec: image.exec.clone(),
        }
    }
}

impl Default for GateOptions {
    fn default() -> Self {
        GateOptions {
            parallel: 6,
            filter: None,
            agent: None,
        }
    }
}

/// The image a case runs and what may execute in it besides `extra`: the agent image and its
/// allowlist for the `.../agent` rows, else the test image and the vendor CLI.
fn case_image(case: &Case, env: &GateEnv, extra: &[String]) -> Result<(String, Vec<String>)> {
    if !case.agent {
        let mut exec = extra.to_vec();
        exec.push(case.vendor.cli_path().to_owned());
        return Ok((env.test_image.clone(), exec));
    }
    let agent = env.agent.as_ref().ok_or_else(|| {
        Error::Invalid(format!(
            "{} runs the production agent image, and the gate was given none",
            case.name
        ))
    })?;
    let mut exec = extra.to_vec();
    exec.extend(agent.exec.iter().cloned());
    Ok((agent.id.clone(), exec))
}

/// Small areas for the probe layer: its fills write each one to the limit.
fn probe_limits() -> Limits {
    const MIB: u64 = 1024 * 1024;
    let area = Area {
        bytes: 8 * MIB,
        inodes: 128,
    };
    Limits {
        pids: 64,
        memory_bytes: 256 * MIB,
        tmp: area,
        home: area,
        output: area,
        codex_home: area,
        deadline: Duration::from_secs(120),
        grace: Duration::from_secs(1),
        ..Limits::default()
    }
}

/// The probe layer's storage: small, private to the case, seeded with the probe fixture.
const PROBE_WORK: Area = Area {
    bytes: 16 * 1024 * 1024,
    inodes: 256,
};
const PROBE_METADATA: Area = Area {
    bytes: 4 * 1024 * 1024,
    inodes: 64,
};

/// The probe layer's storage: seeded by the task seeder from the fixture repository, except where
/// the case is about content the seeder refuses or never makes (a hostile repository, metadata
/// inside the tree), which is uploaded into the keeper as a fixture directly.
enum ProbeStorage {
    Seeded(Box<(cordon::task::StorageHandle, TaskStorage)>),
    Uploaded(Box<TaskStorage>),
}

impl ProbeStorage {
    fn storage(&self) -> &TaskStorage {
        match self {
            ProbeStorage::Seeded(seeded) => &seeded.1,
            ProbeStorage::Uploaded(s) => s,
        }
    }

    /// The handle of storage seeded from the fixture repository (not of uploaded storage).
    fn handle(&self) -> Option<&cordon::task::StorageHandle> {
        match self {
            ProbeStorage::Seeded(seeded) => Some(&seeded.0),
            ProbeStorage::Uploaded(_) => None,
        }
    }

    async fn remove(&self, ctl: &Controller) -> Result<()> {
        match self {
            ProbeStorage::Seeded(seeded) => cordon::task::remove(ctl, &seeded.0).await,
            ProbeStorage::Uploaded(storage) => storage.remove(ctl.engine()).await,
        }
    }
}

async fn probe_storage(
    ctl: &Controller,
    owner: &Owner,
    image_id: &str,
    case: &Case,
    env: &GateEnv,
) -> Result<ProbeStorage> {
    let engine = ctl.engine();
    if !case.hostile && !case.metadata_in_work {
        let request = cordon::task::PrepareRequest {
            repo: env.fixture_repo.clone(),
            head: "HEAD".to_owned(),
            owner: owner.clone(),
            attempt: "gate".to_owned(),
            allocation: None,
            work: PROBE_WORK,
            deadline: Duration::from_secs(120),
            uids: cordon::uids::UidRange::default(),
            shared: false,
        };
        let variant = case.storage;
        let handle = cordon::task::prepare_with(
            &ctl.clone().with_helper_image(image_id),
            &request,
            |w| drop_volume_option(w, variant),
            &|_| {},
        )
        .await?;
        let storage = handle.storage()?;
        return Ok(ProbeStorage::Seeded(Box::new((handle, storage))));
    }
    let allocation = cordon::storage::new_allocation(engine, owner, "gate").await?;
    let (mut work, metadata) =
        storage::task_volume_requests(&allocation, PROBE_WORK, PROBE_METADATA);
    drop_volume_option(&mut work, case.storage);
    let held_at = if case.metadata_in_work {
        "/run/cordon/metadata"
    } else {
        cordon_contract::paths::METADATA
    };
    let storage = TaskStorage::create_held_at(
        engine,
        &allocation,
        image_id,
        (work, PROBE_WORK),
        (metadata, PROBE_METADATA),
        held_at,
    )
    .await?;
    let seeded = async {
        storage
            .upload(
                engine,
                cordon_contract::paths::WORK,
                probe::work_tar(case.hostile, case.metadata_in_work, allocation.uid.get())?,
            )
            .await?;
        if !case.metadata_in_work {
            storage
                .upload(
                    engine,
                    cordon_contract::paths::METADATA,
                    probe::metadata_tar(allocation.uid.get())?,
                )
                .await?;
        }
        Ok::<_, Error>(())
    }
    .await;
    if let Err(e) = seeded {
        storage.remove(engine).await?;
        return Err(e);
    }
    Ok(ProbeStorage::Uploaded(Box::new(storage)))
}

/// Apply a case's removal to what a launch will create.
fn remove(case: &Case, prepared: &mut Prepared, env: &GateEnv) {
    (case.mutate)(
        &mut Mutable {
            create: &mut prepared.plan.create,
            policy: &mut prepared.plan.policy,
            volumes: &mut prepared.volumes,
            egress: prepared.egress.as_mut(),
        },
        env,
    );
}

/// The names of the egress cases: the allowed (mapped) one, an unlisted one the proxy maps too,
/// an allowed one the test DNS server answers with the endpoint's private address, an allowed one
/// it answers only with a CNAME to an unlisted name (`CNAME_TARGET`, which it answers with the
/// endpoint's private address).
const UNLISTED_HOST: &str = "other.vendor.test";
const PRIVATE_HOST: &str = "private.vendor.test";
const CNAME_HOST: &str = "cname.vendor.test";
const CNAME_TARGET: &str = "target.elsewhere.test";
/// A port the allowlist names, but not for the vendor's name.
const OTHER_PORT: u16 = 8443;
/// The vendor host the proxy terminates in every case with egress (the fake vendor behind it
/// takes only the run's key), and its request budget there.
const TERMINATED_HOST: &str = "api.claude.test";
const TERMINATED_MAX_REQUESTS: u64 = 8;

/// A case's egress: the proxy on an internal network (no route off the machine), the fake vendor
/// and the DNS server beside it, and the rule the case leaves out.
fn case_egress(case: &Case) -> Option<cordon::profile::EgressSpec> {
    let vendor = cordon_contract::probe::fixture::VENDOR_HOST;
    case.egress.then(|| cordon::profile::EgressSpec {
        internal: true,
        skip: match probe::mode(case) {
            probe::Mode::ProxySkipping(id) => vec![id],
            _ => vec![],
        },
        ..cordon::profile::EgressSpec::allowing(&[
            vendor.to_owned(),
            PRIVATE_HOST.to_owned(),
            format!("{PRIVATE_HOST}:{OTHER_PORT}"),
            CNAME_HOST.to_owned(),
            TERMINATED_HOST.to_owned(),
            format!("{TERMINATED_HOST}:{OTHER_PORT}"),
        ])
    })
}

fn case_fixtures(env: &GateEnv) -> launch::egress::Fixtures {
    launch::egress::Fixtures {
        cert_pem: env.vendor_ca.cert_pem.clone(),
        key_pem: env.vendor_ca.key_pem.clone(),
        mapped: vec![
            cordon_contract::probe::fixture::VENDOR_HOST.to_owned(),
            UNLISTED_HOST.to_owned(),
            TERMINATED_HOST.to_owned(),
        ],
        dns: Some(case_dns),
        // The fake vendor is only in the test image.
        image: Some(env.test_image.clone()),
        api_key_sha256: Some(cordon_fake_vendor::tls::Auth::hex_of(env.key.as_str())),
    }
}

/// The custody of the run's key for a probe case with egress: the proxy terminates
/// `TERMINATED_HOST`, trusting the test CA upstream, with a small request budget.
fn case_custody(env: &GateEnv) -> Result<cordon::custody::Custody> {
    cordon::custody::Custody::new(
        &env.key.credential()?,
        TERMINATED_HOST,
        443,
        Some(&env.vendor_ca.ca_pem),
        cordon_egress::vendor::Budget {
            requests: TERMINATED_MAX_REQUESTS,
            ..Default::default()
        },
        std::time::SystemTime::now() + Duration::from_secs(600),
    )
}

/// What the egress probe is told about the terminated host.
fn terminated_fixture() -> cordon_contract::egress::TerminatedFixture {
    cordon_contract::egress::TerminatedFixture {
        host: TERMINATED_HOST.to_owned(),
        port: 443,
        other_port: OTHER_PORT,
        ca_file: cordon::custody::AGENT_CA_FILE.to_owned(),
        variable: cordon::custody::CredentialKind::ApiKey
            .variable()
            .to_owned(),
        header: "x-api-key".to_owned(),
        max_requests: TERMINATED_MAX_REQUESTS,
    }
}

/// What the test DNS server answers, the fake vendor at `vendor`: `PRIVATE_HOST` with the
/// vendor's address (the proxy resolves it: only its address check stands between it and the
/// endpoint); `CNAME_HOST` with only `CNAME_HOST CNAME CNAME_TARGET` (the target's records left
/// out), and `CNAME_TARGET` with the vendor's address: only the chain rule stands between
/// `CNAME_HOST` and the endpoint.
fn case_dns(vendor: IpAddr) -> Vec<String> {
    let at = || Answer::Addresses(vec![vendor]);
    let only_the_cname = Answer::Raw(vec![Entry::Cname {
        owner: CNAME_HOST.to_owned(),
        target: CNAME_TARGET.to_owned(),
    }]);
    dns::Script::new()
        .answer(PRIVATE_HOST, at())
        .answer(CNAME_HOST, only_the_cname)
        .answer(CNAME_TARGET, at())
        .to_args()
}

/// The egress probe's input files, once the proxy runs and every address is known.
fn probe_inputs(egress: &launch::egress::Egress, env: &GateEnv) -> Result<Vec<(String, Vec<u8>)>> {
    let missing = |what: &str| Error::Internal(format!("the egress case has no {what} address"));
    let fixture = cordon_contract::egress::ProbeFixture {
        allowed: cordon_contract::probe::fixture::VENDOR_HOST.to_owned(),
        port: 443,
        unlisted: UNLISTED_HOST.to_owned(),
        other_port: OTHER_PORT,
        private_name: PRIVATE_HOST.to_owned(),
        cname_name: CNAME_HOST.to_owned(),
        gateway: egress.gateway.ok_or_else(|| missing("gateway"))?,
        proxy: egress.proxy_ip.ok_or_else(|| missing("proxy"))?,
        endpoint: egress.vendor.ok_or_else(|| missing("endpoint"))?,
        endpoint_port: cordon::profile::egress::VENDOR_PORT,
        terminated: Some(terminated_fixture()),
    };
    Ok(vec![
        (
            cordon_contract::egress::PROBE_FIXTURE.to_owned(),
            serde_json::to_vec(&fixture).map_err(|e| Error::Internal(e.to_string()))?,
        ),
        (
            cordon_contract::egress::PROBE_CA.to_owned(),
            env.vendor_ca.ca_pem.clone().into_bytes(),
        ),
    ])
}

/// What the proxy's attestation must say it skipped: exactly the case's rule, or nothing.
fn check_proxy_attestation(
    case: &Case,
    launch: &launch::Launch,
) -> std::result::Result<(), String> {
    let Some(egress) = &launch.egress else {
        return Ok(());
    };
    let want: Vec<String> = match probe::mode(case) {
        probe::Mode::ProxySkipping(id) => cordon_contract::egress::rule_name(id)
            .map(|n| vec![n.to_owned()])
            .unwrap_or_default(),
        _ => vec![],
    };
    match &egress.attestation {
        Some(a) if a.skipped == want => Ok(()),
        Some(a) => Err(format!(
            "the proxy attested skipping {:?}, not {want:?}",
            a.skipped
        )),
        None => Err("the proxy never attested".to_owned()),
    }
}

/// The probe layer of a case: its own storage, cordon-probe as the agent.
async fn run_probe_case(
    ctl: &Controller,
    owner: &Owner,
    image_id: &str,
    env: &GateEnv,
    case: &Case,
) -> CaseResult {
    let engine = ctl.engine();
    let started = std::time::Instant::now();
    let expected: Vec<String> = probe::expected(case).into_iter().collect();
    let row = |observed: Vec<String>, detail: String| CaseResult {
        case: case.name.clone(),
        layer: Layer::Probe,
        removed: case.removed,
        pass: observed == expected,
        expected: expected.clone(),
        observed,
        detail,
        ms: started.elapsed().as_millis() as u64,
    };
    let storage = match probe_storage(ctl, owner, image_id, case, env).await {
        Ok(s) => s,
        Err(e) => return row(vec![format!("error: {e}")], e.to_string()),
    };
    let run = async {
        let (profile, prepared) = probe_plan(ctl, owner, image_id, env, case, &storage).await?;
        let mut launch = launch::create(ctl, &profile, prepared).await?;
        let ran = run_probes(engine, env, case, &profile, &mut launch).await;
        launch.finish(engine).await?;
        ran
    }
    .await;
    let removed = storage.remove(ctl).await;
    match (run, removed) {
        (Ok((code, output)), Ok(())) => {
            let observed: Vec<String> = probe::observed(&output.stdout).into_iter().collect();
            let clean = observed.is_empty();
            let detail = if clean != (code == 0) {
                format!(
                    "exit {code} does not match the reports; stderr {:?}",
                    output.stderr.chars().take(600).collect::<String>()
                )
            } else if observed != expected {
                format!(
                    "exit {code}; stderr {:?}",
                    output.stderr.chars().take(600).collect::<String>()
                )
            } else {
                String::new()
            };
            let mut r = row(observed, detail);
            r.pass &= clean == (code == 0);
            r
        }
        (Err(e), _) | (_, Err(e)) => row(vec![format!("error: {e}")], e.to_string()),
    }
}

/// What the probe layer of a case launches: the production profile over the case's storage with
/// cordon-probe as the workload, and the case's removal applied as its mode says.
async fn probe_plan(
    ctl: &Controller,
    owner: &Owner,
    image_id: &str,
    env: &GateEnv,
    case: &Case,
    storage: &ProbeStorage,
) -> Result<(Profile, Prepared)> {
    let allocation = Allocation::new(owner, "gate", storage.storage().allocation.uid)?;
    let probe_path = cordon_contract::paths::PROBE.to_owned();
    let uid = allocation.uid;
    // The probe runs alone in the test image; in the agent image beside the CLI and its
    // interpreter, as the agent would.
    let (case_image_id, mut exec) = if case.agent {
        case_image(case, env, std::slice::from_ref(&probe_path))?
    } else {
        (image_id.to_owned(), vec![probe_path.clone()])
    };
    if case.commands {
        exec.push(cordon_contract::command::MCP_SERVER.to_owned());
    }
    // A gitlink case probes a checked tree: its masks and pins are the check's.
    let masks = if case.gitlinks {
        checked_masks(ctl, image_id, storage, case.phase).await?
    } else {
        cordon::audit::Masks::default()
    };
    // Something in the input dir for the probes to try to map executable.
    let mut input_files = vec![("note.txt".to_owned(), b"probe input\n".to_vec())];
    let mut agent_env = vec![];
    let mut egress = case_egress(case);
    // With egress the agent holds a sentinel and the proxy the run's key, as an invocation's.
    let custody = match egress.as_mut() {
        Some(spec) => {
            let custody = case_custody(env)?;
            spec.terminate = Some(custody.termination());
            agent_env.push(custody.agent_env());
            input_files.push((
                cordon::custody::AGENT_CA_FILE.to_owned(),
                custody.ca_pem().as_bytes().to_vec(),
            ));
            Some(custody)
        }
        None => None,
    };
    let profile = Profile::new(ProfileSpec {
        phase: case.phase,
        vendor: case.vendor,
        image_id: case_image_id,
        storage: storage.storage().mounts_for(&allocation),
        allocation,
        limits: probe_limits(),
        command: vec![probe_path.clone(), "all".to_owned()],
        exec,
        env: agent_env,
        gitlinks: masks.gitlinks,
        pins: masks.pins,
        pin_mounts: false,
        input_files,
        landlock_abi: DEFAULT_LANDLOCK_ABI,
        egress,
    })?;
    let profile = role_profile(case, env, profile, &[&probe_path, "all"])?;
    let mut prepared = Prepared::new(ctl.engine(), &profile)?;
    add_commands_volume(case, &profile, &mut prepared);
    if let Some(plan) = prepared.egress.as_mut() {
        plan.fixtures = Some(case_fixtures(env));
    }
    if let Some(custody) = &custody {
        prepared.vault = Some(custody.vault().tar(uid.proxy())?);
    }
    apply_probe_mode(case, &mut prepared, env, uid, probe_path);
    Ok((profile, prepared))
}

/// The case's removal as the probe layer meets it: none (under the full init, or a proxy rule
/// left out), the init told to leave the protection out (and the removal applied too for a row
/// under the init), or no init at all, the probe starting as the workload would be.
fn apply_probe_mode(
    case: &Case,
    prepared: &mut Prepared,
    env: &GateEnv,
    uid: cordon::uids::Uid,
    probe_path: String,
) {
    match probe::mode(case) {
        probe::Mode::Init => {}
        probe::Mode::ProxySkipping(_) => {}
        probe::Mode::InitSkipping(id) => {
            prepared.plan.policy.skip = vec![id];
            if case.under_init {
                remove(case, prepared, env);
            }
        }
        probe::Mode::WithoutInit => {
            // Without the init the probe is the workload from the start: it runs as the ids
            // the init would switch to, holding nothing the init would drop.
            prepared.plan.create.user = Some(format!("{uid}:{uid}"));
            if let Some(host) = prepared.plan.create.host_config.as_mut() {
                host.cap_add = None;
            }
            remove(case, prepared, env);
            prepared.plan.create.entrypoint = Some(vec![
                probe_path,
                "all".to_owned(),
                "--without-init".to_owned(),
            ]);
        }
    }
}

/// Run the probes of a created launch: the proxy first in a case with egress (its addresses
/// become the egress probe's inputs), then the container to its end; its exit code and output,
/// once the proxy's attestation is what the case wants.
async fn run_probes(
    engine: &cordon::Engine,
    env: &GateEnv,
    case: &Case,
    profile: &Profile,
    launch: &mut launch::Launch,
) -> Result<(i64, launch::Output)> {
    // Started past the validator on purpose (a container-level case's removal is in
    // the read-back); the probes are what this layer judges.
    launch.start_proxy(engine).await?;
    if let Some(egress) = &launch.egress {
        let extra = probe_inputs(egress, env)?;
        launch.add_inputs(profile.input_files(), &extra)?;
    }
    launch.start(engine).await?;
    let code = launch.wait(engine, Duration::from_secs(150)).await?;
    let output = launch.output(engine).await?;
    check_proxy_attestation(case, launch).map_err(Error::Internal)?;
    Ok((code, output))
}

fn gate_limits() -> Limits {
    Limits {
        pids: 64,
        memory_bytes: 256 * 1024 * 1024,
        deadline: Duration::from_secs(30),
        grace: Duration::from_secs(1),
        ..Limits::default()
    }
}

/// Remove the work volume's `size` or `nr_inodes` for the storage variants that lack one.
fn drop_volume_option(work: &mut bollard::models::VolumeCreateRequest, variant: StorageVariant) {
    let drop_key = match variant {
        StorageVariant::Normal | StorageVariant::SharedUid => return,
        StorageVariant::WorkNoSize => "size",
        StorageVariant::WorkNoInodes => "nr_inodes",
    };
    if let Some(o) = work.driver_opts.as_mut().and_then(|opts| opts.get_mut("o")) {
        *o = o
            .split(',')
            .filter(|p| !p.starts_with(&format!("{drop_key}=")))
            .collect::<Vec<_>>()
            .join(",");
    }
}

async fn make_storage(
    ctl: &Controller,
    owner: &Owner,
    image_id: &str,
    variant: StorageVariant,
) -> Result<TaskStorage> {
    let engine = ctl.engine();
    let allocation = cordon::storage::new_allocation(engine, owner, "gate").await?;
    let (mut work, metadata) = storage::task_volume_requests(
        &allocation,
        storage::DEFAULT_WORK,
        storage::DEFAULT_METADATA,
    );
    drop_volume_option(&mut work, variant);
    let made = TaskStorage::create_from(
        engine,
        &allocation,
        image_id,
        (work, storage::DEFAULT_WORK),
        (metadata, storage::DEFAULT_METADATA),
    )
    .await?;
    if variant == StorageVariant::SharedUid {
        // Another allocation's work volume with the same uid (made after the storage, which
        // checks its uid right after its first create).
        let other = Allocation {
            id: uuid::Uuid::new_v4(),
            ..allocation.clone()
        };
        let (decoy, _) = storage::task_volume_requests(&other, PROBE_WORK, PROBE_METADATA);
        let mut created = cordon::engine::pending::Created::default();
        let decoy = cordon::engine::objects::create_volume(engine, decoy, &created.shared()).await;
        if let Err(e) = decoy {
            made.remove(engine).await?;
            return Err(e);
        }
        return Ok(made.with_extra(created));
    }
    Ok(made)
}

fn ids(list: &[Id]) -> Vec<String> {
    list.iter().map(|i| i.as_str().to_owned()).collect()
}

/// Run one case in its layers.
async fn run_case(
    ctl: &Controller,
    owner: &Owner,
    image_id: &str,
    storage: &TaskStorage,
    env: &GateEnv,
    case: &Case,
) -> Vec<CaseResult> {
    if case.removed == Some(Id::TreeCheck) {
        return vec![Box::pin(run_capability_case(ctl, owner, image_id, env, case)).await];
    }
    if case.removed == Some(Id::RelayContainer) {
        return vec![run_relay_case(ctl, owner, image_id, storage, case).await];
    }
    let mut results = Vec::new();
    if case.validator || case.init {
        // Boxed: a case's future is large (the launch, its egress, the probes' fixtures), and the
        // gate may run on a thread with a small stack (a test's).
        results.extend(Box::pin(run_validator_init(ctl, owner, storage, env, case)).await);
    }
    if case.probe {
        results.push(Box::pin(run_probe_case(ctl, owner, image_id, env, case)).await);
    }
    results
}

/// A tree-check row: an execute start over checked storage presents the check altered (the
/// gate's gitlink dropped from its masks) or a second time, after a start redeemed it. The start
/// must refuse with `tree-check` before it makes anything.
async fn run_capability_case(
    ctl: &Controller,
    owner: &Owner,
    image_id: &str,
    env: &GateEnv,
    case: &Case,
) -> CaseResult {
    let started = std::time::Instant::now();
    let expected = vec![Id::TreeCheck.as_str().to_owned()];
    let row = |observed: Vec<String>, detail: String| CaseResult {
        case: case.name.clone(),
        layer: Layer::Validator,
        removed: case.removed,
        pass: observed == expected,
        expected: expected.clone(),
        observed,
        detail,
        ms: started.elapsed().as_millis() as u64,
    };
    let storage = match probe_storage(ctl, owner, image_id, case, env).await {
        Ok(s) => s,
        Err(e) => return row(vec![format!("error: {e}")], e.to_string()),
    };
    let run = async {
        let (handle, check) = check_seeded(ctl, image_id, &storage).await?;
        let start = |check: cordon::audit::TreeCheck| async move {
            let request = cordon::invoke::Request {
                phase: case.phase,
                vendor: case.vendor,
                prompt: "hello".to_owned(),
                schema: None,
                referenced_code_hash: "gate".to_owned(),
                deadline: std::time::Instant::now() + Duration::from_secs(60),
                network_allowlist: vec![],
                attempt: format!("gate-{}", uuid::Uuid::new_v4().simple()),
                storage: handle.clone(),
                tree_check: Some(check),
            };
            let captured = cordon::invoke::capture(ctl, request)?;
            let options =
                cordon::invoke::Options::new(cordon::invoke::ImageSource::Id(image_id.to_owned()));
            cordon::invoke::start(ctl, captured, None, options).await
        };
        let presented = if case.facet == Some("forged") {
            let mut forged = check;
            forged.gitlinks.retain(|g| g != GATE_GITLINK);
            forged.pins = cordon_contract::tree::pins_of(&forged.gitlinks);
            forged
        } else {
            // The first start redeems it and runs; the second presents it again.
            let first = start(check.clone()).await?.settled().await;
            if first.answer.is_none() {
                return Err(Error::Internal(format!(
                    "the first start over a checked tree did not answer: {:?}",
                    first.failure
                )));
            }
            check
        };
        Ok::<_, Error>(match start(presented).await {
            Ok(breach) => {
                let settled = breach.settled().await;
                (
                    vec!["started".to_owned()],
                    format!("the start took the check: {:?}", settled.exit_code),
                )
            }
            Err(e) => (vec![e.id().to_owned()], e.to_string()),
        })
    }
    .await;
    let removed = storage.remove(ctl).await;
    match (run, removed) {
        (Ok((observed, detail)), Ok(())) => row(observed, detail),
        (Err(e), _) | (_, Err(e)) => row(vec![format!("error: {e}")], e.to_string()),
    }
}

/// The relay row: the approved commands' relay made by the dispatcher's own code must read back
/// clean, and made with its root writable must be refused with exactly `relay-container` before
/// it starts; both are removed.
async fn run_relay_case(
    ctl: &Controller,
    owner: &Owner,
    image_id: &str,
    storage: &TaskStorage,
    case: &Case,
) -> CaseResult {
    let engine = ctl.engine();
    let started = std::time::Instant::now();
    let expected = vec![Id::RelayContainer.as_str().to_owned()];
    let attempt = |edit: Option<fn(&mut bollard::models::ContainerCreateBody)>| async move {
        let allocation = Allocation::new(owner, "gate", storage.allocation.uid)?;
        let mut created = cordon::engine::pending::Created::default();
        let made =
            cordon::command::relay::create(engine, &allocation, image_id, edit, &created.shared())
                .await;
        created.remove_all(engine, Duration::from_secs(30)).await?;
        Ok::<_, Error>(match made {
            Ok(_) => vec![],
            Err(Error::Refused(refusals)) => refusals,
            Err(e) => return Err(e),
        })
    };
    let run = async {
        let clean = attempt(None).await?;
        let edited = attempt(Some(|body| {
            if let Some(host) = body.host_config.as_mut() {
                host.readonly_rootfs = Some(false);
            }
        }))
        .await?;
        // A refusal of the relay as planned is a failure of this row too.
        let mut observed: Vec<String> = clean
            .iter()
            .map(|r| format!("as planned: {}", r.id))
            .collect();
        observed.extend(ids(&cordon::validate::ids(&edited)));
        let detail = clean
            .iter()
            .chain(&edited)
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ");
        Ok::<_, Error>((observed, detail))
    };
    let (observed, detail) = match run.await {
        Ok(r) => r,
        Err(e) => (vec![format!("error: {e}")], e.to_string()),
    };
    CaseResult {
        case: case.name.clone(),
        layer: Layer::Validator,
        removed: case.removed,
        pass: observed == expected,
        expected,
        observed,
        detail,
        ms: started.elapsed().as_millis() as u64,
    }
}

/// The tree check of a case's storage, seeded from the fixture repository, at its head.
async fn check_seeded<'s>(
    ctl: &Controller,
    image_id: &str,
    storage: &'s ProbeStorage,
) -> Result<(&'s cordon::task::StorageHandle, cordon::audit::TreeCheck)> {
    let handle = storage.handle().ok_or_else(|| {
        Error::Internal("a checked case's storage is seeded from a repository".into())
    })?;
    let ctl = ctl.clone().with_helper_image(image_id);
    let check = ctl
        .task(handle)?
        .check_tree(&[], cordon::audit::DEFAULT_DEADLINE)
        .await?;
    Ok((handle, check))
}

/// The masks and pins of the tree check of a case's seeded storage, redeemed as an execute start
/// would.
async fn checked_masks(
    ctl: &Controller,
    image_id: &str,
    storage: &ProbeStorage,
    phase: Phase,
) -> Result<cordon::audit::Masks> {
    let (handle, check) = check_seeded(ctl, image_id, storage).await?;
    cordon::audit::redeem(ctl, phase, Some(&check), handle)
}

/// The gitlinks a case's storage has (the gate's one gitlink, or none).
fn case_gitlinks(case: &Case) -> Vec<String> {
    if case.gitlinks {
        vec![GATE_GITLINK.to_owned()]
    } else {
        vec![]
    }
}

/// The production profile a case starts from: the vendor CLI's `--version` (the test image's
/// fake, or the agent image's real CLI) over the gate's storage, with the gate's gitlink when the
/// case asks for one.
fn case_profile(
    owner: &Owner,
    env: &GateEnv,
    storage: &TaskStorage,
    case: &Case,
) -> Result<Profile> {
    let allocation = Allocation::new(owner, "gate", storage.allocation.uid)?;
    let cli = case.vendor.cli_path().to_owned();
    let (image_id, mut exec) = case_image(case, env, &[])?;
    if case.commands {
        exec.push(cordon_contract::command::MCP_SERVER.to_owned());
    }
    let profile = Profile::new(ProfileSpec {
        phase: case.phase,
        vendor: case.vendor,
        image_id,
        storage: storage.mounts_for(&allocation),
        allocation,
        limits: gate_limits(),
        command: vec![cli, "--version".to_owned()],
        exec,
        env: vec![],
        pins: cordon_contract::tree::pins_of(&case_gitlinks(case)),
        gitlinks: case_gitlinks(case),
        pin_mounts: false,
        input_files: vec![],
        landlock_abi: DEFAULT_LANDLOCK_ABI,
        egress: case_egress(case),
    })?;
    role_profile(
        case,
        env,
        profile,
        &[cordon_contract::paths::PROBE, "workload", "command-check"],
    )
}

/// The profile a case launches: the agent's (offered approved commands when the case asks), or,
/// in a command's case, one approved command's derived from it as the dispatcher derives it:
/// cordon-probe running `argv`'s workload from the test image.
fn role_profile(case: &Case, env: &GateEnv, agent: Profile, argv: &[&str]) -> Result<Profile> {
    let Some(writes) = case.command else {
        return with_commands(case, agent);
    };
    let command = cordon_contract::command::ApprovedCommand {
        name: "gate".to_owned(),
        description: "the gate's command".to_owned(),
        argv: argv.iter().map(|a| (*a).to_owned()).collect(),
        image: env.test_image.clone(),
        env: vec![],
        workdir: cordon_contract::paths::WORK.to_owned(),
        deadline_secs: 60,
        output_bytes: 64 * 1024,
        scratch: cordon_contract::command::Scratch {
            bytes: 8 * 1024 * 1024,
            inodes: 128,
        },
        runs: 1,
        writes,
    };
    Profile::command_of(
        &agent,
        agent.allocation().clone(),
        &command,
        (&env.test_image, &[]),
        cordon_contract::paths::PROBE,
        Duration::from_secs(60),
    )
}

/// The profile offered approved commands when the case asks for them (the relay's socket dir,
/// which an invocation's relay makes, is made with the case's other volumes).
fn with_commands(case: &Case, profile: Profile) -> Result<Profile> {
    if case.commands {
        profile.offering_commands()
    } else {
        Ok(profile)
    }
}

/// The commands volume of a case that offers commands, made and removed with its launch.
fn add_commands_volume(case: &Case, profile: &Profile, prepared: &mut Prepared) {
    if case.commands {
        prepared.volumes.insert(
            cordon::labels::Kind::Commands,
            cordon::profile::commands_volume(profile.allocation()).request(),
        );
    }
}

/// The validator and init layers of a case: one container, read back, then started.
async fn run_validator_init(
    ctl: &Controller,
    owner: &Owner,
    storage: &TaskStorage,
    env: &GateEnv,
    case: &Case,
) -> Vec<CaseResult> {
    let engine = ctl.engine();
    let started = std::time::Instant::now();
    let expected: Vec<String> = case
        .removed
        .map(|id| vec![id.as_str().to_owned()])
        .unwrap_or_default();
    let result = |layer: Layer, observed: Vec<String>, detail: String| {
        let pass = observed == expected;
        CaseResult {
            case: case.name.clone(),
            layer,
            removed: case.removed,
            expected: expected.clone(),
            observed,
            pass,
            detail,
            ms: started.elapsed().as_millis() as u64,
        }
    };
    let failed_all = |e: String| {
        let mut out = Vec::new();
        if case.validator {
            out.push(result(
                Layer::Validator,
                vec![format!("error: {e}")],
                e.clone(),
            ));
        }
        if case.init {
            out.push(result(Layer::Init, vec![format!("error: {e}")], e.clone()));
        }
        out
    };
    let created = async {
        let profile = case_profile(owner, env, storage, case)?;
        let mut prepared = Prepared::new(engine, &profile)?;
        add_commands_volume(case, &profile, &mut prepared);
        if let Some(plan) = prepared.egress.as_mut() {
            plan.fixtures = Some(case_fixtures(env));
        }
        remove(case, &mut prepared, env);
        launch::create(ctl, &profile, prepared).await
    };
    let mut launch = match created.await {
        Ok(l) => l,
        Err(e) => return failed_all(e.to_string()),
    };
    let mut results = Vec::new();
    if case.validator {
        let detail = launch
            .refusals
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ");
        results.push(result(
            Layer::Validator,
            ids(&cordon::validate::ids(&launch.refusals)),
            detail,
        ));
    }
    if case.init {
        let run = async {
            launch.start(engine).await?;
            let code = launch.wait(engine, Duration::from_secs(60)).await?;
            let output = launch.output(engine).await?;
            Ok::<_, Error>((code, output))
        }
        .await;
        let cell = match run {
            Err(e) => result(Layer::Init, vec![format!("error: {e}")], e.to_string()),
            Ok((code, output)) => {
                let (observed, detail) =
                    init_observed(case, code, &output, launch.verdict(&output));
                result(Layer::Init, observed, detail)
            }
        };
        results.push(cell);
    }
    if let Err(e) = launch.finish(engine).await {
        for r in &mut results {
            r.pass = false;
            r.detail = format!("{}; cleanup: {e}", r.detail);
        }
    }
    results
}

/// What the init layer observed of a started case, and the evidence: the check it refused with;
/// nothing for an attestation of the policy we wrote whose workload (the CLI's `--version`, or a
/// command's `command-check`, which ran what it copied into its scratch) ran and exited 0;
/// anything else named for what it was.
fn init_observed(
    case: &Case,
    code: i64,
    output: &launch::Output,
    verdict: InitVerdict,
) -> (Vec<String>, String) {
    match verdict {
        InitVerdict::Refused {
            check,
            expected,
            observed,
        } => (
            vec![check.as_str().to_owned()],
            format!("exit {code}; expected {expected}; observed {observed}"),
        ),
        InitVerdict::Attested { digest_matches, .. } => {
            let ran = if case.command.is_some() {
                output.stdout.contains(r#""tmp_exec_exit":7"#)
            } else {
                output.stdout.contains("Claude Code")
            };
            if code == 0 && digest_matches && ran {
                (vec![], format!("attested, workload exit {code}"))
            } else {
                (
                    vec![format!(
                        "attested-but-exit-{code}-digest-{digest_matches}-ran-{ran}"
                    )],
                    format!("stdout {:?} stderr {:?}", output.stdout, output.stderr),
                )
            }
        }
        other => (
            vec![format!("no-verdict (exit {code})")],
            format!("{other:?}"),
        ),
    }
}

/// Where a gate run is: sent as each case starts and as it finishes (cases run in parallel).
#[derive(Debug, Clone, Copy)]
pub struct GateProgress<'a> {
    /// Cases finished so far.
    pub done: usize,
    /// Cases selected.
    pub total: usize,
    /// The case that just started, or just finished.
    pub case: &'a str,
    pub finished: bool,
}

/// Run the gate against `image_id` (the test image).
pub async fn run(ctl: &Controller, image_id: &str, options: &GateOptions) -> Result<GateReport> {
    run_with_progress(ctl, image_id, options, &|_| {}).await
}

/// [`run`], telling `progress` as each case starts and finishes.
pub async fn run_with_progress(
    ctl: &Controller,
    image_id: &str,
    options: &GateOptions,
    progress: &(dyn Fn(GateProgress<'_>) + Sync),
) -> Result<GateReport> {
    let engine = ctl.engine();
    let owner = Owner::random("gate");
    // Made first: a CA that cannot be made leaves nothing behind.
    let vendor_ca = cordon_fake_vendor::ca::generate(&[
        cordon_contract::probe::fixture::VENDOR_HOST,
        TERMINATED_HOST,
    ])
    .map_err(|e| Error::Internal(format!("the gate's test CA: {e}")))?;
    let host_dir = std::env::temp_dir().join(format!("cordon-gate-{}", owner.as_str()));
    std::fs::create_dir(&host_dir)
        .map_err(|e| Error::io(format!("creating {}", host_dir.display()), e))?;
    let fixture_repo = std::env::temp_dir().join(format!("cordon-gate-fixture-{}", owner.as_str()));
    let env = GateEnv {
        socket: engine.info().socket.clone(),
        host_dir: host_dir.to_string_lossy().into_owned(),
        fixture_repo: fixture_repo.clone(),
        vendor_ca,
        test_image: image_id.to_owned(),
        agent: options.agent.clone(),
        key: cases::GateKey::random(),
    };
    let result = match probe::fixture_repository(&fixture_repo) {
        Ok(()) => run_owned(ctl, image_id, options, &owner, &env, progress).await,
        Err(e) => Err(e),
    };
    let _ = std::fs::remove_dir(&host_dir);
    let _ = std::fs::remove_dir_all(&fixture_repo);
    let leftovers = match cordon::engine::objects::list_owned(engine, &owner).await {
        Ok(owned) => owned.described(),
        Err(e) => vec![format!("could not list leftovers: {e}")],
    };
    if !leftovers.is_empty() {
        let _ = cordon::engine::pending::remove_owned(engine, &owner).await;
    }
    let mut report = result?;
    report.leftovers = leftovers;
    Ok(report)
}

async fn run_owned(
    ctl: &Controller,
    image_id: &str,
    options: &GateOptions,
    owner: &Owner,
    env: &GateEnv,
    progress: &(dyn Fn(GateProgress<'_>) + Sync),
) -> Result<GateReport> {
    let engine = ctl.engine();
    let selected: Vec<Case> = cases::all()
        .into_iter()
        .filter(|c| options.filter.as_deref().is_none_or(|f| c.name.contains(f)))
        .collect();
    let mut variants: Vec<StorageVariant> = selected.iter().map(|c| c.storage).collect();
    variants.sort();
    variants.dedup();
    let made = futures_util::future::join_all(
        variants
            .iter()
            .map(|v| async move { (*v, make_storage(ctl, owner, image_id, *v).await) }),
    )
    .await;
    let mut storages = BTreeMap::new();
    let mut failure = None;
    for (variant, made) in made {
        match made {
            Ok(s) => {
                storages.insert(variant, s);
            }
            Err(e) => failure = Some(e),
        }
    }
    let storages = Arc::new(storages);
    let (total, done) = (selected.len(), &AtomicUsize::new(0));
    let results: Vec<Vec<CaseResult>> = if failure.is_none() {
        futures_util::stream::iter(selected.iter())
            .map(|case| {
                let storages = storages.clone();
                async move {
                    let at = |done, finished| GateProgress {
                        done,
                        total,
                        case: &case.name,
                        finished,
                    };
                    progress(at(done.load(Ordering::Relaxed), false));
                    let rows = match storages.get(&case.storage) {
                        Some(s) => Box::pin(run_case(ctl, owner, image_id, s, env, case)).await,
                        None => vec![],
                    };
                    progress(at(done.fetch_add(1, Ordering::Relaxed) + 1, true));
                    rows
                }
            })
            .buffered(options.parallel.max(1))
            .collect()
            .await
    } else {
        vec![]
    };
    for s in storages.values() {
        s.remove(engine).await?;
    }
    if let Some(e) = failure {
        return Err(e);
    }
    let cases: Vec<CaseResult> = results.into_iter().flatten().collect();
    let passed = cases.iter().filter(|c| c.pass).count();
    Ok(GateReport {
        failed: cases.len() - passed,
        passed,
        cases,
        leftovers: vec![],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_test_dns_answers_a_chained_name_with_its_cname_alone() {
        assert_eq!(
            case_dns(IpAddr::from([172, 30, 0, 3])),
            [
                "cname.vendor.test=raw:cname.vendor.test/cname/target.elsewhere.test",
                "private.vendor.test=172.30.0.3",
                "target.elsewhere.test=172.30.0.3",
            ]
        );
    }
}
