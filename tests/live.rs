//! The live probe: the questions and planning scenarios with the real CLI against the real vendor,
//! through the egress proxy (its allowlist holds only the API host). It needs a credential and
//! reaches the internet, so it is its own test target, not run by `cargo test --workspace`:
//!
//!     CORDON_LIVE=1 ANTHROPIC_API_KEY=... cargo test -p cordon-tests --test live
//!
//! (`CLAUDE_CODE_OAUTH_TOKEN` works too). Without `CORDON_LIVE=1` and a credential it fails and
//! says why: it never passes without having run.

#![allow(clippy::unwrap_used)]
// A test scenario reads top to bottom, however long.
#![allow(clippy::too_many_lines)]

use std::time::{Duration, Instant};

use cordon::invoke::{
    capture, default_allowlist, start, Credential, CredentialKind, ImageSource, Options, Request,
};
use cordon::task;
use cordon_contract::{Phase, Vendor};
use cordon_tests::{agent_image, owned, prepare_request, Repo};

fn credential() -> Credential {
    assert_eq!(
        std::env::var("CORDON_LIVE").as_deref(),
        Ok("1"),
        "the live probe runs only with CORDON_LIVE=1 (and a credential): it reaches the vendor"
    );
    if let Ok(token) = std::env::var("CLAUDE_CODE_OAUTH_TOKEN") {
        return Credential::of(CredentialKind::OAuthToken, token).unwrap();
    }
    let key = std::env::var("ANTHROPIC_API_KEY")
        .expect("the live probe needs CLAUDE_CODE_OAUTH_TOKEN or ANTHROPIC_API_KEY");
    Credential::of(CredentialKind::ApiKey, key).unwrap()
}

#[tokio::test]
async fn live_questions_and_planning_reach_the_vendor_through_the_proxy() {
    let credential = credential();
    let s = owned("live").await;
    let agent = agent_image(&s.engine).await;
    let repo = Repo::new("live");
    repo.write(
        "README.md",
        b"# live\nThis repository holds one file.\n",
        0o644,
    );
    let head = repo.commit();
    let storage = task::prepare(
        &s.ctl.clone().with_helper_image(&agent.built.id),
        &prepare_request(&s.owner, &repo, &head),
    )
    .await
    .expect("task storage");
    let dir = std::env::temp_dir().join(format!("cordon-live-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let schema = dir.join("schema.json");
    std::fs::write(
        &schema,
        r#"{"type":"object","required":["files"],"additionalProperties":false,"properties":{"files":{"type":"integer"}}}"#,
    )
    .unwrap();
    for (phase, prompt, schema) in [
        (
            Phase::Questions,
            "How many files does this repository hold? Read README.md.",
            None,
        ),
        (
            Phase::Planning,
            "Count the files in this repository.",
            Some(schema.clone()),
        ),
    ] {
        let request = Request {
            phase,
            vendor: Vendor::Claude,
            prompt: prompt.to_owned(),
            schema,
            referenced_code_hash: head.clone(),
            deadline: Instant::now() + Duration::from_secs(300),
            network_allowlist: default_allowlist(Vendor::Claude),
            attempt: format!("live-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]),
            storage: storage.clone(),
        };
        let options = Options::new(ImageSource::Agent {
            id: agent.built.id.clone(),
            exec: agent.exec.clone(),
        });
        let handle = start(
            &s.ctl,
            capture(&s.ctl, request).unwrap(),
            Some(credential.clone()),
            options,
        )
        .await
        .unwrap();
        let result = handle.settled().await;
        assert!(result.answer.is_some(), "{phase}: {result:#?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
    task::remove(&s.ctl, &storage).await.unwrap();
    s.finish().await;
}
