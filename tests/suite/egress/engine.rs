//! Egress on the real engine: an invocation with an allowlist gets its own network and proxy
//! (validated like the agent, attested, removed with the rest), a proxy container that differs
//! from its profile is refused before anything starts, recovery removes what a killed
//! invocation left, and the proxy is told every address of this host, so that an address no
//! other rule denies is refused as the host's own.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use cordon::engine::objects::{self, Owned};
use cordon::launch::egress::{EgressPlan, Fixtures};
use cordon::launch::{self, Prepared};
use cordon::profile::{EgressSpec, Profile};
use cordon_contract::{probe::fixture::VENDOR_HOST, Id, Phase};
use cordon_tests::{fixture, Fixture, Run};

/// A profile over the fixture's storage with egress to the fake vendor (mapped; no route off the
/// machine).
fn egress_profile(f: &Fixture, run: &Run) -> Profile {
    let base = f.profile(run);
    let mut spec = base.spec().clone();
    spec.egress = Some(EgressSpec {
        internal: true,
        ..EgressSpec::allowing(&[VENDOR_HOST.to_owned()])
    });
    Profile::new(spec).expect("egress profile")
}

fn fixtures() -> Fixtures {
    let ca = cordon_fake_vendor::ca::generate(&[VENDOR_HOST]).expect("test CA");
    Fixtures {
        cert_pem: ca.cert_pem,
        key_pem: ca.key_pem,
        mapped: vec![VENDOR_HOST.to_owned()],
        dns: None,
        image: None,
        api_key_sha256: None,
    }
}

fn plan_of(prepared: &mut Prepared) -> &mut EgressPlan {
    prepared.egress.as_mut().expect("the profile has egress")
}

async fn owned_now(f: &Fixture) -> Owned {
    objects::list_owned(&f.engine, &f.owner)
        .await
        .expect("listing")
}

/// The proxy is validated, started before the agent, attests what it enforces (the mapping the
/// fixture added included), and goes with everything else; the agent's environment names the
/// forwarder and its policy carries it.
#[tokio::test]
async fn an_invocation_with_egress_has_its_own_network_and_proxy_and_leaves_nothing() {
    let f = fixture("t-egress-run").await;
    let profile = egress_profile(&f, &Run::vendor(Phase::Questions, &["--version"]));
    assert!(profile
        .env()
        .contains(&"HTTPS_PROXY=http://127.0.0.1:3128".to_owned()));
    let mut prepared = Prepared::new(&f.engine, &profile).expect("plan");
    assert!(prepared.plan.policy.egress.is_some());
    plan_of(&mut prepared).fixtures = Some(fixtures());
    let mut launch = launch::create(&f.ctl, &profile, prepared)
        .await
        .expect("create");
    assert!(launch.refusals.is_empty(), "{:?}", launch.refusals);
    let during = owned_now(&f).await;
    assert_eq!(during.networks.len(), 1, "{during:?}");
    let since = std::time::SystemTime::now();
    launch.start(&f.engine).await.expect("start");
    let code = launch
        .wait(&f.engine, Duration::from_secs(60))
        .await
        .expect("wait");
    let output = launch.output(&f.engine).await.expect("output");
    assert_eq!(code, 0, "{output:?}");
    let verdict = launch.verdict(&output);
    assert!(verdict.trusted(), "{output:?}");
    assert!(
        matches!(
            verdict,
            launch::InitVerdict::Attested {
                egress_forward: Some(3128),
                ..
            }
        ),
        "the init attests its forwarder: {verdict:?}"
    );
    let egress = launch.egress.clone().expect("egress");
    let attested = egress.attestation.clone().expect("the proxy attested");
    assert!(attested.skipped.is_empty(), "{attested:?}");
    assert_eq!(attested.allow, vec![format!("{VENDOR_HOST}:443")]);
    let vendor = egress.vendor.expect("the vendor's address");
    assert_eq!(attested.map, vec![format!("{VENDOR_HOST}={vendor}:443")]);
    // The agent's container starts beside the proxy, but its policy (the loader's last upload)
    // goes in only once the proxy's start returned and it attested.
    let events = container_events(&f, since).await;
    let at = |action: &str, name: &str| -> Vec<i64> {
        let of = |e: &&(i64, String, String)| e.1 == action && e.2.starts_with(name);
        events.iter().filter(of).map(|e| e.0).collect()
    };
    let allocation = profile.allocation().id;
    let proxy_started = at("start", &format!("cordon-proxy-{allocation}"));
    let uploads = at("extract-to-dir", &format!("cordon-loader-{allocation}"));
    assert_eq!(proxy_started.len(), 1, "{events:?}");
    assert!(
        uploads
            .last()
            .is_some_and(|policy| *policy > proxy_started[0]),
        "the policy went in before the proxy had started: {events:?}"
    );
    launch.finish(&f.engine).await.expect("cleanup");
    f.finish().await;
}

