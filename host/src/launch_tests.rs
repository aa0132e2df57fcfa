//! What a launch records without an engine (the recording fake): the loader made beside the
//! agent's start, and a launch whose caller keeps the record never starting without it.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::volumes::Loader;
use super::*;
use crate::engine::fake::{Recording, Script};
use crate::labels::{Allocation, Owner};
use crate::uids::Uid;

fn allocation() -> Allocation {
    let owner = Owner::new("t-loader").expect("a plain token");
    Allocation::new(&owner, "a1", Uid::new(1_700_000).expect("in range")).expect("a plain attempt")
}

/// A loader only planned is not made and has no id (what would go through it must never go by a
/// name someone else's container may hold); made, it is in the record (begun before its request),
/// and making it again sends nothing.
#[tokio::test]
async fn a_planned_loader_is_made_once_into_the_record() {
    let fake = Arc::new(Recording::new(Vec::new(), Script::default()));
    let engine = Engine::faked(fake.clone());
    let allocation = allocation();
    let mut loader = Loader::planned(&allocation, "sha256:img", &BTreeMap::new());
    assert!(loader.id().is_err(), "{loader:?}");
    assert!(fake.log().is_empty(), "planning calls nothing");
    let mut created = Created::default();
    loader.make(&engine, &created.shared()).await.expect("made");
    loader
        .make(&engine, &created.shared())
        .await
        .expect("made once");
    let id = fake
        .id_of(&allocation.name(Kind::Loader))
        .expect("the loader");
    assert_eq!(loader.id().expect("made"), id);
    assert_eq!(created.containers, [id]);
    assert_eq!(
        fake.calls_of("create container").len(),
        1,
        "{:?}",
        fake.log()
    );
}

/// A launch from `create_into` (its caller keeps the record) refuses `start`, which would put a
/// loader made at start in a record nobody removes; it touches nothing.
#[tokio::test]
async fn a_launch_whose_caller_keeps_the_record_starts_only_into_it() {
    let fake = Arc::new(Recording::new(Vec::new(), Script::default()));
    let engine = Engine::faked(fake.clone());
    let mut launch = Launch::adopt("agent".to_owned());
    launch.caller_records = true;
    let refused = launch.start(&engine).await.expect_err("refused");
    assert!(refused.to_string().contains("start_into"), "{refused}");
    assert!(fake.log().is_empty(), "{:?}", fake.log());
}

/// The proxy's vault goes only to a loader that was made, by its id: through one only planned it
/// is refused and stays where it was (never sent by a name someone else's container may hold),
/// and the refusal does not carry the credential.
#[test]
fn a_vault_goes_only_through_a_made_loader_by_its_id() {
    const KEY: &str = "sk-ant-api03-never-by-a-name";
    let credential = crate::custody::Credential::new(KEY.to_owned()).expect("a token");
    let custody = crate::custody::Custody::new(
        &credential,
        "api.anthropic.com",
        443,
        None,
        cordon_egress::vendor::Budget::default(),
        std::time::SystemTime::now() + std::time::Duration::from_secs(600),
    )
    .expect("custody");
    let vault = custody.vault().tar(1_500_001).expect("the vault's tar");
    let mut uploads = volumes::Uploads::new(b"{}", &[])
        .expect("uploads")
        .with_vault(Some(vault));
    let allocation = allocation();
    let planned = Loader::planned(&allocation, "sha256:img", &BTreeMap::new());
    let refused = volumes::take_vault(&planned, &mut uploads).expect_err("never made");
    assert!(!refused.to_string().contains(KEY), "{refused}");
    let made = Loader::Made("loader-id".to_owned());
    let delivery = volumes::take_vault(&made, &mut uploads)
        .expect("made")
        .expect("the vault was still there");
    assert!(
        format!("{delivery:?}").contains("loader-id"),
        "{delivery:?}"
    );
    assert!(volumes::take_vault(&made, &mut uploads)
        .expect("made")
        .is_none());
}
