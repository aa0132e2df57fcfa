//! `cordon run`: one agent invocation on a repository, from storage to settled result.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;

use crate::input::{parse_trailers, read_operations, MAX_MESSAGE_BYTES};
use crate::{human, image, print, progress, verdict, Ctx};

/// What `--vendor` may name: a closed set, so a misspelt vendor is a usage error listing these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum VendorArg {
    /// The fake vendor CLI of the test image.
    Test,
    /// The real Claude Code CLI in the agent image.
    Claude,
    /// Refused in every phase (it has a container profile only).
    Codex,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[arg(long)]
    phase: cordon_contract::Phase,
    #[arg(long, required_unless_present = "snapshot")]
    repo: Option<PathBuf>,
    /// Read a shared snapshot (`cordon task prepare --shared`'s handle, JSON or @FILE) instead
    /// of seeding storage of the run's own: planning, questions and review only.
    #[arg(long, conflicts_with_all = ["repo", "ops", "paths", "commit", "command_file"])]
    snapshot: Option<String>,
    #[arg(long, default_value = "HEAD")]
    head: String,
    #[arg(
        long,
        conflicts_with = "prompt_file",
        required_unless_present = "prompt_file"
    )]
    prompt: Option<String>,
    #[arg(long)]
    prompt_file: Option<PathBuf>,
    /// The planning answer's JSON schema (`schema.json`).
    #[arg(long)]
    schema: Option<PathBuf>,
    /// `test` runs the fake vendor CLI of the test image (no credential, no network); `claude`
    /// runs the real Claude Code CLI in the agent image, with CLAUDE_CODE_OAUTH_TOKEN or
    /// ANTHROPIC_API_KEY from the environment, or against the fake Messages API with
    /// `--fake-vendor`.
    #[arg(long, value_enum, default_value_t = VendorArg::Test)]
    vendor: VendorArg,
    /// `--vendor claude`: talk to the fake Messages API (on an internal network, as the API's
    /// own host, trusting a fresh test CA) instead of the vendor; no credential needed.
    #[arg(long)]
    fake_vendor: bool,
    /// The agent image id for `--vendor claude` (built from the pinned CLI when absent).
    #[arg(long)]
    image: Option<String>,
    /// With `--image`: what may run in it, the CLI and its ELF interpreter (`cordon image build
    /// --agent` prints them; repeatable).
    #[arg(long, requires = "image", value_name = "PATH")]
    exec: Vec<String>,
    /// `--vendor claude`: build the agent image from this Claude Code CLI instead of the pinned
    /// one (any `claude` binary: an npm install's, a native build; it is not checked against a pin).
    #[arg(long, conflicts_with = "image")]
    claude_cli: Option<PathBuf>,
    /// Owner token for every object made (generated when absent).
    #[arg(long)]
    owner: Option<String>,
    /// Attempt id (generated when absent).
    #[arg(long)]
    attempt: Option<String>,
    /// Echoed in the result (defaults to the commit the storage was seeded from).
    #[arg(long)]
    code_hash: Option<String>,
    #[arg(long, default_value_t = 600)]
    deadline_secs: u64,
    /// The uids storage allocations may run as (`FIRST-LAST`): no host account may use one.
    #[arg(long, default_value = "1100000-1999999")]
    uid_range: cordon::uids::UidRange,
    /// A host the agent may reach through the egress proxy, `NAME[:PORT]` (443 by default;
    /// repeatable). `--vendor claude` allows its API host when none is given; `--vendor test`
    /// allows nothing (no network, no proxy).
    #[arg(long = "allow", value_name = "NAME[:PORT]")]
    allow: Vec<String>,
    /// Tests and diagnosis: the proxy dials NAME at IP:PORT instead of resolving it (the only way
    /// to a private address; repeatable).
    #[arg(long = "map", value_name = "NAME=IP:PORT")]
    map: Vec<String>,
    /// The proxy's resolver (default: the engine's DNS on the invocation network).
    #[arg(long, value_name = "IP:PORT")]
    resolver: Option<std::net::SocketAddr>,
    /// With a credential: the most requests the agent may make of its vendor's API host in this
    /// invocation (the proxy answers 429 `vendor-budget` past it; 2,000 by default).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=cordon_egress::vendor::MAX_BUDGET))]
    max_requests: Option<u64>,
    /// With a credential: the most request body bytes sent to the vendor (2 GiB by default).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=cordon_egress::vendor::MAX_BUDGET))]
    max_request_bytes: Option<u64>,
    /// With a credential: the most response body bytes taken from the vendor; a response that
    /// crosses it is cut (2 GiB by default).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=cordon_egress::vendor::MAX_BUDGET))]
    max_response_bytes: Option<u64>,
    /// Execute and fix: the task's declared file operations (a JSON array, as `cordon audit
    /// check-tree --ops` takes), checked against the tree before the start.
    #[arg(long)]
    ops: Option<PathBuf>,
    /// Review, execute and fix: the runner's approved commands (a JSON array: name, description,
    /// argv, image, env, workdir, deadline_secs, output_bytes, scratch, runs, writes), offered to
    /// the agent as one tool that runs them by name, each in a container of its own.
    #[arg(long, value_name = "F")]
    command_file: Option<PathBuf>,
    /// Execute and fix: a declared path under /work whose link is snapshot before the start (one
    /// that passes through another link is refused; repeatable).
    #[arg(long = "path", value_name = "P")]
    paths: Vec<String>,
    /// Execute and fix: after the run, commit what the manifest holds into `--bundle` (refused,
    /// exit 1 and `needs_person`, for a metadata change, an agent commit, a changed declared
    /// link's target, gitlink content or anything a tree must not hold).
    #[arg(long, requires_all = ["author", "committer", "message_file", "bundle"])]
    commit: bool,
    /// `Name <email> SECONDS OFFSET` (git's raw form).
    #[arg(long, requires = "commit")]
    author: Option<String>,
    #[arg(long, requires = "commit")]
    committer: Option<String>,
    /// The commit message (UTF-8, at most 64 KiB).
    #[arg(long, requires = "commit")]
    message_file: Option<PathBuf>,
    /// A trailer `KEY=VALUE` (repeatable).
    #[arg(long = "trailer", value_name = "K=V", requires = "commit")]
    trailers: Vec<String>,
    /// Where the bundle goes (must not exist).
    #[arg(long, requires = "commit")]
    bundle: Option<PathBuf>,
    /// Commit names a Windows or macOS checkout cannot hold (`CON`, `aux.c`, `a:b`, a trailing
    /// dot or space), for a repository that never leaves Linux; refused by default
    /// (`non-portable`).
    #[arg(long, requires = "commit")]
    allow_non_portable_names: bool,
}