/// The engine's container events from `since` until now: (time in ns, action, name).
async fn container_events(f: &Fixture, since: std::time::SystemTime) -> Vec<(i64, String, String)> {
    let filters =
        std::collections::HashMap::from([("type".to_owned(), vec!["container".to_owned()])]);
    cordon_tests::engine_events(&f.engine, since, filters)
        .await
        .into_iter()
        .map(|e| {
            let name = e.actor.and_then(|a| a.attributes?.get("name").cloned());
            (
                e.time_nano.unwrap_or_default(),
                e.action.unwrap_or_default(),
                name.unwrap_or_default(),
            )
        })
        .collect()
}

/// A proxy that ends before it attests ends the launch, and the agent's container, which started
/// beside it, is killed with its init still waiting for the policy: no code of the agent's ran.
#[tokio::test]
async fn a_proxy_that_never_attests_leaves_the_agents_init_without_a_policy() {
    let f = fixture("t-egress-unattested").await;
    let profile = egress_profile(&f, &Run::vendor(Phase::Questions, &["--version"]));
    let mut prepared = Prepared::new(&f.engine, &profile).expect("plan");
    plan_of(&mut prepared).fixtures = Some(fixtures());
    plan_of(&mut prepared).edit_proxy = Some(|b| {
        let program = b.entrypoint.as_ref().and_then(|e| e.first()).cloned();
        b.entrypoint = Some(vec![
            program.expect("the proxy's program"),
            "--no-such-flag".into(),
        ]);
    });
    let mut launch = launch::create(&f.ctl, &profile, prepared)
        .await
        .expect("create");
    // Started past the validator on purpose: the proxy's own refusal is what is tried here.
    assert!(!launch.refusals.is_empty());
    let failed = launch
        .start(&f.engine)
        .await
        .expect_err("a proxy that never attests");
    assert!(
        failed.to_string().contains("before it said it listens"),
        "{failed}"
    );
    launch
        .wait(&f.engine, Duration::from_secs(30))
        .await
        .expect("the agent's container was stopped");
    let output = launch.output(&f.engine).await.expect("output");
    assert!(
        matches!(launch.verdict(&output), launch::InitVerdict::Missing { .. }),
        "the init got its policy: {output:?}"
    );
    launch.finish(&f.engine).await.expect("cleanup");
    cordon_tests::assert_only_storage(&f.engine, &f.owner, "unattested").await;
    f.finish().await;
}

