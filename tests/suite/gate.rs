//! The truth table on the real engine.

use cordon::gate::{self, cases, GateOptions, Layer};
use cordon::labels::Owner;
use cordon_contract::Id;
use cordon_tests::{engine, image, serial};

/// `cordon gate`: every case in both layers passes, every protection with a validator or init
/// column has a case in that layer that observed exactly its id, and nothing is left behind.
#[tokio::test]
async fn gate_truth_table_passes_and_covers_every_protection() {
    let _serial = serial().await;
    let engine = engine().await;
    let image = image(&engine).await;
    let report = gate::run(&engine, &image, &GateOptions::default())
        .await
        .expect("gate ran");
    let failures: Vec<_> = report.cases.iter().filter(|c| !c.pass).collect();
    assert!(failures.is_empty(), "failing cases: {failures:#?}");
    assert!(
        report.leftovers.is_empty(),
        "left behind: {:?}",
        report.leftovers
    );
    assert_eq!(report.cases.len(), report.passed);
    for id in Id::ALL {
        let layers = id.layers();
        for (needed, layer) in [
            (layers.validator, Layer::Validator),
            (layers.init, Layer::Init),
        ] {
            if needed {
                assert!(
                    report.cases.iter().any(|c| c.removed == Some(*id)
                        && c.layer == layer
                        && c.pass
                        && c.observed == [id.as_str()]),
                    "{id} has no passing {layer:?} case"
                );
            }
        }
    }
    // C0 in every phase, both layers.
    for phase in cordon_contract::Phase::ALL {
        let name = format!("C0/{phase}/claude");
        assert_eq!(
            report
                .cases
                .iter()
                .filter(|c| c.case == name && c.pass && c.observed.is_empty())
                .count(),
            2,
            "{name}"
        );
    }
    assert_eq!(
        report.cases.len(),
        cases::all()
            .iter()
            .map(|c| usize::from(c.validator) + usize::from(c.init))
            .sum::<usize>()
    );
}

/// The gate's JSON has the documented shape.
#[tokio::test]
async fn gate_json_shape() {
    let engine = engine().await;
    let image = image(&engine).await;
    let options = GateOptions {
        parallel: 2,
        filter: Some("rootfs-readonly".into()),
    };
    let report = gate::run(&engine, &image, &options)
        .await
        .expect("gate ran");
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["passed"], 2);
    assert_eq!(json["failed"], 0);
    let case = &json["cases"][0];
    for key in ["case", "layer", "removed", "expected", "observed", "pass"] {
        assert!(case.get(key).is_some(), "missing {key} in {case}");
    }
    assert_eq!(case["removed"], "rootfs-readonly");
    assert_eq!(case["expected"], serde_json::json!(["rootfs-readonly"]));
    let _ = Owner::random("unused");
}
