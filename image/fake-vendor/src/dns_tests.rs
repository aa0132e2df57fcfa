//! The DNS server on 127.0.0.1, asked by hand-built hickory-proto queries over UDP (and TCP for a
//! truncated answer); and the `--answer` syntax. The scripted addresses are only ever returned,
//! never dialed.

#![allow(clippy::unwrap_used)]

use super::*;
use hickory_proto::op::Query as Question;
use hickory_proto::rr::Name;

const ASK_TIMEOUT: Duration = Duration::from_secs(2);

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

fn ips(texts: &[&str]) -> Vec<IpAddr> {
    texts.iter().map(|t| ip(t)).collect()
}

async fn server(script: Script) -> Server {
    start("127.0.0.1:0".parse().unwrap(), script).await.unwrap()
}

fn query_bytes(name: &str, kind: RecordType) -> (u16, Vec<u8>) {
    let mut query = Message::query();
    query.metadata.recursion_desired = true;
    query.add_query(Question::query(Name::from_ascii(name).unwrap(), kind));
    (query.metadata.id, query.to_vec().unwrap())
}

/// One query over UDP; `None` if nothing came back in time.
async fn ask_udp(server: &Server, name: &str, kind: RecordType, wait: Duration) -> Option<Message> {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let (id, bytes) = query_bytes(name, kind);
    socket.send_to(&bytes, server.addr()).await.unwrap();
    let mut buf = vec![0u8; 65_535];
    let (n, _) = timeout(wait, socket.recv_from(&mut buf))
        .await
        .ok()?
        .unwrap();
    let response = Message::from_vec(&buf[..n]).unwrap();
    assert_eq!(response.metadata.id, id);
    assert_eq!(response.metadata.message_type, MessageType::Response);
    Some(response)
}

async fn ask(server: &Server, name: &str, kind: RecordType) -> Message {
    ask_udp(server, name, kind, ASK_TIMEOUT).await.unwrap()
}

async fn ask_tcp(server: &Server, name: &str, kind: RecordType) -> Message {
    let mut stream = TcpStream::connect(server.addr()).await.unwrap();
    let (_, bytes) = query_bytes(name, kind);
    let mut out = u16::try_from(bytes.len()).unwrap().to_be_bytes().to_vec();
    out.extend_from_slice(&bytes);
    stream.write_all(&out).await.unwrap();
    let mut length = [0u8; 2];
    timeout(ASK_TIMEOUT, stream.read_exact(&mut length))
        .await
        .unwrap()
        .unwrap();
    let mut message = vec![0u8; usize::from(u16::from_be_bytes(length))];
    stream.read_exact(&mut message).await.unwrap();
    Message::from_vec(&message).unwrap()
}

fn addresses(message: &Message) -> Vec<IpAddr> {
    message
        .answers
        .iter()
        .filter_map(|record| match &record.data {
            RData::A(a) => Some(IpAddr::V4(a.0)),
            RData::AAAA(aaaa) => Some(IpAddr::V6(aaaa.0)),
            _ => None,
        })
        .collect()
}

fn query(name: &str, record_type: &str) -> Query {
    Query {
        name: name.to_owned(),
        record_type: record_type.to_owned(),
    }
}

#[tokio::test]
async fn d0_addresses_are_split_by_family() {
    let script = Script::new().answer(
        "api.vendor.test",
        Answer::Addresses(ips(&["2001:db8::10", "192.0.2.10", "192.0.2.11"])),
    );
    let dns = server(script).await;
    let a = ask(&dns, "api.vendor.test.", RecordType::A).await;
    assert_eq!(a.metadata.response_code, ResponseCode::NoError);
    assert_eq!(addresses(&a), ips(&["192.0.2.10", "192.0.2.11"]));
    assert_eq!(a.queries.len(), 1);
    let aaaa = ask(&dns, "api.vendor.test.", RecordType::AAAA).await;
    assert_eq!(addresses(&aaaa), ips(&["2001:db8::10"]));
    // Another type: NOERROR, nothing.
    let mx = ask(&dns, "api.vendor.test.", RecordType::MX).await;
    assert_eq!(mx.metadata.response_code, ResponseCode::NoError);
    assert!(mx.answers.is_empty());

    // A family with no address: an empty NOERROR.
    let v4only =
        server(Script::new().answer("v4.test", Answer::Addresses(ips(&["192.0.2.1"])))).await;
    let aaaa = ask(&v4only, "v4.test.", RecordType::AAAA).await;
    assert_eq!(aaaa.metadata.response_code, ResponseCode::NoError);
    assert!(aaaa.answers.is_empty());
}