/// The proxy is told the fixtures' addresses before any of them starts: the ones a fresh network
/// hands out first. A fixture that took another (here the DNS server, started first, took the
/// vendor's) ends the launch before the proxy starts (`egress-fixture-address`).
#[tokio::test]
async fn a_fixture_on_another_address_than_the_proxy_was_told_is_refused() {
    let f = fixture("t-egress-fixture-address").await;
    let profile = egress_profile(&f, &Run::vendor(Phase::Questions, &["--version"]));
    let mut prepared = Prepared::new(&f.engine, &profile).expect("plan");
    plan_of(&mut prepared).fixtures = Some(Fixtures {
        dns: Some(|vendor| {
            cordon_fake_vendor::dns::Script::new()
                .answer(
                    "vendor.example",
                    cordon_fake_vendor::dns::Answer::Addresses(vec![vendor]),
                )
                .to_args()
        }),
        ..fixtures()
    });
    let mut launch = launch::create(&f.ctl, &profile, prepared)
        .await
        .expect("create");
    assert!(launch.refusals.is_empty(), "{:?}", launch.refusals);
    let egress = launch.egress.clone().expect("egress");
    let (vendor, resolver) = (
        egress.vendor.expect("vendor"),
        egress.resolver.expect("resolver"),
    );
    assert_eq!(u32::from(resolver), u32::from(vendor) + 1, "{egress:?}");
    objects::start_container(&f.engine, "resolver", &egress.fixtures[1])
        .await
        .expect("the DNS server, first");
    let refused = launch
        .start(&f.engine)
        .await
        .expect_err("the vendor took the address after the DNS server's");
    assert_eq!(refused.id(), "egress-fixture-address", "{refused}");
    assert!(
        refused.to_string().contains(&vendor.to_string()),
        "{refused}"
    );
    let proxy = objects::inspect_container(&f.engine, &egress.proxy)
        .await
        .expect("inspect")
        .expect("the proxy");
    assert_eq!(
        proxy.state.and_then(|s| s.status),
        Some(bollard::models::ContainerStateStatusEnum::CREATED),
        "the proxy never started"
    );
    launch.finish(&f.engine).await.expect("cleanup");
    cordon_tests::assert_only_storage(&f.engine, &f.owner, "fixture address").await;
    f.finish().await;
}

/// Each way a proxy container could be widened after its profile was built is refused with
/// `proxy-container` and the field; nothing is started and nothing is left.
#[tokio::test]
async fn a_proxy_container_that_differs_from_its_profile_is_refused() {
    let f = fixture("t-egress-refuse").await;
    let profile = egress_profile(&f, &Run::vendor(Phase::Questions, &["--version"]));
    type Edit = fn(&mut bollard::models::ContainerCreateBody);
    let edits: Vec<(&str, Edit)> = vec![
        ("HostConfig.ReadonlyRootfs", |b| {
            b.host_config.as_mut().unwrap().readonly_rootfs = Some(false)
        }),
        ("HostConfig.CapAdd", |b| {
            b.host_config.as_mut().unwrap().cap_add = Some(vec!["NET_ADMIN".into()])
        }),
        ("HostConfig.Privileged", |b| {
            b.host_config.as_mut().unwrap().privileged = Some(true)
        }),
        ("HostConfig.PublishAllPorts", |b| {
            b.host_config.as_mut().unwrap().publish_all_ports = Some(true)
        }),
        ("HostConfig.PidMode", |b| {
            b.host_config.as_mut().unwrap().pid_mode = Some("host".into())
        }),
        ("Config.User", |b| b.user = Some("0:0".into())),
        ("Config.Env", |b| b.env = Some(vec!["LD_PRELOAD=/x".into()])),
        ("Config.Entrypoint", |b| {
            b.entrypoint
                .as_mut()
                .unwrap()
                .extend(["--skip".to_owned(), "sni".to_owned()])
        }),
        ("HostConfig.PidsLimit", |b| {
            b.host_config.as_mut().unwrap().pids_limit = Some(100_000)
        }),
        ("HostConfig.Mounts", |b| {
            b.host_config.as_mut().unwrap().mounts = Some(vec![])
        }),
    ];
    for (field, edit) in edits {
        let mut prepared = Prepared::new(&f.engine, &profile).expect("plan");
        plan_of(&mut prepared).edit_proxy = Some(edit);
        let launch = launch::create(&f.ctl, &profile, prepared)
            .await
            .expect("create");
        let ids: Vec<Id> = launch.refusals.iter().map(|r| r.id).collect();
        assert!(
            !ids.is_empty() && ids.iter().all(|id| *id == Id::ProxyContainer),
            "{field}: {:?}",
            launch.refusals
        );
        assert!(
            launch
                .refusals
                .iter()
                .any(|r| r.field.as_deref() == Some(field)),
            "{field}: {:?}",
            launch.refusals
        );
        launch.finish(&f.engine).await.expect("cleanup");
        cordon_tests::assert_only_storage(&f.engine, &f.owner, field).await;
    }
    f.finish().await;
}

