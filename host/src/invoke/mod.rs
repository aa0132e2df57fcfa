//! Invocations: what a runner calls to run an agent in one phase.
//!
//! [`capture`] freezes a request (each attempt id once). [`start`] checks everything that needs no
//! allocation and returns a [`Handle`] at once; it fails only when it allocated nothing. Every later
//! failure settles the handle. The handle settles after the container is gone and cleanup has
//! finished: a failed cleanup is retried every second for a window (60 s by default) after the
//! first failure, then the result lists what could not be confirmed removed (`unreleased`) and the
//! profile is retired. The first stop reason (timeout, cancelled, shutdown) wins and travels as a
//! typed value.

pub mod claude;
mod commands;
mod handle;
pub mod oneshot;
mod profile;
mod request;
mod result;
pub mod schema;
mod supervisor;

use std::path::PathBuf;
use std::time::Duration;

use cordon_contract::{Phase, Vendor};

use crate::error::{Error, Result};
use crate::launch;
use crate::profile::Limits;

pub use crate::custody::{Credential, CredentialKind};
pub use handle::{Handle, Step, StopReason};
pub use request::{capture, Capture, Request};
pub use result::{
    assemble, Attestation, Facts, Failure, InvocationResult, Timings, VendorRequest, VendorUsage,
};
pub use schema::AnswerSchema;
pub use supervisor::start;

/// The phases each vendor may run. Codex's set is empty: it reads code only through its shell,
/// which is off, so it would plan without the code and edit files it cannot see.
pub fn allowed_phases(vendor: Vendor) -> &'static [Phase] {
    match vendor {
        Vendor::Claude => &Phase::ALL,
        Vendor::Codex => &[],
    }
}

pub(crate) fn check_vendor(vendor: Vendor, phase: Phase) -> Result<()> {
    if allowed_phases(vendor).contains(&phase) {
        return Ok(());
    }
    Err(Error::VendorRefused(format!(
        "{vendor} is refused in every phase ({phase} included): it cannot read code without its \
         shell, which cordon turns off; use claude"
    )))
}

/// Where the image comes from: an id already built, or the workspace to build the test image
/// from as the first step of setup (cancellable like every other step). Each says what may run
/// in it: the vendor CLI alone (the test image's static fake), or the agent image's CLI and its
/// ELF interpreter (the kernel opens the interpreter for execution too).
#[derive(Debug, Clone)]
pub enum ImageSource {
    /// An image whose vendor CLI runs alone (the test image).
    Id(String),
    /// The test image, built from this workspace.
    Build(PathBuf),
    /// An agent image and its exec allowlist ([`crate::image::agent::AgentImage::exec`]).
    Agent { id: String, exec: Vec<String> },
}

impl ImageSource {
    /// What the workload may execute in this image.
    pub fn exec(&self) -> Vec<String> {
        match self {
            ImageSource::Agent { exec, .. } => exec.clone(),
            ImageSource::Id(_) | ImageSource::Build(_) => {
                vec![cordon_contract::paths::CLAUDE_CLI.to_owned()]
            }
        }
    }
}

/// Knobs of one invocation.
#[derive(Debug, Clone)]
pub struct Options {
    pub image: ImageSource,
    /// Container limits; the deadline is replaced by what is left of the request's.
    pub limits: Limits,
    /// Bytes kept of each output stream.
    pub max_output: usize,
    /// How long a failing cleanup is retried (from its first failure).
    pub cleanup_window: Duration,
    /// The bound on the first cleanup attempt.
    pub first_cleanup: Duration,
    /// How the egress of an invocation with a network allowlist is set up.
    pub egress: EgressOptions,
    /// The invocation's allocation id (its agent, proxy and network are named for it); a fresh
    /// one when `None`.
    pub allocation: Option<uuid::Uuid>,
    /// How the vendor CLI reaches its API.
    pub vendor: VendorOptions,
    /// The runner's approved commands (review, execute and fix; refused in planning and
    /// questions): the agent is offered one tool that runs them by name, each in a command
    /// container of its own ([`crate::command`]).
    pub commands: Vec<cordon_contract::command::ApprovedCommand>,
    /// Where an invocation over a shared snapshot takes its own uid from (over its own storage
    /// it runs as the storage's).
    pub uids: crate::uids::UidRange,
}

/// How the vendor CLI reaches its API, for corporate proxies and LLM gateways (and the tests'
/// fake Messages API): a CA bundle it trusts besides its own, and another API base URL. Both are
/// data for the CLI's documented variables; the egress proxy's allowlist still decides where a
/// connection may go.
#[derive(Debug, Clone, Default)]
pub struct VendorOptions {
    /// PEM certificates trusted besides the public roots for the vendor's API host. With a
    /// credential, the egress proxy trusts them for its own connection to the vendor (the agent
    /// trusts only the invocation's CA there); without one, the CLI does (`extra-ca.pem` in the
    /// input dir, named by `NODE_EXTRA_CA_CERTS`).
    pub extra_ca_pem: Option<String>,
    /// `ANTHROPIC_BASE_URL`: `https://NAME[:PORT][/PATH]`, its host on the allowlist.
    pub base_url: Option<String>,
    /// What the agent may spend at its vendor host in this invocation (requests, request and
    /// response bytes); the proxy answers 429 `vendor-budget` past it. Only with a credential
    /// (the proxy terminates the host then).
    pub budget: cordon_egress::vendor::Budget,
    /// Leave the CLI's non-essential traffic (telemetry, error reports, update checks) on: the
    /// switches in [`claude::ENV`] are not set, and the egress proxy refuses every host but the
    /// allowlist's. Off by default; for diagnosis, and the test that shows the CLI still answers.
    pub nonessential_traffic: bool,
}