/// The id of the warning a wildcard allowlist entry gets.
pub const EGRESS_WILDCARD: &str = "egress-wildcard";

/// Something about a run that is allowed but worth a person's look: a stable id, what it is about,
/// and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Warning {
    pub id: &'static str,
    pub entries: Vec<String>,
    pub message: String,
}

/// What `--allow` warrants a warning for: wildcard entries, whose labels the agent chooses, and
/// each label it makes up becomes a query to the proxy's resolver (a channel out through DNS, by
/// the design of wildcards). Exact names give none. Entries that do not parse give none here:
/// they are refused with the rest of the run's request.
pub fn warnings(allow: &[String]) -> Vec<Warning> {
    let wildcards: Vec<String> = allow
        .iter()
        .filter(|entry| {
            cordon_egress::allowlist::Entry::parse(entry).is_ok_and(|entry| entry.subdomains)
        })
        .cloned()
        .collect();
    if wildcards.is_empty() {
        return Vec::new();
    }
    vec![Warning {
        id: EGRESS_WILDCARD,
        message: format!(
            "{} lets the agent choose the labels of the names it asks for, and the proxy's \
             resolver is asked each one: a way out through DNS, by the design of wildcards. \
             Allow exact names where you can.",
            wildcards.join(", ")
        ),
        entries: wildcards,
    }]
}

/// The run's report, with what it was warned of.
#[derive(Debug, serde::Serialize)]
struct Output<'a> {
    #[serde(flatten)]
    report: &'a cordon::invoke::oneshot::OneShotReport,
    warnings: &'a [Warning],
}

/// The vendor credential from the caller's environment: an OAuth token, or an API key.
fn credential_from_env() -> anyhow::Result<cordon::invoke::Credential> {
    use cordon::invoke::{Credential, CredentialKind};
    if let Ok(token) = std::env::var("CLAUDE_CODE_OAUTH_TOKEN") {
        return Ok(Credential::of(CredentialKind::OAuthToken, token)?);
    }
    if let Ok(key) = std::env::var("ANTHROPIC_API_KEY") {
        return Ok(Credential::of(CredentialKind::ApiKey, key)?);
    }
    anyhow::bail!(
        "--vendor claude needs CLAUDE_CODE_OAUTH_TOKEN or ANTHROPIC_API_KEY in the environment \
         (or --fake-vendor)"
    )
}

