//! The read-back of an invocation's network and of the containers on it (the proxy, and the
//! gate's fake vendor and DNS server), compared with the bodies [`crate::profile::egress`] built:
//! every field the agent's hardening sets, every field that would widen a container, and the
//! network's settings. Any difference refuses the start with `proxy-container`. The approved
//! commands' relay, on no network, is compared the same way (`relay-container`).

use std::collections::{BTreeMap, BTreeSet};

use bollard::models::{ContainerCreateBody, ContainerInspectResponse, NetworkInspect};
use cordon_contract::Id;
use serde_json::{json, Value};

use crate::error::Refusal;

fn refusal(id: Id, field: &str, expected: &Value, observed: &Value) -> Refusal {
    let show = |v: &Value| serde_json::to_string(v).unwrap_or_default();
    Refusal::of_field(id, field, show(expected), show(observed))
}

/// `null`, `false`, an empty list and an empty map all mean "none" to the engine.
fn none_like(v: &Value) -> bool {
    match v {
        Value::Null | Value::Bool(false) => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        Value::String(s) => s.is_empty(),
        _ => false,
    }
}

fn same(expected: &Value, observed: &Value) -> bool {
    expected == observed || none_like(expected) && none_like(observed)
}

/// A list compared as a set (the engine may reorder).
fn as_set(v: &Value) -> Value {
    match v {
        Value::Array(items) => {
            let set: BTreeSet<String> = items.iter().map(Value::to_string).collect();
            json!(set.into_iter().collect::<Vec<_>>())
        }
        other => other.clone(),
    }
}

/// What a mount list means: type, source, target, read-only, per target.
fn mounts(v: &Value) -> Value {
    let mut out = BTreeMap::new();
    for m in v.as_array().into_iter().flatten() {
        let target = m
            .get("Target")
            .or_else(|| m.get("Destination"))
            .cloned()
            .unwrap_or(Value::Null);
        let read_only = match (m.get("ReadOnly"), m.get("RW")) {
            (Some(ro), _) => ro.as_bool().unwrap_or(false),
            (None, Some(rw)) => !rw.as_bool().unwrap_or(true),
            (None, None) => false,
        };
        out.insert(
            target.to_string(),
            json!({
                "type": m.get("Type"),
                "source": m.get("Name").or_else(|| m.get("Source")),
                "read_only": read_only,
            }),
        );
    }
    json!(out)
}

/// The fields compared, as JSON pointers into the create body and the inspect response, and how.
const CONFIG_FIELDS: &[(&str, &str)] = &[
    ("/User", "/Config/User"),
    ("/Entrypoint", "/Config/Entrypoint"),
    ("/Cmd", "/Config/Cmd"),
    ("/Labels", "/Config/Labels"),
    ("/Tty", "/Config/Tty"),
    ("/OpenStdin", "/Config/OpenStdin"),
    ("/AttachStdin", "/Config/AttachStdin"),
    ("/StdinOnce", "/Config/StdinOnce"),
    ("/Hostname", "/Config/Hostname"),
    ("/ExposedPorts", "/Config/ExposedPorts"),
    ("/Volumes", "/Config/Volumes"),
];

/// HostConfig fields: each must read back as planned (unset ones as none).
const HOST_FIELDS: &[&str] = &[
    "ReadonlyRootfs",
    "CapDrop",
    "CapAdd",
    "Privileged",
    "IpcMode",
    "NetworkMode",
    "PidMode",
    "UTSMode",
    "UsernsMode",
    "CgroupnsMode",
    "PidsLimit",
    "Memory",
    "MemorySwap",
    "NanoCpus",
    "Init",
    "Binds",
    "Devices",
    "DeviceRequests",
    "DeviceCgroupRules",
    "PortBindings",
    "PublishAllPorts",
    "Links",
    "ExtraHosts",
    "Dns",
    "DnsOptions",
    "DnsSearch",
    "VolumesFrom",
    "GroupAdd",
    "Sysctls",
    "Runtime",
    "Isolation",
    "OomKillDisable",
    "AutoRemove",
    "RestartPolicy",
    "LogConfig",
];

/// HostConfig fields compared as sets.
const HOST_SET_FIELDS: &[&str] = &["SecurityOpt", "MaskedPaths", "ReadonlyPaths"];