#[tokio::test]
async fn d1_a_sequence_rebinds_first_answer_first_then_the_last_repeating() {
    let script = Script::new().answer(
        "rebind.test",
        Answer::Sequence(vec![ips(&["192.0.2.1"]), ips(&["127.0.0.1", "::1"])]),
    );
    let dns = server(script).await;
    let first = ask(&dns, "rebind.test.", RecordType::A).await;
    assert_eq!(addresses(&first), ips(&["192.0.2.1"]));
    assert_eq!(first.answers[0].ttl, 0);
    for _ in 0..3 {
        let later = ask(&dns, "rebind.test.", RecordType::A).await;
        assert_eq!(addresses(&later), ips(&["127.0.0.1"]));
    }
    // The count is of every query for the name: an AAAA now is past the first step too.
    let aaaa = ask(&dns, "rebind.test.", RecordType::AAAA).await;
    assert_eq!(addresses(&aaaa), ips(&["::1"]));
}

#[tokio::test]
async fn d2_servfail_empty_nxdomain_and_unknown_names() {
    let script = Script::new()
        .answer("broken.test", Answer::ServFail)
        .answer("empty.test", Answer::Empty)
        .answer("gone.test", Answer::NxDomain);
    let dns = server(script).await;
    let code = |m: Message| (m.metadata.response_code, m.answers.len());
    assert_eq!(
        code(ask(&dns, "broken.test.", RecordType::A).await),
        (ResponseCode::ServFail, 0)
    );
    assert_eq!(
        code(ask(&dns, "empty.test.", RecordType::A).await),
        (ResponseCode::NoError, 0)
    );
    assert_eq!(
        code(ask(&dns, "gone.test.", RecordType::A).await),
        (ResponseCode::NXDomain, 0)
    );
    assert_eq!(
        code(ask(&dns, "unscripted.test.", RecordType::AAAA).await),
        (ResponseCode::NXDomain, 0)
    );
}

#[tokio::test]
async fn d3_silent_never_answers_and_is_still_recorded() {
    let dns = server(Script::new().answer("quiet.test", Answer::Silent)).await;
    assert!(ask_udp(
        &dns,
        "quiet.test.",
        RecordType::A,
        Duration::from_millis(300)
    )
    .await
    .is_none());
    assert_eq!(dns.queries(), vec![query("quiet.test", "A")]);
    // The server is still there for other names.
    assert_eq!(
        ask(&dns, "other.test.", RecordType::A)
            .await
            .metadata
            .response_code,
        ResponseCode::NXDomain
    );
}

#[tokio::test]
async fn d4_queries_are_recorded_lowercase_without_the_trailing_dot() {
    let dns =
        server(Script::new().answer("API.Vendor.Test.", Answer::Addresses(ips(&["192.0.2.1"]))))
            .await;
    // The scripted name was normalised too: a mixed-case query matches it.
    let answer = ask(&dns, "Api.VENDOR.test.", RecordType::A).await;
    assert_eq!(addresses(&answer), ips(&["192.0.2.1"]));
    // The answer's owner name is as asked (0x20 randomisation survives).
    assert_eq!(answer.answers[0].name.to_ascii(), "Api.VENDOR.test.");
    let _ = ask(&dns, "api.vendor.test.", RecordType::AAAA).await;
    let _ = ask(&dns, "nope.test.", RecordType::TXT).await;
    assert_eq!(
        dns.queries(),
        vec![
            query("api.vendor.test", "A"),
            query("api.vendor.test", "AAAA"),
            query("nope.test", "TXT"),
        ]
    );
}

#[tokio::test]
async fn d5_an_answer_too_big_for_udp_is_truncated_and_whole_over_tcp() {
    let many: Vec<IpAddr> = (1..=60).map(|i| IpAddr::from([192, 0, 2, i])).collect();
    let dns = server(Script::new().answer("big.test", Answer::Addresses(many.clone()))).await;
    let udp = ask(&dns, "big.test.", RecordType::A).await;
    assert!(udp.metadata.truncation);
    assert!(udp.answers.is_empty());
    let tcp = ask_tcp(&dns, "big.test.", RecordType::A).await;
    assert!(!tcp.metadata.truncation);
    assert_eq!(addresses(&tcp), many);
    assert_eq!(dns.queries().len(), 2);
}

#[tokio::test]
async fn d6_garbage_and_responses_get_no_answer() {
    let dns = server(Script::new()).await;
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    socket
        .send_to(b"\x00\x01garbage", dns.addr())
        .await
        .unwrap();
    let mut response = Message::response(7, OpCode::Query);
    response.add_query(Question::query(
        Name::from_ascii("x.test.").unwrap(),
        RecordType::A,
    ));
    socket
        .send_to(&response.to_vec().unwrap(), dns.addr())
        .await
        .unwrap();
    let mut buf = [0u8; 512];
    assert!(
        timeout(Duration::from_millis(300), socket.recv_from(&mut buf))
            .await
            .is_err()
    );
    assert!(dns.queries().is_empty());
}