/// An invocation whose controller died mid-run (its record gone with it) leaves a network and a
/// running proxy; `recover` finds them by their labels and removes them.
#[tokio::test]
async fn recover_removes_a_killed_invocations_proxy_and_network() {
    let f = fixture("t-egress-recover").await;
    let profile = egress_profile(&f, &Run::vendor(Phase::Questions, &["--version"]));
    let mut prepared = Prepared::new(&f.engine, &profile).expect("plan");
    plan_of(&mut prepared).fixtures = Some(fixtures());
    let mut record = cordon::engine::pending::Created::default();
    let mut launch = launch::create_into(&f.ctl, &profile, prepared, &mut record)
        .await
        .expect("create");
    launch.start_proxy(&f.engine).await.expect("proxy");
    // The controller is gone: its record with it.
    drop(launch);
    drop(record);
    let left = owned_now(&f).await;
    assert_eq!(left.networks.len(), 1, "{left:?}");
    let report = cordon::task::recover::recover(&f.ctl, &f.owner, false)
        .await
        .expect("recover");
    // Only the storage is left for `finish` to remove.
    cordon_tests::assert_only_storage(&f.engine, &f.owner, &format!("{report:?}")).await;
    f.finish().await;
}

/// This host's addresses as seen here, not through `launch::egress::host_addresses`: every address
/// of its interfaces (getifaddrs) and every engine network's IPAM gateway.
async fn host_addresses_seen(engine: &cordon::engine::Engine) -> BTreeSet<IpAddr> {
    let mut seen = BTreeSet::new();
    for interface in nix::ifaddrs::getifaddrs().expect("getifaddrs") {
        let Some(address) = interface.address else {
            continue;
        };
        if let Some(v4) = address.as_sockaddr_in() {
            seen.insert(IpAddr::V4(v4.ip()));
        } else if let Some(v6) = address.as_sockaddr_in6() {
            seen.insert(IpAddr::V6(v6.ip()));
        }
    }
    let networks = engine
        .docker()
        .list_networks(None::<bollard::query_parameters::ListNetworksOptions>)
        .await
        .expect("list networks");
    for network in networks {
        let configs = network.ipam.and_then(|i| i.config).unwrap_or_default();
        for gateway in configs.into_iter().filter_map(|c| c.gateway) {
            seen.insert(gateway.parse().expect("a gateway is an address"));
        }
    }
    seen
}

/// The values of a flag in a container's argv as the engine reads it back.
fn flag_values(inspected: &bollard::models::ContainerInspectResponse, flag: &str) -> Vec<String> {
    let config = inspected.config.clone().unwrap_or_default();
    let argv: Vec<String> = config
        .entrypoint
        .unwrap_or_default()
        .into_iter()
        .chain(config.cmd.unwrap_or_default())
        .collect();
    argv.windows(2)
        .filter(|w| w[0] == flag)
        .map(|w| w[1].clone())
        .collect()
}