/// Compare a networked container's read-back with its planned body. `network` is the one network
/// it may be on.
pub fn container(
    planned: &ContainerCreateBody,
    image_id: &str,
    observed: &ContainerInspectResponse,
    network: &str,
) -> Vec<Refusal> {
    sibling(
        Id::ProxyContainer,
        planned,
        image_id,
        observed,
        Some(network),
    )
}

/// Compare the approved commands' relay's read-back with its planned body: on no network.
pub fn relay(
    planned: &ContainerCreateBody,
    image_id: &str,
    observed: &ContainerInspectResponse,
) -> Vec<Refusal> {
    sibling(Id::RelayContainer, planned, image_id, observed, None)
}

/// Compare a container beside the agent with its planned body, refusing with `id`: on `network`
/// alone, or (`None`) on none at all.
fn sibling(
    id: Id,
    planned: &ContainerCreateBody,
    image_id: &str,
    observed: &ContainerInspectResponse,
    network: Option<&str>,
) -> Vec<Refusal> {
    let want = serde_json::to_value(planned).unwrap_or(Value::Null);
    let got = serde_json::to_value(observed).unwrap_or(Value::Null);
    let at = |v: &Value, p: &str| v.pointer(p).cloned().unwrap_or(Value::Null);
    let mut out = Vec::new();
    let mut compare = |field: &str, expected: Value, observed: Value| {
        if !same(&expected, &observed) {
            out.push(refusal(id, field, &expected, &observed));
        }
    };
    compare("Image", json!(image_id), at(&got, "/Image"));
    compare(
        "Config.Env",
        as_set(&at(&want, "/Env")),
        as_set(&at(&got, "/Config/Env")),
    );
    for (w, g) in CONFIG_FIELDS {
        compare(&format!("Config.{}", &w[1..]), at(&want, w), at(&got, g));
    }
    for field in HOST_FIELDS {
        let p = format!("/HostConfig/{field}");
        compare(&format!("HostConfig.{field}"), at(&want, &p), at(&got, &p));
    }
    for field in HOST_SET_FIELDS {
        let p = format!("/HostConfig/{field}");
        compare(
            &format!("HostConfig.{field}"),
            as_set(&at(&want, &p)),
            as_set(&at(&got, &p)),
        );
    }
    compare(
        "HostConfig.Mounts",
        mounts(&at(&want, "/HostConfig/Mounts")),
        mounts(&at(&got, "/HostConfig/Mounts")),
    );
    // What the engine actually mounted: exactly the planned volumes, nothing from the image.
    compare(
        "Mounts",
        mounts(&at(&want, "/HostConfig/Mounts")),
        mounts(&at(&got, "/Mounts")),
    );
    let networks: Vec<String> = observed
        .network_settings
        .as_ref()
        .and_then(|n| n.networks.as_ref())
        .map(|n| n.keys().cloned().collect())
        .unwrap_or_default();
    compare(
        "NetworkSettings.Networks",
        json!(network.into_iter().collect::<Vec<_>>()),
        json!(networks),
    );
    out
}

/// Compare the invocation network's read-back with its create request.
pub fn network(
    planned: &bollard::models::NetworkCreateRequest,
    observed: &NetworkInspect,
) -> Vec<Refusal> {
    let mut out = Vec::new();
    let mut compare = |field: &str, expected: Value, observed: Value| {
        if !same(&expected, &observed) {
            out.push(refusal(Id::ProxyContainer, field, &expected, &observed));
        }
    };
    compare(
        "Network.Name",
        json!(planned.name),
        json!(observed.name.clone().unwrap_or_default()),
    );
    compare(
        "Network.Driver",
        json!(planned.driver),
        json!(observed.driver),
    );
    compare("Network.Scope", json!("local"), json!(observed.scope));
    compare(
        "Network.Internal",
        json!(planned.internal.unwrap_or(false)),
        json!(observed.internal.unwrap_or(false)),
    );
    for (field, value) in [
        ("Network.Attachable", observed.attachable),
        ("Network.Ingress", observed.ingress),
        ("Network.EnableIPv6", observed.enable_ipv6),
        ("Network.ConfigOnly", observed.config_only),
    ] {
        compare(field, json!(false), json!(value.unwrap_or(false)));
    }
    compare(
        "Network.Labels",
        json!(planned.labels),
        json!(observed.labels),
    );
    compare(
        "Network.Options",
        json!(planned.options),
        json!(observed.options),
    );
    out
}
