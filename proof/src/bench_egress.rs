//! `cordon bench egress`: what the egress path costs, as ratios against a direct baseline measured
//! in the same run; reported, never asserted.
//!
//! The proxied arm is an agent under cordon-init: `cordon-probe workload egress-load --proxy
//! 127.0.0.1:3128`, so its bytes go agent → the init's loopback forwarder → the unix socket → the
//! egress proxy container → the fake vendor's TLS endpoint. The direct arm is a container with the
//! same image and the same hardening ([`networked_body`], one CPU like the agent) on the same
//! invocation network, dialling the same endpoint's address itself. The relayed arm is the
//! direct arm's container dialling a plain relay on that network (`cordon-probe workload relay`:
//! splice(2) on a blocking thread per direction, no policy), which dials the endpoint: what one
//! more TCP hop and one relaying process cost on this machine, whatever relays them.
//!
//! Interleaving: one pair per run. Each pair is one invocation (its own network, fake vendor and
//! proxy, all removed after) in which the direct container and the agent run one after the other,
//! the order alternating from pair to pair (the relayed arm always between the two, on the opaque
//! tunnel's pairs); each container does one upload and one download of
//! `bytes` and then the pings. An agent invocation runs its agent once, so a fresh invocation per
//! pair is the only way to alternate arms against one and the same endpoint; alternating the order
//! keeps any warm-up or drift from favouring one arm. Figures are medians over the pairs.
//!
//! Memory: one more invocation whose agent opens 32 tunnels at once (the proxy's `--max-tunnels`),
//! does a `/ping` on each and holds them 8 s (the probe's `HOLD_FOR`); the proxy's memory is read from the engine
//! (one-shot `stats`) before the agent starts, every [`SAMPLE_EVERY`] while it holds them, and
//! once it exited: `memory_stats.usage` (cgroup v1 here: includes the page cache) and
//! `memory_stats.max_usage` (cgroup v1's peak since the proxy started; absent on cgroup v2).

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use cordon_contract::probe::fixture::VENDOR_HOST;
use cordon_contract::{paths, Phase, Vendor};
use futures_util::StreamExt;

use crate::bench::median;
use cordon::controller::Controller;
use cordon::engine::objects;
use cordon::engine::pending::{Created, NETWORK_SETTLE};
use cordon::engine::{Engine, CALL_TIMEOUT};
use cordon::error::{Error, Result};
use cordon::labels::{Allocation, Kind, Owner};
use cordon::launch::egress::Fixtures;
use cordon::launch::{self, Launch, Prepared};
use cordon::profile::egress::{networked_body, VENDOR_PORT};
use cordon::profile::{EgressSpec, Limits, Profile, ProfileSpec, DEFAULT_LANDLOCK_ABI};
use cordon::storage::{self, TaskStorage};

/// The agent's input file holding the test CA.
const CA_FILE: &str = "bench-ca.pem";
/// The direct container's environment variable holding the test CA.
const CA_ENV: &str = "BENCH_CA_PEM";
/// Tunnels held open at once for the memory reading.
pub const TUNNELS: usize = 32;
const SAMPLE_EVERY: Duration = Duration::from_millis(250);
/// The most any one container of the bench may take.
const RUN_LIMIT: Duration = Duration::from_secs(300);
const MIB: f64 = 1_048_576.0;
/// The plain relay's port in its container.
const RELAY_PORT: u16 = 8443;
/// How long the plain relay may take to say it listens.
const RELAY_READY_WITHIN: Duration = Duration::from_secs(10);

/// What `cordon bench egress` measured.
/// The egress target of issue 24 (target 5): both directions, and the terminated host's
/// streamed download, at least this times a direct connection.
pub const RATIO_TARGET: f64 = 0.8;