/// The proxy's read-back arguments name every address of this host's interfaces and every engine
/// network's gateway (its own invocation network's included), as listed here.
#[tokio::test]
async fn the_proxy_is_told_every_host_address_and_every_engine_gateway() {
    let f = fixture("t-egress-hostaddr").await;
    let profile = egress_profile(&f, &Run::vendor(Phase::Questions, &["--version"]));
    let before = host_addresses_seen(&f.engine).await;
    let prepared = Prepared::new(&f.engine, &profile).expect("plan");
    let launch = launch::create(&f.ctl, &profile, prepared)
        .await
        .expect("create");
    assert!(launch.refusals.is_empty(), "{:?}", launch.refusals);
    let after = host_addresses_seen(&f.engine).await;
    let egress = launch.egress.clone().expect("egress");
    let proxy = objects::inspect_container(&f.engine, &egress.proxy)
        .await
        .expect("inspect")
        .expect("the proxy");
    let told: BTreeSet<IpAddr> = flag_values(&proxy, "--host-address")
        .iter()
        .map(|a| a.parse().expect("an address"))
        .collect();
    // Here before the create and still after: here when the launch listed them (the machine's
    // other work may add or take away interfaces and networks meanwhile).
    let mut want: BTreeSet<IpAddr> = before.intersection(&after).copied().collect();
    let gateway = egress.gateway.expect("the invocation network's gateway");
    want.insert(IpAddr::V4(gateway));
    for always in ["127.0.0.1", "172.17.0.1"] {
        assert!(
            want.contains(&always.parse().unwrap()),
            "{always}: {want:?}"
        );
    }
    let missing: Vec<&IpAddr> = want.difference(&told).collect();
    assert!(
        missing.is_empty(),
        "the proxy is not told {missing:?}; told {told:?}"
    );
    launch.finish(&f.engine).await.expect("cleanup");
    f.finish().await;
}

/// The public-looking subnet of the engine network the host-own removal case makes: classified
/// global, a block no service this machine uses lives in (the US DoD's 11/8), routed to a bridge
/// of this machine for the seconds the test holds it.
const PUBLIC_LOOKING_SUBNET: &str = "11.254.254.248/29";
const PUBLIC_LOOKING_GATEWAY: Ipv4Addr = Ipv4Addr::new(11, 254, 254, 249);