#[test]
fn d7_parse_arg_and_to_args_round_trip() {
    let args = [
        "a.test=192.0.2.1",
        "b.test=192.0.2.1,2001:db8::1",
        "c.test=192.0.2.1/127.0.0.1",
        "d.test=192.0.2.1,192.0.2.2/::1,127.0.0.1/empty",
        "e.test=servfail",
        "f.test=empty",
        "g.test=nxdomain",
        "h.test=silent",
        "i.test=cname:j.test",
        "k.test=raw:k.test/cname/x.test,X.Test/a/192.0.2.1,x.test/aaaa/2001:db8::1",
        "l.test=raw:other.test/cname/L.test",
    ];
    let script = args
        .iter()
        .try_fold(Script::new(), |script, arg| script.parse_arg(arg))
        .unwrap();
    assert_eq!(script.to_args(), args);
    assert_eq!(
        script.answers.get("d.test"),
        Some(&Answer::Sequence(vec![
            ips(&["192.0.2.1", "192.0.2.2"]),
            ips(&["::1", "127.0.0.1"]),
            vec![],
        ]))
    );
    assert_eq!(script.answers.get("e.test"), Some(&Answer::ServFail));
    assert_eq!(script.answers.get("h.test"), Some(&Answer::Silent));
    assert_eq!(
        script.answers.get("i.test"),
        Some(&Answer::Cname("j.test".into()))
    );
    // A raw answer keeps its names' case and its order.
    assert_eq!(
        script.answers.get("k.test"),
        Some(&Answer::Raw(vec![
            Entry::Cname {
                owner: "k.test".into(),
                target: "x.test".into()
            },
            Entry::Address {
                owner: "X.Test".into(),
                ip: ip("192.0.2.1")
            },
            Entry::Address {
                owner: "x.test".into(),
                ip: ip("2001:db8::1")
            },
        ]))
    );
    // And back again.
    let again = script
        .to_args()
        .iter()
        .try_fold(Script::new(), |s, arg| s.parse_arg(arg))
        .unwrap();
    assert_eq!(again.answers, script.answers);

    // Names are normalised on the way in; keywords are any case.
    let script = Script::new()
        .parse_arg("API.Vendor.Test.=SERVFAIL")
        .unwrap();
    assert_eq!(script.to_args(), ["api.vendor.test=servfail"]);
    let script = Script::new()
        .parse_arg("a.test=CNAME:B.Test.")
        .unwrap()
        .parse_arg("c.test=RAW:c.test/CNAME/d.test")
        .unwrap();
    assert_eq!(
        script.to_args(),
        ["a.test=cname:b.test", "c.test=raw:c.test/cname/d.test"]
    );
    // Answers built in code come out in the same syntax; no addresses (or no raw record) is
    // `empty`; an alias's target is normalised.
    let script = Script::new()
        .answer("x.test", Answer::Addresses(vec![]))
        .answer("y.test", Answer::Sequence(vec![ips(&["::1"])]))
        .answer("z.test", Answer::Raw(vec![]))
        .answer("w.test", Answer::Cname("Target.Test.".into()));
    assert_eq!(
        script.to_args(),
        [
            "w.test=cname:target.test",
            "x.test=empty",
            "y.test=::1",
            "z.test=empty"
        ]
    );
}

#[test]
fn d8_bad_args_are_refused() {
    for bad in [
        "no-equals",
        "=192.0.2.1",
        ".=192.0.2.1",
        "a.test=",
        "a.test=300.0.0.1",
        "a.test=192.0.2.1,",
        "a.test=192.0.2.1/",
        "a.test=localhost",
        "a..test=192.0.2.1",
        "a test=192.0.2.1",
        "a.test=fe80::1%eth0",
        "a.test=cname:",
        "a.test=cname:b..test",
        "a.test=cname:b.test,c.test",
        "a.test=raw:",
        "a.test=raw:a.test",
        "a.test=raw:a.test/a",
        "a.test=raw:a.test/a/2001:db8::1",
        "a.test=raw:a.test/aaaa/192.0.2.1",
        "a.test=raw:a.test/mx/b.test",
        "a.test=raw:a.test/cname/",
        "a.test=raw:/a/192.0.2.1",
        "a.test=raw:a.test/a/192.0.2.1,",
    ] {
        let refused = Script::new().parse_arg(bad);
        assert!(
            matches!(&refused, Err(Error::Answer { arg, .. }) if arg == bad),
            "{bad}: {refused:?}"
        );
    }
}

/// (owner, type, value) of each answer record, in order: the shape a test compares.
fn records(message: &Message) -> Vec<(String, String, String)> {
    message
        .answers
        .iter()
        .map(|record| {
            let value = match &record.data {
                RData::A(a) => a.0.to_string(),
                RData::AAAA(aaaa) => aaaa.0.to_string(),
                RData::CNAME(cname) => cname.0.to_ascii(),
                other => format!("{other:?}"),
            };
            (
                record.name.to_ascii(),
                record.record_type().to_string(),
                value,
            )
        })
        .collect()
}