#[derive(Debug, Clone, serde::Serialize)]
pub struct EgressReport {
    /// Interleaved pairs (one proxied and one direct container each).
    pub runs: usize,
    /// Bytes of each upload and each download.
    pub bytes: u64,
    /// Measured pings per container (after `warmup` unmeasured ones), on one keep-alive connection.
    pub pings: usize,
    pub warmup: usize,
    /// Per pair, MiB/s.
    pub proxied_upload_mib_s: Vec<f64>,
    pub direct_upload_mib_s: Vec<f64>,
    pub proxied_download_mib_s: Vec<f64>,
    pub direct_download_mib_s: Vec<f64>,
    pub proxied_upload_median_mib_s: f64,
    pub direct_upload_median_mib_s: f64,
    pub proxied_download_median_mib_s: f64,
    pub direct_download_median_mib_s: f64,
    /// proxied / direct, of the medians (target: at least [`RATIO_TARGET`]).
    pub upload_ratio: f64,
    pub download_ratio: f64,
    /// Per pair, each container's median `/ping` round trip (µs).
    pub proxied_ping_us: Vec<f64>,
    pub direct_ping_us: Vec<f64>,
    pub proxied_ping_median_us: f64,
    pub direct_ping_median_us: f64,
    /// Per pair, each container's 90th percentile (µs).
    pub proxied_ping_p90_us: Vec<f64>,
    pub direct_ping_p90_us: Vec<f64>,
    /// proxied − direct of the medians (target: under 1000 µs).
    pub added_latency_us: f64,
    /// The relayed arm, per pair, MiB/s: one more TCP hop through a plain relay (no policy).
    pub relayed_upload_mib_s: Vec<f64>,
    pub relayed_download_mib_s: Vec<f64>,
    pub relayed_upload_median_mib_s: f64,
    pub relayed_download_median_mib_s: f64,
    /// relayed / direct, of the medians: the most any relaying egress reaches here (the proxied
    /// arm has that hop and two more: loopback TCP and the unix socket to the proxy).
    pub relayed_upload_ratio: f64,
    pub relayed_download_ratio: f64,
    pub memory: ProxyMemory,
    /// The terminated vendor host's arm (issue 22).
    pub terminated: TerminatedFigures,
}

/// The terminated arm against the same direct baseline, both speaking the Messages API: the agent
/// holds the sentinel and trusts the invocation's CA, the proxy terminates the vendor host and
/// swaps in the key; the direct container holds the key and dials the fake vendor itself.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TerminatedFigures {
    /// Interleaved pairs, and the bytes of text each streamed answer carries.
    pub runs: usize,
    pub bytes: u64,
    /// Per pair, each container's median whole Messages answer (µs) and streamed download.
    pub terminated_messages_us: Vec<f64>,
    pub direct_messages_us: Vec<f64>,
    pub terminated_download_mib_s: Vec<f64>,
    pub direct_download_mib_s: Vec<f64>,
    pub terminated_messages_median_us: f64,
    pub direct_messages_median_us: f64,
    /// terminated − direct of the medians (target: under 1000 µs).
    pub added_messages_us: f64,
    pub terminated_download_median_mib_s: f64,
    pub direct_download_median_mib_s: f64,
    /// terminated / direct of the medians (target: at least 0.8).
    pub download_ratio: f64,
}

/// Which way an agent reaches the fake vendor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Arm {
    /// An opaque tunnel through the proxy: `/sink`, `/source`, `/ping`.
    Tunnel,
    /// The proxy terminates the vendor host: the Messages API with the sentinel.
    Terminated,
}

/// The proxy container's memory as the engine reports it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ProxyMemory {
    pub tunnels: usize,
    /// Which `memory_stats` fields were read.
    pub source: String,
    /// `usage` before the agent started (MiB).
    pub before_usage_mib: f64,
    /// The highest `usage` sampled while the tunnels were held (MiB).
    pub holding_usage_mib: f64,
    /// `max_usage` read once the agent exited: the peak of the proxy's whole life, the 32 tunnels
    /// included (MiB; None on cgroup v2).
    pub peak_max_usage_mib: Option<f64>,
    /// `usage` samples taken while the tunnels were held.
    pub samples: usize,
}

/// One pair's figures: the relayed arm's with the opaque tunnel only.
struct Pair {
    proxied: Figures,
    direct: Figures,
    relayed: Option<Figures>,
}