pub async fn run(ctx: &Ctx, mut args: RunArgs) -> anyhow::Result<ExitCode> {
    let prompt = prompt(args.prompt.take(), args.prompt_file.as_deref())?;
    // A schema cordon will not read is refused before anything is prepared (the capture reads
    // it again, and that read is the one used).
    if let Some(schema) = &args.schema {
        cordon::invoke::claude::read_schema(schema)?;
    }
    let (image_id, agent) = agent(ctx, &args).await?;
    let owner = match &args.owner {
        Some(o) => cordon::labels::Owner::new(o)?,
        None => cordon::labels::Owner::random("run"),
    };
    let allow = if args.allow.is_empty() && args.vendor != VendorArg::Test {
        cordon::invoke::default_allowlist(agent.vendor)
    } else {
        std::mem::take(&mut args.allow)
    };
    // Said before anything is made, whatever the output form.
    let warnings = warnings(&allow);
    for warning in &warnings {
        eprintln!("cordon: warning[{}]: {}", warning.id, warning.message);
    }
    let run = one_shot(args, prompt, owner, allow, agent)?;
    // A refused vendor is refused before anything is prepared.
    if cordon::invoke::allowed_phases(run.vendor).is_empty() {
        return Err(cordon::Error::VendorRefused(format!(
            "{} is refused in every phase: use claude (or --vendor test)",
            run.vendor
        ))
        .into());
    }
    let bar = progress::spinner(ctx.json);
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let report = cordon::invoke::oneshot::oneshot(&ctx.ctl, &image_id, &run, shutdown, &|step| {
        bar.set_message(step.to_owned())
    })
    .await;
    bar.finish_and_clear();
    let report = report?;
    // Text output shows the agent's text escaped and framed (see `human`); JSON is exact.
    let output = Output {
        report: &report,
        warnings: &warnings,
    };
    print(ctx.json, &output, || human::run_report(&report))?;
    if report.audit.as_ref().is_some_and(|a| a.needs_person) {
        // The run's changes are not to be used until a person looked: an answer, not a failure.
        return Ok(ExitCode::FAILURE);
    }
    Ok(verdict(
        report.result.answer.is_some()
            && report.storage_left.is_none()
            && report.audit.as_ref().is_none_or(|a| a.failed.is_none()),
    ))
}

/// The prompt: `--prompt`, or the UTF-8 of `--prompt-file` (bounded as the vendor CLI's prompt).
fn prompt(text: Option<String>, file: Option<&Path>) -> anyhow::Result<String> {
    Ok(match (text, file) {
        (Some(p), _) => p,
        (None, Some(f)) => cordon::caller_file::read_utf8(
            "prompt file",
            f,
            cordon::invoke::claude::MAX_PROMPT_BYTES,
        )?,
        (None, None) => anyhow::bail!("give --prompt or --prompt-file"),
    })
}

/// Who runs in the image: the vendor, its credential, what may run (`None`: the image's own
/// list), and the fake Messages API when the run talks to it instead of the vendor.
struct Agent {
    vendor: cordon_contract::Vendor,
    credential: Option<cordon::invoke::Credential>,
    exec: Option<Vec<String>>,
    fake: Option<cordon_proof::fake_api::FakeApi>,
}

/// The image `--vendor` runs in (its id) and who runs there: the test image and its fake CLI (no
/// credential); the agent image (`--image`, or built) with a credential from the environment or
/// the fake Messages API; or, for a vendor refused in every phase, no image.
async fn agent(ctx: &Ctx, args: &RunArgs) -> anyhow::Result<(String, Agent)> {
    match args.vendor {
        VendorArg::Test => {
            if args.fake_vendor {
                anyhow::bail!("--fake-vendor is for --vendor claude (the test CLI needs no API)");
            }
            let agent = Agent {
                vendor: cordon_contract::Vendor::Claude,
                credential: None,
                exec: None,
                fake: None,
            };
            Ok((image::build(ctx).await?.id, agent))
        }
        VendorArg::Claude => {
            let vendor = cordon_contract::Vendor::Claude;
            let (image, exec) = match &args.image {
                Some(id) => {
                    let exec = if args.exec.is_empty() {
                        vec![cordon_contract::paths::CLAUDE_CLI.to_owned()]
                    } else {
                        args.exec.clone()
                    };
                    (id.clone(), exec)
                }
                None => {
                    let built = image::agent(ctx, args.claude_cli.clone()).await?;
                    (built.built.id, built.exec)
                }
            };
            let mut fake = None;
            let credential = if args.fake_vendor {
                let api = cordon_proof::fake_api::fake_api(vendor, &image::build(ctx).await?.id)?;
                let credential = api.credential.clone();
                fake = Some(api);
                credential
            } else {
                credential_from_env()?
            };
            let agent = Agent {
                vendor,
                credential: Some(credential),
                exec: Some(exec),
                fake,
            };
            Ok((image, agent))
        }
        VendorArg::Codex => {
            let agent = Agent {
                vendor: cordon_contract::Vendor::Codex,
                credential: None,
                exec: None,
                fake: None,
            };
            Ok((String::new(), agent))
        }
    }
}