/// The host-own rule's removal case: an engine network with a public-looking subnet makes its
/// gateway an address of this host, on a local bridge, that no other rule denies. Answered for an
/// allowed name by the scripted DNS server, it is refused (403, `egress-address`, host-own) by the
/// proxy told the host's addresses as a launch tells it; the same request, the address left out of
/// the list, is admitted and dialed: at a listener this test holds on that address, so the dial is
/// this machine's own (the kernel routes a local address locally), never off it.
#[tokio::test]
async fn a_public_looking_host_address_is_refused_only_as_the_hosts_own() {
    use cordon_egress::address::{classify, Class};
    use cordon_egress::allowlist::Allowlist;
    use cordon_egress::decide::Rules;
    use cordon_egress::proxy::{handle_reported, Config, Outcome};
    use cordon_egress::resolver::UpstreamResolver;
    use cordon_egress::Rejection;
    use cordon_fake_vendor::dns::{self, Answer};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let f = cordon_tests::owned("t-egress-hostown").await;
    let gateway = IpAddr::V4(PUBLIC_LOOKING_GATEWAY);
    assert_eq!(
        classify(gateway, &[]),
        Class::Global,
        "the case needs an address no other rule denies"
    );
    let allocation = cordon::labels::Allocation::new(
        &f.owner,
        "hostown",
        cordon::uids::Uid::new(1_100_000).unwrap(),
    )
    .unwrap();
    let kind = cordon::labels::Kind::Network;
    let request = bollard::models::NetworkCreateRequest {
        name: allocation.name(kind),
        driver: Some("bridge".into()),
        internal: Some(true),
        labels: Some(allocation.labels(kind)),
        ipam: Some(bollard::models::Ipam {
            config: Some(vec![bollard::models::IpamConfig {
                subnet: Some(PUBLIC_LOOKING_SUBNET.into()),
                gateway: Some(gateway.to_string()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    };
    let network = f
        .engine
        .docker()
        .create_network(request)
        .await
        .expect("the public-looking network")
        .id;

    // A local address now: a listener binds to it (the kernel routes it to this machine).
    let listener = tokio::net::TcpListener::bind(SocketAddr::new(gateway, 0))
        .await
        .expect("the gateway is this machine's");
    let port = listener.local_addr().unwrap().port();
    let name = "hostown.vendor.test";
    let script = dns::Script::new().answer(name, Answer::Addresses(vec![gateway]));
    let server = dns::start(SocketAddr::from(([127, 0, 0, 1], 0)), script)
        .await
        .unwrap();
    let resolver = UpstreamResolver::with_timeout(server.addr(), Duration::from_secs(2));
    let host_own = cordon::launch::egress::host_addresses(&f.engine)
        .await
        .expect("the host's addresses");
    let config = |host_own: Vec<IpAddr>| {
        Arc::new(Config {
            connect_timeout: Duration::from_secs(2),
            hello_deadline: Duration::from_secs(2),
            ..Config::new(Rules {
                allowlist: Allowlist::parse(&[format!("{name}:{port}")]).unwrap(),
                mappings: vec![],
                host_own,
                skip: Default::default(),
            })
        })
    };
    let connect = |config: Arc<Config>| {
        let resolver = resolver.clone();
        async move {
            let (mut client, server) = tokio::io::duplex(64 * 1024);
            let head = format!("CONNECT {name}:{port} HTTP/1.1\r\nHost: {name}:{port}\r\n\r\n");
            client.write_all(head.as_bytes()).await.unwrap();
            let task =
                tokio::spawn(async move { handle_reported(server, &config, &resolver).await });
            let mut answer = vec![0u8; 256];
            let n = tokio::time::timeout(Duration::from_secs(10), client.read(&mut answer))
                .await
                .expect("answered in time")
                .unwrap();
            drop(client);
            let report = tokio::time::timeout(Duration::from_secs(10), task)
                .await
                .expect("ended in time")
                .unwrap();
            let text = String::from_utf8_lossy(&answer[..n]).into_owned();
            (text.lines().next().unwrap_or_default().to_owned(), report)
        }
    };

    // Told the host's addresses: refused as the host's own, nothing dialed.
    let (status, report) = connect(config(host_own.clone())).await;
    assert_eq!(status, "HTTP/1.1 403 Forbidden");
    assert_eq!(report.outcome, Outcome::Refused(Rejection::Address));
    let detail = report.detail.clone().unwrap_or_default();
    assert!(detail.contains("host-own"), "{detail}");
    assert_eq!(report.dialed, None);
    assert!(
        tokio::time::timeout(Duration::from_millis(200), listener.accept())
            .await
            .is_err(),
        "the host's own address was dialed"
    );
    assert!(host_own.contains(&gateway), "{host_own:?}");

    // The same request with the address left out of the list: admitted, and dialed here.
    let without: Vec<IpAddr> = host_own.into_iter().filter(|a| *a != gateway).collect();
    let (status, report) = connect(config(without)).await;
    assert_eq!(status, "HTTP/1.1 200 Connection Established");
    assert_eq!(report.dialed, Some(SocketAddr::new(gateway, port)));
    assert!(
        matches!(report.outcome, Outcome::HelloRefused(_)),
        "{report:?}"
    );
    let (_accepted, from) = tokio::time::timeout(Duration::from_secs(2), listener.accept())
        .await
        .expect("the dial reached this machine's listener")
        .unwrap();
    assert_eq!(
        from.ip(),
        gateway,
        "a local dial comes from the local address"
    );
    let asked: Vec<String> = server.queries().into_iter().map(|q| q.name).collect();
    assert_eq!(asked, [name; 4]);

    drop(listener);
    objects::remove_network(&f.engine, &network)
        .await
        .expect("removing the public-looking network");
    f.finish().await;
}