/// One container's figures (the workload's JSON line).
#[derive(Debug, Clone, serde::Deserialize)]
struct Figures {
    upload_mib_s: Vec<f64>,
    download_mib_s: Vec<f64>,
    ping_median_us: f64,
    ping_p90_us: f64,
}

struct Setup<'a> {
    ctl: &'a Controller,
    owner: &'a Owner,
    image_id: &'a str,
    storage: &'a TaskStorage,
    ca: cordon_fake_vendor::ca::TestCa,
    /// The fake vendor's key: the direct arm's and the terminated arm's proxy vault's.
    key: String,
    bytes: u64,
    pings: usize,
    warmup: usize,
}

/// The variable the direct container's key is in (the agent's sentinel is in the CLI's own).
const KEY_ENV: &str = "BENCH_VENDOR_KEY";
/// The fake vendor's key for this run.
fn bench_key() -> String {
    format!(
        "sk-ant-api03-cordon-bench-{}",
        uuid::Uuid::new_v4().simple()
    )
}

fn load_args(bytes: u64, pings: usize, warmup: usize) -> Vec<String> {
    [
        "--name".to_owned(),
        VENDOR_HOST.to_owned(),
        "--bytes".to_owned(),
        bytes.to_string(),
        "--runs".to_owned(),
        "1".to_owned(),
        "--pings".to_owned(),
        pings.to_string(),
        "--warmup".to_owned(),
        warmup.to_string(),
    ]
    .into()
}

