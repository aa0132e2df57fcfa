use cordon::labels::{Allocation, Kind, Owner};
use cordon::profile::*;
use cordon::storage::{self, TaskStorage};
use cordon_contract::{Phase, Vendor};
#[tokio::main]
async fn main() {
    let engine = cordon::Engine::connect().await.unwrap();
    let img = cordon::image::build_test_image(&engine, &cordon::image::default_workspace(), false).await.unwrap();
    let owner = Owner::random("peek");
    let a = Allocation::new(&owner, "x").unwrap();
    let st = TaskStorage::create(&engine, &a, &img.id, storage::DEFAULT_WORK, storage::DEFAULT_METADATA).await.unwrap();
    for _ in 0..3 {
    let alloc = Allocation::new(&owner, "x").unwrap();
    let cli = Vendor::Claude.cli_path().to_owned();
    let p = Profile::new(ProfileSpec { phase: Phase::Planning, vendor: Vendor::Claude, image_id: img.id.clone(),
        storage: StorageRef { work_volume: st.work_volume.clone(), work: st.work, metadata_volume: st.metadata_volume.clone(), metadata: st.metadata,
            control_volume: alloc.name(Kind::Control), input_volume: alloc.name(Kind::Input), egress_volume: alloc.name(Kind::Egress) },
        allocation: alloc, limits: Limits::default(), command: vec![cli.clone(), "--version".into()], exec: vec![cli], env: vec![], gitlinks: vec![], pins: vec![], landlock_abi: DEFAULT_LANDLOCK_ABI }).unwrap();
    let r = cordon::launch::run(&engine, &p).await;
    match r { Ok(r) => println!("{}\n{}", r.output.stderr, r.output.stdout), Err(e) => println!("ERR {e}") }
    }
    st.remove(&engine).await.unwrap();
}