fn rec(owner: &str, kind: &str, value: &str) -> (String, String, String) {
    (owner.to_owned(), kind.to_owned(), value.to_owned())
}

#[tokio::test]
async fn d9_an_alias_is_answered_with_its_chain_as_a_recursive_resolver_would() {
    let script = Script::new()
        .answer("www.test", Answer::Cname("cdn.test".into()))
        .answer("cdn.test", Answer::Addresses(ips(&["192.0.2.7"])))
        .answer("deep.test", Answer::Cname("d1.test".into()))
        .answer("d1.test", Answer::Cname("d2.test".into()))
        .answer("d2.test", Answer::Cname("cdn.test".into()))
        .answer("dangling.test", Answer::Cname("nowhere.test".into()))
        .answer("self.test", Answer::Cname("self.test".into()))
        .answer("ping.test", Answer::Cname("pong.test".into()))
        .answer("pong.test", Answer::Cname("ping.test".into()));
    let dns = server(script).await;
    // The CDN shape: A gets the chain and the target's address, AAAA the chain alone.
    let a = ask(&dns, "WWW.test.", RecordType::A).await;
    assert_eq!(a.metadata.response_code, ResponseCode::NoError);
    assert_eq!(
        records(&a),
        [
            rec("WWW.test.", "CNAME", "cdn.test."),
            rec("cdn.test.", "A", "192.0.2.7")
        ]
    );
    let aaaa = ask(&dns, "www.test.", RecordType::AAAA).await;
    assert_eq!(records(&aaaa), [rec("www.test.", "CNAME", "cdn.test.")]);
    let deep = ask(&dns, "deep.test.", RecordType::A).await;
    assert_eq!(
        records(&deep),
        [
            rec("deep.test.", "CNAME", "d1.test."),
            rec("d1.test.", "CNAME", "d2.test."),
            rec("d2.test.", "CNAME", "cdn.test."),
            rec("cdn.test.", "A", "192.0.2.7"),
        ]
    );
    let dangling = ask(&dns, "dangling.test.", RecordType::A).await;
    assert_eq!(
        records(&dangling),
        [rec("dangling.test.", "CNAME", "nowhere.test.")]
    );
    // Loops end after the record that closes them.
    let own = ask(&dns, "self.test.", RecordType::A).await;
    assert_eq!(records(&own), [rec("self.test.", "CNAME", "self.test.")]);
    let pair = ask(&dns, "ping.test.", RecordType::AAAA).await;
    assert_eq!(
        records(&pair),
        [
            rec("ping.test.", "CNAME", "pong.test."),
            rec("pong.test.", "CNAME", "ping.test.")
        ]
    );
    // Only the queries asked are recorded: following the chain asks nothing.
    let asked: Vec<String> = dns.queries().into_iter().map(|q| q.name).collect();
    assert_eq!(
        asked,
        [
            "www.test",
            "www.test",
            "deep.test",
            "dangling.test",
            "self.test",
            "ping.test"
        ]
    );
}

#[tokio::test]
async fn d10_a_long_alias_chain_stops_at_the_bound() {
    let mut script = Script::new();
    for i in 0..40 {
        script = script.answer(
            &format!("n{i}.test"),
            Answer::Cname(format!("n{}.test", i + 1)),
        );
    }
    let dns = server(script).await;
    let answer = ask(&dns, "n0.test.", RecordType::A).await;
    assert_eq!(answer.answers.len(), MAX_ALIASES);
}

#[tokio::test]
async fn d11_a_raw_answer_is_sent_as_written_for_every_type() {
    let entries = vec![
        Entry::Cname {
            owner: "API.Raw.Test".into(),
            target: "Edge.Test".into(),
        },
        Entry::Address {
            owner: "edge.test".into(),
            ip: ip("2001:db8::9"),
        },
        Entry::Address {
            owner: "elsewhere.test".into(),
            ip: ip("127.0.0.1"),
        },
    ];
    let dns = server(Script::new().answer("api.raw.test", Answer::Raw(entries))).await;
    let want = [
        rec("API.Raw.Test.", "CNAME", "Edge.Test."),
        rec("edge.test.", "AAAA", "2001:db8::9"),
        rec("elsewhere.test.", "A", "127.0.0.1"),
    ];
    for kind in [RecordType::A, RecordType::AAAA, RecordType::TXT] {
        let answer = ask(&dns, "api.raw.test.", kind).await;
        assert_eq!(answer.metadata.response_code, ResponseCode::NoError);
        assert_eq!(records(&answer), want, "{kind}");
    }
}