impl Setup<'_> {
    /// The custody of the run's key for the vendor host (the terminated arm).
    fn custody(&self) -> Result<cordon::custody::Custody> {
        let credential = cordon::custody::Credential::of(
            cordon::custody::CredentialKind::ApiKey,
            self.key.clone(),
        )?;
        cordon::custody::Custody::new(
            &credential,
            VENDOR_HOST,
            VENDOR_PORT,
            Some(&self.ca.ca_pem),
            cordon_egress::vendor::Budget {
                requests: cordon_egress::vendor::MAX_BUDGET,
                request_bytes: cordon_egress::vendor::MAX_BUDGET,
                response_bytes: cordon_egress::vendor::MAX_BUDGET,
            },
            std::time::SystemTime::now() + RUN_LIMIT * 2,
        )
    }

    fn profile(
        &self,
        workload: Vec<String>,
        custody: Option<&cordon::custody::Custody>,
    ) -> Result<Profile> {
        let allocation = Allocation::new(self.owner, "bench", self.storage.allocation.uid)?;
        let mut command = vec![paths::PROBE.to_owned(), "workload".to_owned()];
        command.extend(workload);
        Profile::new(ProfileSpec {
            phase: Phase::Execute,
            vendor: Vendor::Claude,
            image_id: self.image_id.to_owned(),
            storage: self.storage.mounts_for(&allocation),
            allocation,
            limits: Limits {
                pids: 256,
                deadline: RUN_LIMIT,
                grace: Duration::from_secs(1),
                ..Limits::default()
            },
            command,
            exec: vec![paths::PROBE.to_owned()],
            env: custody.map(|c| vec![c.agent_env()]).unwrap_or_default(),
            gitlinks: vec![],
            pins: vec![],
            pin_mounts: false,
            input_files: custody
                .map(|c| {
                    let ca = c.ca_pem().as_bytes().to_vec();
                    vec![(cordon::custody::AGENT_CA_FILE.to_owned(), ca)]
                })
                .unwrap_or_default(),
            landlock_abi: DEFAULT_LANDLOCK_ABI,
            egress: Some(EgressSpec {
                internal: true,
                terminate: custody.map(cordon::custody::Custody::termination),
                ..EgressSpec::allowing(&[VENDOR_HOST.to_owned()])
            }),
        })
    }

    /// An agent invocation of `egress-load` (proxied) with `extra` arguments: created, its proxy
    /// started and the CA delivered; not started.
    async fn invocation(&self, extra: Vec<String>, arm: Arm) -> Result<(Profile, Launch)> {
        let custody = match arm {
            Arm::Tunnel => None,
            Arm::Terminated => Some(self.custody()?),
        };
        // The agent trusts the test CA through a tunnel, the invocation's CA alone when its
        // vendor host is terminated (and then holds the sentinel and speaks Messages).
        let ca = match arm {
            Arm::Tunnel => CA_FILE,
            Arm::Terminated => cordon::custody::AGENT_CA_FILE,
        };
        let mut workload = vec![
            "egress-load".to_owned(),
            "--ca".to_owned(),
            format!("{}/{ca}", paths::INPUT_DIR),
            "--proxy".to_owned(),
            format!("127.0.0.1:{}", cordon_contract::egress::FORWARD_PORT),
        ];
        if let Some(custody) = &custody {
            workload.extend(["--credential-env".to_owned(), custody.agent_env().0]);
        }
        workload.extend(extra);
        let profile = self.profile(workload, custody.as_ref())?;
        let engine = self.ctl.engine();
        let mut prepared = Prepared::new(engine, &profile)?;
        if let Some(custody) = &custody {
            prepared.vault = Some(custody.vault().tar(profile.allocation().uid.proxy())?);
        }
        let plan = prepared
            .egress
            .as_mut()
            .ok_or_else(|| Error::Internal("the bench profile has no egress".into()))?;
        plan.fixtures = Some(Fixtures {
            cert_pem: self.ca.cert_pem.clone(),
            key_pem: self.ca.key_pem.clone(),
            mapped: vec![VENDOR_HOST.to_owned()],
            dns: None,
            image: None,
            api_key_sha256: Some(cordon_fake_vendor::tls::Auth::hex_of(&self.key)),
        });
        let mut launch = launch::create(self.ctl, &profile, prepared).await?;
        let ready = async {
            if !launch.refusals.is_empty() {
                return Err(Error::Refused(launch.refusals.clone()));
            }
            if launch.egress.is_none() {
                return Err(Error::Internal("the invocation has no egress".into()));
            }
            launch.start_proxy(engine).await?;
            let extra = [(CA_FILE.to_owned(), self.ca.ca_pem.clone().into_bytes())];
            launch.add_inputs(profile.input_files(), &extra)
        }
        .await;
        match ready {
            Ok(()) => Ok((profile, launch)),
            Err(e) => {
                launch.finish(engine).await?;
                Err(e)
            }
        }
    }

    /// Start the agent, wait for it, and return its stdout; it must attest and exit 0.
    async fn run_agent(&self, launch: &mut Launch) -> Result<String> {
        let engine = self.ctl.engine();
        launch.start(engine).await?;
        let code = launch.wait(engine, RUN_LIMIT).await?;
        let output = launch.output(engine).await?;
        if code != 0 || !launch.verdict(&output).trusted() {
            return Err(Error::Internal(format!(
                "the proxied arm exited {code}: stderr ends {:?}",
                stderr_end(&output.stderr)
            )));
        }
        Ok(output.stdout)
    }

    /// The direct arm: a hardened container on the invocation network dialling `to` (the
    /// endpoint, or the relay in front of it).
    async fn direct(&self, profile: &Profile, to: SocketAddrV4, arm: Arm) -> Result<Figures> {
        let engine = self.ctl.engine();
        let allocation = profile.allocation();
        let mut entrypoint = vec![
            paths::PROBE.to_owned(),
            "workload".to_owned(),
            "egress-load".to_owned(),
            "--ca-env".to_owned(),
            CA_ENV.to_owned(),
            "--direct".to_owned(),
            to.to_string(),
        ];
        let mut env = vec![format!("{CA_ENV}={}", self.ca.ca_pem)];
        if arm == Arm::Terminated {
            entrypoint.extend(["--credential-env".to_owned(), KEY_ENV.to_owned()]);
            env.push(format!("{KEY_ENV}={}", self.key));
        }
        entrypoint.extend(load_args(self.bytes, self.pings, self.warmup));
        let body = networked_body(
            self.image_id,
            allocation,
            Kind::Probe,
            entrypoint,
            env,
            None,
        );
        let mut created = Created::default();
        let run = async {
            let id = objects::create_container(
                engine,
                &allocation.name(Kind::Probe),
                body,
                &created.shared(),
            )
            .await?;
            let mut container = Launch::adopt(id);
            container.start(engine).await?;
            let code = container.wait(engine, RUN_LIMIT).await?;
            let output = container.output(engine).await?;
            if code != 0 {
                return Err(Error::Internal(format!(
                    "the direct arm exited {code}: stderr ends {:?}",
                    stderr_end(&output.stderr)
                )));
            }
            figures(&output.stdout)
        }
        .await;
        created.remove_all(engine, Duration::from_secs(30)).await?;
        // It was on the invocation network: the next container to leave it waits.
        tokio::time::sleep(NETWORK_SETTLE).await;
        run
    }

    /// The relayed arm: the plain relay started on the invocation network, then the direct
    /// arm's container dialling it; the relay removed after.
    async fn relayed(&self, profile: &Profile, vendor: Ipv4Addr, arm: Arm) -> Result<Figures> {
        let engine = self.ctl.engine();
        let allocation = profile.allocation();
        let entrypoint = vec![
            paths::PROBE.to_owned(),
            "workload".to_owned(),
            "relay".to_owned(),
            RELAY_PORT.to_string(),
            format!("{vendor}:{VENDOR_PORT}"),
        ];
        let body = networked_body(
            self.image_id,
            allocation,
            Kind::Probe,
            entrypoint,
            Vec::new(),
            None,
        );
        let mut created = Created::default();
        let run = async {
            let name = format!("{}-relay", allocation.name(Kind::Probe));
            let id = objects::create_container(engine, &name, body, &created.shared()).await?;
            let mut relay = Launch::adopt(id.clone());
            relay.start(engine).await?;
            listening(engine, &relay).await?;
            let network = allocation.name(Kind::Network);
            let address = objects::inspect_container(engine, &id)
                .await?
                .and_then(|c| c.network_settings?.networks?.remove(&network)?.ip_address)
                .and_then(|ip| ip.parse::<Ipv4Addr>().ok())
                .ok_or_else(|| Error::Internal(format!("the relay has no address on {network}")))?;
            let to = SocketAddrV4::new(address, RELAY_PORT);
            self.direct(profile, to, arm).await
        }
        .await;
        created.remove_all(engine, Duration::from_secs(30)).await?;
        tokio::time::sleep(NETWORK_SETTLE).await;
        run
    }

    /// One pair: proxied and direct, in the order `direct_first` says, and (the opaque tunnel's
    /// only) the relayed arm between them.
    async fn pair(&self, direct_first: bool, arm: Arm) -> Result<Pair> {
        let engine = self.ctl.engine();
        let (profile, mut launch) = self
            .invocation(load_args(self.bytes, self.pings, self.warmup), arm)
            .await?;
        let run = async {
            let vendor = launch
                .egress
                .as_ref()
                .and_then(|e| e.vendor)
                .ok_or_else(|| Error::Internal("no fake vendor address".into()))?;
            let endpoint = SocketAddrV4::new(vendor, VENDOR_PORT);
            let relays = arm == Arm::Tunnel;
            let (mut direct, mut relayed) = (None, None);
            if direct_first {
                direct = Some(self.direct(&profile, endpoint, arm).await?);
                if relays {
                    relayed = Some(self.relayed(&profile, vendor, arm).await?);
                }
            }
            let proxied = figures(&self.run_agent(&mut launch).await?)?;
            if !direct_first {
                if relays {
                    relayed = Some(self.relayed(&profile, vendor, arm).await?);
                }
                direct = Some(self.direct(&profile, endpoint, arm).await?);
            }
            let direct = direct.ok_or_else(|| Error::Internal("no direct arm ran".into()))?;
            Ok::<_, Error>(Pair {
                proxied,
                direct,
                relayed,
            })
        }
        .await;
        launch.finish(engine).await?;
        run
    }

    /// The proxy's memory with [`TUNNELS`] tunnels held open.
    async fn memory(&self) -> Result<ProxyMemory> {
        let engine = self.ctl.engine();
        let (_, mut launch) = self
            .invocation(
                vec![
                    "--name".to_owned(),
                    VENDOR_HOST.to_owned(),
                    "--hold".to_owned(),
                    TUNNELS.to_string(),
                ],
                Arm::Tunnel,
            )
            .await?;
        let run = async {
            let proxy = launch
                .egress
                .as_ref()
                .map(|e| e.proxy.clone())
                .ok_or_else(|| Error::Internal("no proxy".into()))?;
            let before = memory_stats(engine, &proxy).await?;
            let agent = launch.container.clone();
            let mut holding: Vec<u64> = Vec::new();
            let mut sample_error = None;
            let sampler = async {
                loop {
                    tokio::time::sleep(SAMPLE_EVERY).await;
                    // Only once the workload says it holds them all.
                    let said = Launch::adopt(agent.clone())
                        .output(engine)
                        .await
                        .map(|o| o.stdout.contains("{\"holding\":"));
                    match said {
                        Ok(true) => match memory_stats(engine, &proxy).await {
                            Ok((Some(usage), _)) => holding.push(usage),
                            Ok((None, _)) => {}
                            Err(e) => sample_error = Some(e),
                        },
                        Ok(false) => {}
                        Err(e) => sample_error = Some(e),
                    }
                }
            };
            let stdout = tokio::select! {
                out = self.run_agent(&mut launch) => out,
                () = sampler => unreachable!("the sampler never ends"),
            };
            let stdout = stdout?;
            if !stdout.contains(&format!("{{\"held\":{TUNNELS}}}")) {
                return Err(Error::Internal(format!(
                    "the hold workload did not hold {TUNNELS} tunnels: {stdout:?}"
                )));
            }
            let after = memory_stats(engine, &proxy).await?;
            if holding.is_empty() {
                return Err(Error::Internal(format!(
                    "no memory sample while the tunnels were held ({sample_error:?})"
                )));
            }
            let mib = |b: u64| b as f64 / MIB;
            Ok::<_, Error>(ProxyMemory {
                tunnels: TUNNELS,
                source: if after.1.is_some() {
                    "stats one-shot: memory_stats.usage (before, while held) and \
                     memory_stats.max_usage (cgroup v1 peak, after)"
                        .to_owned()
                } else {
                    "stats one-shot: memory_stats.usage (no max_usage: cgroup v2)".to_owned()
                },
                before_usage_mib: before.0.map_or(f64::NAN, mib),
                holding_usage_mib: holding.iter().copied().max().map_or(f64::NAN, mib),
                peak_max_usage_mib: after.1.map(mib),
                samples: holding.len(),
            })
        }
        .await;
        launch.finish(engine).await?;
        run
    }
}

