use super::*;

const SENTINEL: &str = "sk-ant-api03-cordon-sentinel-0123456789abcdef";
const HOST: &str = "api.anthropic.com";

fn to(header: CredentialHeader) -> Terminated<'static> {
    Terminated {
        host: HOST,
        header,
        sentinel: SENTINEL,
        routes: &VENDOR_ROUTES,
        skip: Skipped::default(),
    }
}

/// Request headers as a test writes them: a name, and its value's bytes.
type Headers = Vec<(&'static str, Vec<u8>)>;

fn key_value() -> Vec<u8> {
    SENTINEL.as_bytes().to_vec()
}

fn bearer_value() -> Vec<u8> {
    format!("Bearer {SENTINEL}").into_bytes()
}

/// Admit `method target` with `headers` (name, value) for an API key.
fn admit_key(
    method: &str,
    target: &str,
    headers: &[(&str, Vec<u8>)],
) -> Result<Admitted, VendorRejection> {
    admit_with(&to(CredentialHeader::ApiKey), method, target, headers)
}

fn admit_with(
    to: &Terminated<'_>,
    method: &str,
    target: &str,
    headers: &[(&str, Vec<u8>)],
) -> Result<Admitted, VendorRejection> {
    let borrowed: Vec<(&str, &[u8])> = headers.iter().map(|(n, v)| (*n, v.as_slice())).collect();
    admit(
        to,
        &Head {
            method,
            target,
            headers: &borrowed,
        },
    )
}

/// A request the CLI sends: Host, its key, and what else it always sends.
fn usual(credential: (&'static str, Vec<u8>)) -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("host", HOST.as_bytes().to_vec()),
        ("content-type", b"application/json".to_vec()),
        credential,
        ("anthropic-version", b"2023-06-01".to_vec()),
        ("user-agent", b"claude-cli/2.1.332 (external, cli)".to_vec()),
    ]
}

#[test]
fn every_measured_route_is_admitted_and_the_swap_is_the_credential_header() {
    for route in VENDOR_ROUTES {
        let mut targets = vec![route.path.to_owned()];
        targets.extend(route.queries.iter().map(|q| format!("{}?{q}", route.path)));
        for target in targets {
            let admitted = admit_key(route.method, &target, &usual(("x-api-key", key_value())))
                .unwrap_or_else(|e| panic!("{} {target}: {e:?}", route.method));
            assert_eq!(admitted.swap(), Some(2));
            assert_eq!(admitted.route(), route);
            let bearer = admit_with(
                &to(CredentialHeader::Bearer),
                route.method,
                &target,
                &usual(("authorization", bearer_value())),
            )
            .unwrap_or_else(|e| panic!("bearer {} {target}: {e:?}", route.method));
            assert_eq!(bearer.swap(), Some(2));
        }
    }
}

#[test]
fn anything_but_a_measured_method_path_and_query_is_vendor_path() {
    let refused = [
        ("GET", "/v1/messages"),
        ("PUT", "/v1/messages"),
        ("post", "/v1/messages"),
        ("CONNECT", "/v1/messages"),
        ("POST", "/v1/messages/"),
        ("POST", "//v1/messages"),
        ("POST", "/v1//messages"),
        ("POST", "/v1/../v1/messages"),
        ("POST", "/v1/./messages"),
        ("POST", "/v1/%6dessages"),
        ("POST", "/v1%2fmessages"),
        ("POST", "/V1/messages"),
        ("POST", "/v1/messages;x"),
        ("POST", "/v1/messages#frag"),
        ("POST", "/v1/messages?beta=false"),
        ("POST", "/v1/messages?beta=true&x=1"),
        ("POST", "/v1/messages?"),
        ("POST", "/v1/messages?beta=true?"),
        ("POST", "/v1/messages/batches"),
        ("POST", "/v1/complete"),
        ("POST", "/v1/files"),
        ("GET", "/v1/models"),
        ("GET", "/api/claude_code/settings?x=1"),
        ("GET", "/api/claude_code/settings/"),
        ("POST", "/api/event_logging/v2/batch"),
        ("GET", "/api/claude_cli/bootstrap"),
        ("GET", "/api/eval/abc"),
        ("POST", "https://api.anthropic.com/v1/messages"),
        ("POST", "api.anthropic.com:443"),
        ("OPTIONS", "*"),
        ("POST", ""),
        ("POST", "v1/messages"),
    ];
    for (method, target) in refused {
        assert_eq!(
            admit_key(method, target, &usual(("x-api-key", key_value()))),
            Err(VendorRejection::Path),
            "{method} {target}"
        );
    }
}

#[test]
fn the_host_header_must_name_the_vendor_host_once() {
    let with_host = |hosts: &[&str]| {
        let mut headers: Vec<(&str, Vec<u8>)> = hosts
            .iter()
            .map(|h| ("host", h.as_bytes().to_vec()))
            .collect();
        headers.push(("x-api-key", key_value()));
        admit_key("POST", "/v1/messages", &headers)
    };
    for good in [
        &[HOST][..],
        &["api.anthropic.com:443"],
        &["API.Anthropic.COM"],
    ] {
        assert!(with_host(good).is_ok(), "{good:?}");
    }
    for bad in [
        &[][..],
        &[HOST, HOST],
        &["evil.test"],
        &["api.anthropic.com:444"],
        &["api.anthropic.com:"],
        &["api.anthropic.com."],
        &["api.anthropic.com.evil.test"],
        &["xapi.anthropic.com"],
        &["api.anthropic.com@evil.test"],
        &[""],
    ] {
        assert_eq!(with_host(bad), Err(VendorRejection::Path), "{bad:?}");
    }
}

#[test]
fn the_credential_is_the_sentinel_exactly_once_in_its_own_header() {
    let key = CredentialHeader::ApiKey;
    let bearer = CredentialHeader::Bearer;
    let v = |s: &str| s.as_bytes().to_vec();
    let cases: Vec<(CredentialHeader, Headers, bool)> = vec![
        (key, vec![("x-api-key", key_value())], true),
        (bearer, vec![("authorization", bearer_value())], true),
        (key, vec![], false),
        (bearer, vec![], false),
        (
            key,
            vec![("x-api-key", v("sk-ant-api03-the-real-key"))],
            false,
        ),
        (key, vec![("x-api-key", v(&format!("{SENTINEL}x")))], false),
        (key, vec![("x-api-key", v(&format!(" {SENTINEL}")))], false),
        (key, vec![("x-api-key", v(&SENTINEL[1..]))], false),
        (key, vec![("x-api-key", v(&SENTINEL.to_uppercase()))], false),
        (
            key,
            vec![("x-api-key", key_value()), ("x-api-key", key_value())],
            false,
        ),
        (key, vec![("authorization", bearer_value())], false),
        (
            key,
            vec![
                ("x-api-key", key_value()),
                ("authorization", v("Bearer other")),
            ],
            false,
        ),
        (bearer, vec![("x-api-key", key_value())], false),
        (bearer, vec![("authorization", key_value())], false),
        (
            bearer,
            vec![("authorization", v(&format!("bearer {SENTINEL}")))],
            false,
        ),
        (
            bearer,
            vec![("authorization", v(&format!("Bearer  {SENTINEL}")))],
            false,
        ),
        (
            bearer,
            vec![("authorization", v(&format!("Basic {SENTINEL}")))],
            false,
        ),
        (
            key,
            vec![("x-api-key", key_value()), ("cookie", v("session=1"))],
            false,
        ),
        (
            key,
            vec![
                ("x-api-key", key_value()),
                ("proxy-authorization", v("Basic eA==")),
            ],
            false,
        ),
        (
            key,
            vec![("x-api-key", key_value()), ("anthropic-api-key", v("k"))],
            false,
        ),
        (
            key,
            vec![("x-api-key", key_value()), ("user-agent", key_value())],
            false,
        ),
        (
            key,
            vec![
                ("x-api-key", key_value()),
                ("x-note", v(&format!("k={SENTINEL};"))),
            ],
            false,
        ),
    ];
    for (header, credentials, admitted) in cases {
        let mut headers = vec![("host", HOST.as_bytes().to_vec())];
        headers.extend(credentials.iter().cloned());
        let got = admit_with(&to(header), "POST", "/v1/messages", &headers);
        if admitted {
            assert!(got.is_ok(), "{header:?} {credentials:?}: {got:?}");
        } else {
            assert_eq!(
                got,
                Err(VendorRejection::Credential),
                "{header:?} {credentials:?}"
            );
        }
    }
}

/// Every combination of 0, 1 or 2 copies of six kinds of header (3^6 heads): admitted exactly
/// when the right credential appears once and no other credential, and the sentinel nowhere else.
#[test]
fn every_mix_of_credential_headers_is_judged() {
    let pool: [(&str, Vec<u8>); 6] = [
        ("x-api-key", key_value()),
        ("x-api-key", b"sk-ant-api03-real".to_vec()),
        ("authorization", bearer_value()),
        ("cookie", b"a=b".to_vec()),
        ("accept", b"application/json".to_vec()),
        ("x-trace", key_value()),
    ];
    let mut admitted = 0;
    for mut code in 0..3usize.pow(6) {
        let mut counts = [0usize; 6];
        for c in &mut counts {
            *c = code % 3;
            code /= 3;
        }
        let mut headers = vec![("host", HOST.as_bytes().to_vec())];
        for (i, (name, value)) in pool.iter().enumerate() {
            for _ in 0..counts[i] {
                headers.push((*name, value.clone()));
            }
        }
        let expect =
            counts[0] == 1 && counts[1] == 0 && counts[2] == 0 && counts[3] == 0 && counts[5] == 0;
        let got = admit_key("POST", "/v1/messages", &headers);
        match (expect, got) {
            (true, Ok(a)) => {
                assert_eq!(
                    a.swap().map(|at| headers[at].clone()),
                    Some(("x-api-key", key_value()))
                );
                admitted += 1;
            }
            (false, Err(VendorRejection::Credential)) => {}
            (expect, got) => panic!("{counts:?}: expected admitted={expect}, got {got:?}"),
        }
    }
    // The right credential once and `accept` 0, 1 or 2 times.
    assert_eq!(admitted, 3);
}

#[test]
fn the_sentinel_in_the_target_is_refused_even_where_a_query_is_allowed() {
    let query: &'static str = Box::leak(format!("k={SENTINEL}").into_boxed_str());
    let routes: &'static [Route] = Box::leak(Box::new([Route {
        method: "GET",
        path: "/echo",
        queries: std::slice::from_ref(Box::leak(Box::new(query))),
    }]));
    let to = Terminated {
        routes,
        ..to(CredentialHeader::ApiKey)
    };
    let headers = usual(("x-api-key", key_value()));
    assert_eq!(
        admit_with(&to, "GET", &format!("/echo?{query}"), &headers),
        Err(VendorRejection::Credential)
    );
    assert!(admit_with(&to, "GET", "/echo", &headers).is_ok());
}