/// The egress of an invocation whose request has a network allowlist. The defaults are the
/// production ones: no mapping, the engine's embedded DNS, a network with a route out.
#[derive(Debug, Clone, Default)]
pub struct EgressOptions {
    /// `name=ip:port` mappings for tests and diagnosis (the only way to a private address).
    pub map: Vec<String>,
    /// The proxy's one upstream resolver.
    pub resolver: Option<std::net::SocketAddr>,
    /// The network gets no route off the machine.
    pub internal: bool,
    /// The gate's and the tests' fake vendor endpoint and DNS server on the network.
    pub fixtures: Option<crate::launch::egress::Fixtures>,
}

/// The hosts an agent of `vendor` needs: its API and nothing else.
pub fn default_allowlist(vendor: Vendor) -> Vec<String> {
    match vendor {
        Vendor::Claude => vec!["api.anthropic.com".to_owned()],
        Vendor::Codex => vec!["api.openai.com".to_owned()],
    }
}

impl Options {
    pub fn new(image: ImageSource) -> Options {
        Options {
            image,
            limits: Limits::default(),
            max_output: launch::MAX_OUTPUT_BYTES,
            cleanup_window: Duration::from_secs(60),
            first_cleanup: Duration::from_secs(30),
            egress: EgressOptions::default(),
            allocation: None,
            vendor: VendorOptions::default(),
            commands: Vec::new(),
            uids: crate::uids::UidRange::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::Controller;
    use crate::task::StorageHandle;
    use cordon_contract::{Phase, Vendor};
    use std::time::Instant;

    fn storage() -> StorageHandle {
        StorageHandle {
            owner: "t-unit".into(),
            attempt: "x".into(),
            allocation: uuid::Uuid::new_v4(),
            work_volume: "w".into(),
            metadata_volume: "m".into(),
            keeper: "k".into(),
            work: crate::storage::DEFAULT_WORK,
            metadata: crate::storage::DEFAULT_METADATA,
            uid: crate::uids::Uid::new(1_500_000).unwrap(),
            head: None,
            gitlinks: Some(vec![]),
            metadata_baseline: None,
            snapshot: None,
        }
    }

    /// Capture a planning request whose schema.json holds `text`.
    fn capture_schema(text: &str) -> Result<Capture> {
        let dir =
            std::env::temp_dir().join(format!("cordon-unit-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("schema.json");
        std::fs::write(&path, text).expect("schema file");
        let captured = capture(
            &Controller::new(crate::Engine::offline_for_tests()),
            Request {
                phase: Phase::Planning,
                vendor: Vendor::Claude,
                prompt: "plan".into(),
                schema: Some(path),
                referenced_code_hash: "code".into(),
                deadline: Instant::now() + Duration::from_secs(60),
                network_allowlist: vec![],
                attempt: format!("u-{}", uuid::Uuid::new_v4().simple()),
                storage: storage(),
                tree_check: None,
            },
        );
        let _ = std::fs::remove_dir_all(&dir);
        captured
    }

    #[test]
    fn capture_refuses_a_schema_that_does_not_compile_or_reaches_outside() {
        let good = r##"{"type":"object","definitions":{"n":{"type":"integer"}},"properties":{"n":{"$ref":"#/definitions/n"},"id":{"pattern":"^[a-z]+$"}}}"##;
        let captured = capture_schema(good).expect("a local $ref and a linear pattern compile");
        assert_eq!(captured.schema_text(), Some(good));
        let refused = [
            // External references: never fetched, never read.
            r#"{"type":"object","properties":{"a":{"$ref":"http://127.0.0.1:9/s.json"}}}"#,
            r#"{"type":"object","properties":{"a":{"$ref":"https://example.com/s.json#/x"}}}"#,
            r#"{"type":"object","properties":{"a":{"$ref":"file:///etc/passwd"}}}"#,
            r#"{"type":"object","properties":{"a":{"$ref":"other.json"}}}"#,
            r#"{"$id":"http://127.0.0.1:9/root.json","type":"object","properties":{"a":{"$ref":"b.json"}}}"#,
            // A dangling local reference.
            r##"{"type":"object","properties":{"a":{"$ref":"#/definitions/missing"}}}"##,
            // Not a valid schema.
            r#"{"type":"object","required":5}"#,
            r#"{"type":"object","properties":{"a":{"type":"strin"}}}"#,
            r#"{"type":"object","properties":{"a":{"minimum":"1"}}}"#,
            // Patterns only a backtracking engine runs.
            r#"{"type":"object","properties":{"a":{"pattern":"^(a)\\1$"}}}"#,
            r#"{"type":"object","properties":{"a":{"pattern":"^(?=a)a+$"}}}"#,
            r#"{"type":"object","patternProperties":{"^(?!x)":{}}}"#,
            // An unknown meta-schema (it would have to be fetched).
            r#"{"$schema":"http://127.0.0.1:9/meta.json","type":"object"}"#,
        ];
        for text in refused {
            match capture_schema(text) {
                Err(e) => assert_eq!(e.id(), "schema-invalid", "{text}: {e}"),
                Ok(_) => panic!("captured {text}"),
            }
        }
    }
}