/// Wait until the plain relay says it listens (its first stdout line), within
/// [`RELAY_READY_WITHIN`].
async fn listening(engine: &Engine, relay: &Launch) -> Result<()> {
    let began = std::time::Instant::now();
    loop {
        let output = relay.log_output(engine, 64 * 1024).await?;
        if output.stdout.contains("{\"relay\":\"listening\"}") {
            return Ok(());
        }
        if began.elapsed() > RELAY_READY_WITHIN {
            return Err(Error::Internal(format!(
                "the relay did not listen within {RELAY_READY_WITHIN:?}: stderr ends {:?}",
                stderr_end(&output.stderr)
            )));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The end of a failed arm's stderr, where its error is (the init's attestation line, which
/// comes first, is longer than what an error message shows).
fn stderr_end(stderr: &str) -> String {
    let chars: Vec<char> = stderr.chars().collect();
    chars[chars.len().saturating_sub(800)..].iter().collect()
}

/// The workload's figures: the last stdout line that parses as them.
fn figures(stdout: &str) -> Result<Figures> {
    stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str::<Figures>(l).ok())
        // A Messages load (the terminated arm and its baseline) has no upload.
        .filter(|f| !f.download_mib_s.is_empty())
        .ok_or_else(|| {
            Error::Internal(format!(
                "no egress-load figures in the output: {:?}",
                stdout.chars().take(800).collect::<String>()
            ))
        })
}

/// One-shot `stats` of a container: (`memory_stats.usage`, `memory_stats.max_usage`).
async fn memory_stats(engine: &Engine, id: &str) -> Result<(Option<u64>, Option<u64>)> {
    let options = bollard::query_parameters::StatsOptions {
        stream: false,
        one_shot: true,
    };
    let mut stream = engine.docker().stats(id, Some(options));
    match tokio::time::timeout(CALL_TIMEOUT, stream.next()).await {
        Ok(Some(Ok(stats))) => Ok(stats
            .memory_stats
            .map_or((None, None), |m| (m.usage, m.max_usage))),
        Ok(Some(Err(source))) => Err(Error::Docker {
            context: "container stats".into(),
            source,
        }),
        Ok(None) => Err(Error::Internal("the stats stream ended empty".into())),
        Err(_) => Err(Error::Timeout {
            context: "container stats".into(),
            after: CALL_TIMEOUT,
        }),
    }
}

/// Run `runs` interleaved pairs of `bytes` each way and `pings` pings, then the memory reading.
pub async fn egress(
    ctl: &Controller,
    image_id: &str,
    runs: usize,
    bytes: u64,
    pings: usize,
) -> Result<EgressReport> {
    let engine = ctl.engine();
    let owner = Owner::random("bench");
    let ca = cordon_fake_vendor::ca::generate(&[VENDOR_HOST])
        .map_err(|e| Error::Internal(format!("the test CA: {e}")))?;
    let allocation = storage::new_allocation(engine, &owner, "bench").await?;
    let storage = TaskStorage::create(
        engine,
        &allocation,
        image_id,
        storage::DEFAULT_WORK,
        storage::DEFAULT_METADATA,
    )
    .await?;
    let setup = Setup {
        ctl,
        owner: &owner,
        image_id,
        storage: &storage,
        ca,
        key: bench_key(),
        bytes,
        pings,
        warmup: 50,
    };
    let result = async {
        let (mut pairs, mut terminated) = (Vec::new(), Vec::new());
        for i in 0..runs {
            pairs.push(setup.pair(i % 2 == 1, Arm::Tunnel).await?);
            terminated.push(setup.pair(i % 2 == 0, Arm::Terminated).await?);
        }
        let memory = setup.memory().await?;
        Ok::<_, Error>((pairs, terminated, memory))
    }
    .await;
    storage.remove(engine).await?;
    let (pairs, terminated, memory) = result?;
    let tcol = |f: fn(&Pair) -> f64| terminated.iter().map(f).collect::<Vec<f64>>();
    let (tm, dm) = (
        tcol(|p| p.proxied.ping_median_us),
        tcol(|p| p.direct.ping_median_us),
    );
    let (td, dd) = (
        tcol(|p| p.proxied.download_mib_s[0]),
        tcol(|p| p.direct.download_mib_s[0]),
    );
    let terminated = TerminatedFigures {
        runs,
        bytes,
        terminated_messages_median_us: median(&tm),
        direct_messages_median_us: median(&dm),
        added_messages_us: median(&tm) - median(&dm),
        terminated_download_median_mib_s: median(&td),
        direct_download_median_mib_s: median(&dd),
        download_ratio: median(&td) / median(&dd),
        terminated_messages_us: tm,
        direct_messages_us: dm,
        terminated_download_mib_s: td,
        direct_download_mib_s: dd,
    };
    let col = |f: fn(&Pair) -> f64| pairs.iter().map(f).collect::<Vec<f64>>();
    fn first(v: &[f64]) -> f64 {
        v.first().copied().unwrap_or(f64::NAN)
    }
    let pu = col(|p| first(&p.proxied.upload_mib_s));
    let du = col(|p| first(&p.direct.upload_mib_s));
    let pd = col(|p| p.proxied.download_mib_s[0]);
    let dd = col(|p| p.direct.download_mib_s[0]);
    let pp = col(|p| p.proxied.ping_median_us);
    let dp = col(|p| p.direct.ping_median_us);
    let relayed = |f: fn(&Figures) -> &[f64]| -> Vec<f64> {
        let of = |p: &Pair| p.relayed.as_ref().map_or(f64::NAN, |r| first(f(r)));
        pairs.iter().map(of).collect()
    };
    let ru = relayed(|r| &r.upload_mib_s);
    let rd = relayed(|r| &r.download_mib_s);
    Ok(EgressReport {
        runs,
        bytes,
        pings,
        warmup: setup.warmup,
        proxied_upload_median_mib_s: median(&pu),
        direct_upload_median_mib_s: median(&du),
        proxied_download_median_mib_s: median(&pd),
        direct_download_median_mib_s: median(&dd),
        upload_ratio: median(&pu) / median(&du),
        download_ratio: median(&pd) / median(&dd),
        proxied_ping_median_us: median(&pp),
        direct_ping_median_us: median(&dp),
        added_latency_us: median(&pp) - median(&dp),
        relayed_upload_median_mib_s: median(&ru),
        relayed_download_median_mib_s: median(&rd),
        relayed_upload_ratio: median(&ru) / median(&du),
        relayed_download_ratio: median(&rd) / median(&dd),
        relayed_upload_mib_s: ru,
        relayed_download_mib_s: rd,
        proxied_ping_p90_us: col(|p| p.proxied.ping_p90_us),
        direct_ping_p90_us: col(|p| p.direct.ping_p90_us),
        proxied_upload_mib_s: pu,
        direct_upload_mib_s: du,
        proxied_download_mib_s: pd,
        direct_download_mib_s: dd,
        proxied_ping_us: pp,
        direct_ping_us: dp,
        memory,
        terminated,
    })
}

impl EgressReport {
    /// Plain text.
    pub fn text(&self) -> String {
        let (m, t) = (&self.memory, &self.terminated);
        format!(
            "egress: {} interleaved pairs, {:.0} MiB each way, {} pings (after {} warm-up)\n\
             upload   proxied median {:.1} MiB/s, direct {:.1} MiB/s, ratio {:.3} (target >= {RATIO_TARGET})\n\
             download proxied median {:.1} MiB/s, direct {:.1} MiB/s, ratio {:.3} (target >= {RATIO_TARGET})\n\
             /ping    proxied median {:.0} us, direct {:.0} us, added {:.0} us (target < 1000)\n\
             one plain relay (one more TCP hop, splice, no policy): upload {:.1} MiB/s, ratio {:.3}; \
             download {:.1} MiB/s, ratio {:.3}\n\
             proxy memory, {} tunnels held: before {:.1} MiB, while held {:.1} MiB (usage, {} samples), \
             peak {} (max_usage)\n\
             terminated vendor host, Messages API, {} pairs:\n\
             streamed download terminated median {:.1} MiB/s, direct {:.1} MiB/s, ratio {:.3} (target >= {RATIO_TARGET})\n\
             Messages answer   terminated median {:.0} us, direct {:.0} us, added {:.0} us (target < 1000)\n",
            self.runs,
            self.bytes as f64 / MIB,
            self.pings,
            self.warmup,
            self.proxied_upload_median_mib_s,
            self.direct_upload_median_mib_s,
            self.upload_ratio,
            self.proxied_download_median_mib_s,
            self.direct_download_median_mib_s,
            self.download_ratio,
            self.proxied_ping_median_us,
            self.direct_ping_median_us,
            self.added_latency_us,
            self.relayed_upload_median_mib_s,
            self.relayed_upload_ratio,
            self.relayed_download_median_mib_s,
            self.relayed_download_ratio,
            m.tunnels,
            m.before_usage_mib,
            m.holding_usage_mib,
            m.samples,
            m.peak_max_usage_mib
                .map_or("n/a".to_owned(), |p| format!("{p:.1} MiB")),
            t.runs,
            t.terminated_download_median_mib_s,
            t.direct_download_median_mib_s,
            t.download_ratio,
            t.terminated_messages_median_us,
            t.direct_messages_median_us,
            t.added_messages_us,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::figures;

    #[test]
    fn figures_are_the_last_line_that_parses() {
        let out =
            "{\"cordon-init\":\"attested\"}\n{\"upload_mib_s\":[1.5],\"download_mib_s\":[2.0],\
                   \"ping_median_us\":100.0,\"ping_p90_us\":150.0,\"pings\":500}\n";
        let f = figures(out).expect("figures");
        assert_eq!((f.upload_mib_s[0], f.ping_p90_us), (1.5, 150.0));
        assert!(figures("nothing\n").is_err());
    }
}