#[test]
fn heads_over_their_bounds_or_not_text_are_malformed() {
    let target = format!("/v1/messages?{}", "b".repeat(MAX_TARGET));
    assert_eq!(
        admit_key("POST", &target, &usual(("x-api-key", key_value()))),
        Err(VendorRejection::Malformed)
    );
    let mut many = usual(("x-api-key", key_value()));
    while many.len() <= MAX_HEADERS {
        many.push(("x-pad", b"1".to_vec()));
    }
    assert_eq!(
        admit_key("POST", "/v1/messages", &many),
        Err(VendorRejection::Malformed)
    );
    let mut big = usual(("x-api-key", key_value()));
    big.push(("x-pad", vec![b'a'; MAX_HEAD_BYTES]));
    assert_eq!(
        admit_key("POST", "/v1/messages", &big),
        Err(VendorRejection::Malformed)
    );
    for bad in [
        &b"a\rb"[..],
        b"a\nb",
        b"a\0b",
        b"a\x7fb",
        "é".as_bytes(),
        b"\x1b[31m",
    ] {
        let mut headers = usual(("x-api-key", key_value()));
        headers.push(("x-note", bad.to_vec()));
        assert_eq!(
            admit_key("POST", "/v1/messages", &headers),
            Err(VendorRejection::Malformed),
            "{bad:?}"
        );
    }
}

