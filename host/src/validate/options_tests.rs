use super::*;

const PROFILE: &str = "rw,nosuid,nodev,noexec,size=4096,nr_inodes=16,mode=700,uid=7,gid=7";

fn refused(observed: &str) -> Vec<(Id, String)> {
    let mut d = Diff(Vec::new());
    check_area_options(
        &mut d,
        "area",
        PROFILE,
        observed,
        Id::TmpBytes,
        Id::TmpInodes,
    );
    d.0.into_iter()
        .map(|r| (r.id, r.field.unwrap_or_default()))
        .collect()
}

#[test]
fn the_same_options_in_any_order_pass() {
    assert_eq!(refused(PROFILE), []);
    assert_eq!(
        refused("gid=7,uid=7,mode=700,nr_inodes=16,size=4096,noexec,nodev,nosuid,rw"),
        []
    );
}

#[test]
fn each_difference_is_refused_under_its_own_id_and_in_order() {
    let changed = "rw,nosuid,nodev,exec,size=8192,nr_inodes=32,mode=700,uid=0,gid=7,huge=always";
    assert_eq!(
        refused(changed),
        [
            (Id::TmpBytes, "area size".to_owned()),
            (Id::TmpInodes, "area nr_inodes".to_owned()),
            (Id::WritableNosuidNodevNoexec, "area flags".to_owned()),
            (Id::UidPerAllocation, "area uid, gid".to_owned()),
            (Id::ProfileDrift, "area options".to_owned()),
        ]
    );
}
