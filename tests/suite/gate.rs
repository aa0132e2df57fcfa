//! The truth table on the real engine.

use cordon_contract::probe::ops;
use cordon_contract::Id;
use cordon_proof::gate::{self, cases, GateOptions, Layer};
use cordon_tests::{agent_image, controller, image, serial};

/// `cordon gate`: every case in all three layers passes; every protection with a validator, init
/// or probe column has a passing case in that layer that observed its id; every probe operation
/// reported its breach in some case; nothing is left behind.
#[tokio::test]
async fn gate_truth_table_passes_and_covers_every_protection() {
    let _serial = serial().await;
    let ctl = controller().await;
    let engine = ctl.engine().clone();
    let image = image(&engine).await;
    // Progress as a terminal shows it: each case starts, then finishes, counted of the total.
    let seen = std::sync::Mutex::new(Vec::new());
    let agent = agent_image(&engine).await;
    let options = GateOptions {
        agent: Some((&agent).into()),
        ..GateOptions::default()
    };
    let report = gate::run_with_progress(&ctl, &image, &options, &|at| {
        if let Ok(mut seen) = seen.lock() {
            seen.push((at.case.to_owned(), at.finished, at.done, at.total));
        }
    })
    .await
    .expect("gate ran");
    let seen = seen.into_inner().expect("progress lock");
    let names: std::collections::BTreeSet<&str> =
        report.cases.iter().map(|c| c.case.as_str()).collect();
    let finished: Vec<_> = seen.iter().filter(|s| s.1).collect();
    assert_eq!(finished.len(), names.len(), "one finish per case: {seen:?}");
    assert_eq!(
        seen.len(),
        2 * names.len(),
        "one start and one finish per case"
    );
    assert!(seen
        .iter()
        .all(|s| s.3 == names.len() && s.2 <= s.3 && names.contains(s.0.as_str())));
    assert_eq!(finished.iter().map(|s| s.2).max(), Some(names.len()));
    let failures: Vec<_> = report.cases.iter().filter(|c| !c.pass).collect();
    assert!(failures.is_empty(), "failing cases: {failures:#?}");
    assert!(
        report.leftovers.is_empty(),
        "left behind: {:?}",
        report.leftovers
    );
    assert_eq!(report.cases.len(), report.passed);
    let passing = |layer: Layer| {
        report
            .cases
            .iter()
            .filter(move |c| c.layer == layer && c.pass)
    };
    for id in Id::ALL {
        let layers = id.layers();
        for (needed, layer) in [
            (layers.validator, Layer::Validator),
            (layers.init, Layer::Init),
        ] {
            if needed {
                assert!(
                    passing(layer).any(|c| c.removed == Some(*id) && c.observed == [id.as_str()]),
                    "{id} has no passing {layer:?} case"
                );
            }
        }
        if layers.probe {
            let prefix = format!("{id}/");
            assert!(
                passing(Layer::Probe)
                    .any(|c| c.removed == Some(*id)
                        && c.observed.iter().any(|o| o.starts_with(&prefix))),
                "{id} has no passing probe case that observed its breach"
            );
        }
    }
    for op in ops::all() {
        // The agent image's file modes guard it, which no gate row can remove: its breach is
        // shown by `suite::image::the_interpreter_runs_no_cordon_binary`.
        if op.action == ops::EXEC_VIA_INTERPRETER.action {
            continue;
        }
        let suffix = format!("/{}/{}", op.probe, op.action);
        assert!(
            passing(Layer::Probe).any(|c| c.observed.iter().any(|o| o.ends_with(&suffix))),
            "no case made {}/{} report its breach",
            op.probe,
            op.action
        );
    }
    // C0 in every phase, all three layers, nothing observed: in the test image and in the
    // production agent image.
    for phase in cordon_contract::Phase::ALL {
        for name in [
            format!("C0/{phase}/claude"),
            format!("C0/{phase}/claude/agent"),
        ] {
            let clean = report
                .cases
                .iter()
                .filter(|c| c.case == name && c.pass && c.observed.is_empty())
                .count();
            assert_eq!(clean, 3, "{name}");
        }
    }
    let cells: usize = cases::all()
        .iter()
        .map(|c| usize::from(c.validator) + usize::from(c.init) + usize::from(c.probe))
        .sum();
    assert_eq!(report.cases.len(), cells);
}

/// The gate's JSON has the documented shape, in all three layers.
#[tokio::test]
async fn gate_json_shape() {
    let ctl = controller().await;
    let engine = ctl.engine().clone();
    let image = image(&engine).await;
    let options = GateOptions {
        parallel: 3,
        filter: Some("rootfs-readonly".into()),
        agent: None,
    };
    let report = gate::run(&ctl, &image, &options).await.expect("gate ran");
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["failed"], 0, "{json}");
    let rows = json["cases"].as_array().unwrap();
    for layer in ["validator", "init", "probe"] {
        let row = rows
            .iter()
            .find(|r| r["case"] == "rootfs-readonly" && r["layer"] == layer)
            .unwrap_or_else(|| panic!("no {layer} row: {json}"));
        for key in ["case", "layer", "removed", "expected", "observed", "pass"] {
            assert!(row.get(key).is_some(), "missing {key} in {row}");
        }
        assert_eq!(row["removed"], "rootfs-readonly");
    }
    let validator = rows.iter().find(|r| r["layer"] == "validator").unwrap();
    assert_eq!(
        validator["expected"],
        serde_json::json!(["rootfs-readonly"])
    );
    let probe = rows
        .iter()
        .find(|r| r["case"] == "rootfs-readonly" && r["layer"] == "probe")
        .unwrap();
    assert_eq!(
        probe["expected"],
        serde_json::json!([
            "rootfs-readonly/read-only-isolation/rootfs-create",
            "rootfs-readonly/read-only-isolation/rootfs-statfs"
        ])
    );
}