#[test]
fn budgets_refuse_the_request_past_them_and_every_later_one() {
    let budget = Budget {
        requests: 2,
        request_bytes: 100,
        response_bytes: 50,
    };
    let mut spent = Spent::default();
    assert!(spent.request(&budget, 40).is_ok());
    assert!(spent.request(&budget, 40).is_ok());
    assert_eq!(
        spent.request(&budget, 1),
        Err(VendorRejection::Budget(Spend::Requests))
    );
    assert_eq!(
        spent.request(&budget, 0),
        Err(VendorRejection::Budget(Spend::Requests))
    );
    assert_eq!((spent.requests, spent.request_bytes), (2, 80));

    let mut spent = Spent::default();
    assert!(spent.request(&budget, 60).is_ok());
    assert_eq!(
        spent.request(&budget, 50),
        Err(VendorRejection::Budget(Spend::RequestBytes))
    );
    // One that would still fit is refused too: a budget that ran out stays out.
    assert_eq!(
        spent.request(&budget, 10),
        Err(VendorRejection::Budget(Spend::RequestBytes))
    );

    let mut spent = Spent::default();
    assert!(spent.request(&budget, 1).is_ok());
    assert_eq!(spent.response(&budget, 30), 30);
    assert_eq!(spent.response(&budget, 30), 20, "cut where the budget ends");
    assert_eq!(spent.exhausted, Some(Spend::ResponseBytes));
    assert_eq!(spent.response(&budget, 5), 0);
    assert_eq!(
        spent.request(&budget, 1),
        Err(VendorRejection::Budget(Spend::ResponseBytes))
    );
    let unlimited = Budget::default();
    let mut spent = Spent::default();
    assert_eq!(
        spent.request(&unlimited, u64::MAX),
        Err(VendorRejection::Budget(Spend::RequestBytes))
    );
}

#[test]
fn ids_and_statuses_are_stable() {
    let all = [
        VendorRejection::Path,
        VendorRejection::Credential,
        VendorRejection::Malformed,
        VendorRejection::Budget(Spend::Requests),
    ];
    let shown: Vec<(&str, u16)> = all.iter().map(|r| (r.id(), r.status())).collect();
    assert_eq!(
        shown,
        [
            ("vendor-path", 403),
            ("vendor-credential", 401),
            ("vendor-malformed", 400),
            ("vendor-budget", 429)
        ]
    );
    assert_eq!(
        [Spend::Requests, Spend::RequestBytes, Spend::ResponseBytes].map(Spend::as_str),
        ["requests", "request-bytes", "response-bytes"]
    );
}