/// The invocation the arguments ask for, its caller files read (`--ops`, then the commit
/// message, then the trailers parsed).
fn one_shot(
    args: RunArgs,
    prompt: String,
    owner: cordon::labels::Owner,
    allow: Vec<String>,
    agent: Agent,
) -> anyhow::Result<cordon::invoke::oneshot::OneShot> {
    let (egress, mut vendor_options) = match agent.fake {
        Some(api) => {
            if !args.map.is_empty() || args.resolver.is_some() {
                anyhow::bail!(
                    "--fake-vendor sets the proxy's mapping itself: drop --map and --resolver"
                );
            }
            (api.egress, api.vendor)
        }
        None => (
            cordon::invoke::EgressOptions {
                map: args.map.clone(),
                resolver: args.resolver,
                ..Default::default()
            },
            Default::default(),
        ),
    };
    vendor_options.budget = budget(&args);
    let attempt = args
        .attempt
        .clone()
        .unwrap_or_else(|| format!("run-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]));
    let operations = match &args.ops {
        Some(path) => read_operations(path)?,
        None => Vec::new(),
    };
    let commit = commit(&args)?;
    let commands = match &args.command_file {
        Some(path) => crate::input::read_commands(path, args.phase)?,
        None => Vec::new(),
    };
    Ok(cordon::invoke::oneshot::OneShot {
        allow,
        egress,
        vendor_options,
        exec: agent.exec,
        phase: args.phase,
        vendor: agent.vendor,
        repo: args.repo.clone().unwrap_or_default(),
        head: args.head,
        prompt,
        schema: args.schema,
        owner,
        attempt,
        referenced_code_hash: args.code_hash,
        deadline: std::time::Duration::from_secs(args.deadline_secs),
        credential: agent.credential,
        work: cordon::storage::DEFAULT_WORK,
        uids: args.uid_range,
        operations,
        declared_paths: args.paths,
        commit,
        commands,
        snapshot: args
            .snapshot
            .as_deref()
            .map(crate::task::parse_handle)
            .transpose()?,
    })
}

/// `--max-requests`, `--max-request-bytes`, `--max-response-bytes` over the defaults.
fn budget(args: &RunArgs) -> cordon_egress::vendor::Budget {
    let default = cordon_egress::vendor::Budget::default();
    cordon_egress::vendor::Budget {
        requests: args.max_requests.unwrap_or(default.requests),
        request_bytes: args.max_request_bytes.unwrap_or(default.request_bytes),
        response_bytes: args.max_response_bytes.unwrap_or(default.response_bytes),
    }
}

/// `--commit`'s request (clap makes the identities, message file and bundle come with it): the
/// message read as UTF-8, then the trailers parsed.
fn commit(args: &RunArgs) -> anyhow::Result<Option<cordon::invoke::oneshot::OneShotCommit>> {
    let (true, Some(author), Some(committer), Some(message), Some(bundle)) = (
        args.commit,
        &args.author,
        &args.committer,
        &args.message_file,
        &args.bundle,
    ) else {
        return Ok(None);
    };
    Ok(Some(cordon::invoke::oneshot::OneShotCommit {
        author: author.clone(),
        committer: committer.clone(),
        message: cordon::caller_file::read_utf8("message file", message, MAX_MESSAGE_BYTES)?,
        trailers: parse_trailers(&args.trailers)?,
        bundle: bundle.clone(),
        allow_non_portable: args.allow_non_portable_names,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_wildcard_entries_are_warned_of() {
        let allow =
            |entries: &[&str]| -> Vec<String> { entries.iter().map(|e| (*e).to_owned()).collect() };
        assert_eq!(warnings(&allow(&[])), vec![]);
        assert_eq!(
            warnings(&allow(&["api.anthropic.com", "a.test:8443"])),
            vec![]
        );
        // Not an entry at all: refused later, not warned of.
        assert_eq!(warnings(&allow(&["*.", "*.A.test", "*"])), vec![]);
        let warned = warnings(&allow(&["api.anthropic.com", "*.a.test", "*.b.test:8443"]));
        assert_eq!(warned.len(), 1);
        assert_eq!(warned[0].id, "egress-wildcard");
        assert_eq!(warned[0].entries, ["*.a.test", "*.b.test:8443"]);
        assert!(warned[0].message.contains("*.a.test, *.b.test:8443"));
    }
}
