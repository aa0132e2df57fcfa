//! A scripted DNS server: each name gets the answer its script says (addresses, a rebinding
//! sequence, an alias, a raw record list, an error, or nothing at all), every other name NXDOMAIN,
//! and every query is recorded. UDP, and TCP on the same port for the retry a truncated UDP answer
//! asks for.
//!
//! An alias ([`Answer::Cname`]) is answered as a recursive resolver would: the CNAME, then the
//! target's own answer for the asked type, in the same message. A raw list ([`Answer::Raw`]) is
//! answered exactly as written, whatever was asked: the hostile shapes (records of another type,
//! owned by names off the chain, branches, an incomplete chain).

use crate::{echo, lock, Error};
use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA, CNAME};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use std::collections::{BTreeMap, HashMap};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::timeout;

/// The TTL of fixed answers; a sequence's answers have TTL 0, as a rebinding server's would.
const TTL: u32 = 60;
/// How long a TCP connection may wait for its next message (or take to write an answer).
const TCP_IDLE: Duration = Duration::from_secs(10);
/// Messages answered on one TCP connection, and TCP connections served at once.
const TCP_MAX_MESSAGES: usize = 1000;
const TCP_MAX_CONNECTIONS: usize = 256;
/// Tries at one port for both UDP and TCP when the port is the system's choice.
const BIND_TRIES: usize = 16;
/// The most CNAMEs an alias's answer follows within the script (a loop ends sooner).
pub const MAX_ALIASES: usize = 16;

/// What a scripted name is answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Every query gets these (A queries the IPv4 ones, AAAA the IPv6 ones; none of the type = empty NOERROR answer).
    Addresses(Vec<IpAddr>),
    /// The n-th query for the name (of any type) gets the n-th entry, the last one repeating
    /// (rebinding).
    Sequence(Vec<Vec<IpAddr>>),
    ServFail,
    /// NOERROR with no records.
    Empty,
    NxDomain,
    /// Never answer.
    Silent,
    /// An alias: `name CNAME target`, followed, as a recursive resolver would, by the target's own
    /// answer for the asked type when the script has one (its addresses of that type, or its own
    /// alias in turn, at most [`MAX_ALIASES`] in all); a target already on the chain ends it after
    /// the record that closes the loop. A target the script does not alias or address (or whose
    /// addresses are of the other type) leaves the chain as it is.
    Cname(String),
    /// Exactly these records in the answer section, in this order, for every query type.
    Raw(Vec<Entry>),
}

/// One record of a raw answer. Owner and target names are kept as written (case included), so a
/// test can send owners in another case than the question's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// An A record (an IPv4 address) or an AAAA record (an IPv6 one).
    Address {
        owner: String,
        ip: IpAddr,
    },
    Cname {
        owner: String,
        target: String,
    },
}

impl Entry {
    /// `OWNER/a/IPV4`, `OWNER/aaaa/IPV6` or `OWNER/cname/TARGET`.
    fn parse(text: &str) -> Result<Entry, String> {
        let mut parts = text.splitn(3, '/');
        let (Some(owner), Some(kind), Some(value)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(format!("{text:?} is not OWNER/TYPE/VALUE"));
        };
        let owner = checked_name(owner)?;
        match kind.to_ascii_lowercase().as_str() {
            "a" => match value.parse::<Ipv4Addr>() {
                Ok(ip) => Ok(Entry::Address {
                    owner,
                    ip: IpAddr::V4(ip),
                }),
                Err(_) => Err(format!("{value:?} is not an IPv4 address")),
            },
            "aaaa" => match value.parse::<Ipv6Addr>() {
                Ok(ip) => Ok(Entry::Address {
                    owner,
                    ip: IpAddr::V6(ip),
                }),
                Err(_) => Err(format!("{value:?} is not an IPv6 address")),
            },
            "cname" => Ok(Entry::Cname {
                owner,
                target: checked_name(value)?,
            }),
            _ => Err(format!("{kind:?} is not a, aaaa or cname")),
        }
    }

    fn to_arg(&self) -> String {
        match self {
            Entry::Address {
                owner,
                ip: IpAddr::V4(ip),
            } => format!("{owner}/a/{ip}"),
            Entry::Address {
                owner,
                ip: IpAddr::V6(ip),
            } => format!("{owner}/aaaa/{ip}"),
            Entry::Cname { owner, target } => format!("{owner}/cname/{target}"),
        }
    }

    /// The record, or `None` for a name that is no DNS name (only possible when built in code).
    fn record(&self) -> Option<Record> {
        let (owner, data) = match self {
            Entry::Address {
                owner,
                ip: IpAddr::V4(ip),
            } => (owner, RData::A(A(*ip))),
            Entry::Address {
                owner,
                ip: IpAddr::V6(ip),
            } => (owner, RData::AAAA(AAAA(*ip))),
            Entry::Cname { owner, target } => (owner, RData::CNAME(CNAME(fqdn(target)?))),
        };
        Some(Record::from_rdata(fqdn(owner)?, TTL, data))
    }
}

/// A name as hickory's, fully qualified.
fn fqdn(name: &str) -> Option<Name> {
    let name = name.strip_suffix('.').unwrap_or(name);
    Name::from_ascii(format!("{name}.")).ok()
}

/// Dot-separated labels of letters, digits, `-` and `_`, without a trailing dot; case kept.
fn checked_name(name: &str) -> Result<String, String> {
    let name = name.strip_suffix('.').unwrap_or(name);
    let labels_ok = !name.is_empty()
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        });
    if !labels_ok || name.len() > 253 {
        return Err(format!(
            "{name:?}: a name must be dot-separated labels of letters, digits, `-` and `_`"
        ));
    }
    Ok(name.to_owned())
}

/// Names and their answers.
#[derive(Debug, Clone, Default)]
pub struct Script {
    /// Lowercase, no trailing dot. Ordered, so `to_args` is stable.
    answers: BTreeMap<String, Answer>,
}

impl Script {
    pub fn new() -> Script {
        Script::default()
    }

    /// Script `name` (any case, trailing dot or not); a later answer for the same name replaces
    /// an earlier one. An alias's target is normalised as a name is.
    pub fn answer(mut self, name: &str, answer: Answer) -> Script {
        let answer = match answer {
            Answer::Cname(target) => Answer::Cname(normalize(&target)),
            other => other,
        };
        self.answers.insert(normalize(name), answer);
        self
    }

    /// Parse one `--answer` argument of the binary: `NAME=IP[,IP...]`, `NAME=IP1/IP2` (a
    /// Sequence: first query IP1, then IP2; each side may be a comma list, or `empty`),
    /// `NAME=servfail`, `NAME=empty`, `NAME=nxdomain`, `NAME=silent`, `NAME=cname:TARGET` (an
    /// alias), `NAME=raw:ENTRY[,ENTRY...]` (a raw answer, each entry `OWNER/a/IPV4`,
    /// `OWNER/aaaa/IPV6` or `OWNER/cname/TARGET`).
    pub fn parse_arg(self, arg: &str) -> Result<Script, Error> {
        let refuse = |reason: &str| Error::Answer {
            arg: arg.to_owned(),
            reason: reason.to_owned(),
        };
        let (name, value) = arg.split_once('=').ok_or_else(|| refuse("no `=`"))?;
        let name = normalize(name);
        if name.is_empty() {
            return Err(refuse("empty name"));
        }
        checked_name(&name).map_err(|reason| refuse(&reason))?;
        let prefixed = |prefix: &str| {
            value
                .get(..prefix.len())
                .filter(|p| p.eq_ignore_ascii_case(prefix))
                .map(|_| &value[prefix.len()..])
        };
        if let Some(target) = prefixed("cname:") {
            let target = checked_name(target).map_err(|reason| refuse(&reason))?;
            return Ok(self.answer(&name, Answer::Cname(target)));
        }
        if let Some(entries) = prefixed("raw:") {
            let entries = entries
                .split(',')
                .map(Entry::parse)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|reason| refuse(&reason))?;
            return Ok(self.answer(&name, Answer::Raw(entries)));
        }
        let answer = match value.to_ascii_lowercase().as_str() {
            "servfail" => Answer::ServFail,
            "empty" => Answer::Empty,
            "nxdomain" => Answer::NxDomain,
            "silent" => Answer::Silent,
            _ if value.contains('/') => Answer::Sequence(
                value
                    .split('/')
                    .map(|step| match step {
                        "empty" => Ok(Vec::new()),
                        _ => parse_ips(step),
                    })
                    .collect::<Result<_, _>>()
                    .map_err(|reason| refuse(&reason))?,
            ),
            _ => Answer::Addresses(parse_ips(value).map_err(|reason| refuse(&reason))?),
        };
        Ok(self.answer(&name, answer))
    }

    /// The inverse of parse_arg for every entry (so the host can build container args).
    pub fn to_args(&self) -> Vec<String> {
        self.answers
            .iter()
            .map(|(name, answer)| format!("{name}={}", answer_arg(answer)))
            .collect()
    }
}

/// `NAME=...`'s right side. An answer with no addresses at all is written `empty`, which it
/// behaves as.
fn answer_arg(answer: &Answer) -> String {
    let list = |ips: &[IpAddr]| {
        ips.iter()
            .map(IpAddr::to_string)
            .collect::<Vec<_>>()
            .join(",")
    };
    match answer {
        Answer::Addresses(ips) if ips.is_empty() => "empty".to_owned(),
        Answer::Addresses(ips) => list(ips),
        Answer::Sequence(steps) => match steps.as_slice() {
            [] => "empty".to_owned(),
            [only] => answer_arg(&Answer::Addresses(only.clone())),
            _ => steps
                .iter()
                .map(|step| {
                    if step.is_empty() {
                        "empty".to_owned()
                    } else {
                        list(step)
                    }
                })
                .collect::<Vec<_>>()
                .join("/"),
        },
        Answer::ServFail => "servfail".to_owned(),
        Answer::Empty => "empty".to_owned(),
        Answer::NxDomain => "nxdomain".to_owned(),
        Answer::Silent => "silent".to_owned(),
        Answer::Cname(target) => format!("cname:{target}"),
        Answer::Raw(entries) if entries.is_empty() => "empty".to_owned(),
        Answer::Raw(entries) => format!(
            "raw:{}",
            entries
                .iter()
                .map(Entry::to_arg)
                .collect::<Vec<_>>()
                .join(",")
        ),
    }
}

/// A non-empty comma list of IP addresses.
fn parse_ips(list: &str) -> Result<Vec<IpAddr>, String> {
    list.split(',')
        .map(|ip| {
            ip.parse::<IpAddr>()
                .map_err(|_| format!("{ip:?} is not an IP address"))
        })
        .collect()
}

/// Lowercase, without the trailing dot: the form names are scripted and recorded in.
fn normalize(name: &str) -> String {
    let name = name.strip_suffix('.').unwrap_or(name);
    name.to_ascii_lowercase()
}

/// One query the server received.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Query {
    /// Lowercase, no trailing dot.
    pub name: String,
    /// "A", "AAAA", ... (`TYPE<n>` for a type hickory does not name).
    pub record_type: String,
}

/// The script and what it has been asked, shared by the UDP and TCP tasks.
#[derive(Debug)]
struct State {
    script: Script,
    /// Queries so far for each name (what a Sequence steps on).
    counts: HashMap<String, usize>,
    queries: Vec<Query>,
}

/// A running DNS server. Dropping it stops both the UDP and the TCP side.
#[derive(Debug)]
pub struct Server {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    udp: JoinHandle<()>,
    tcp: JoinHandle<()>,
}

impl Server {
    /// The UDP address; TCP listens on the same one.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every query received so far (over UDP or TCP, answered or not), in order.
    pub fn queries(&self) -> Vec<Query> {
        lock(&self.state).queries.clone()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.udp.abort();
        self.tcp.abort();
    }
}

/// Serve on UDP `bind` (and TCP on the same port, for truncated retries) in the background until dropped. Unknown names: NXDOMAIN. Every query recorded.
pub async fn start(bind: SocketAddr, script: Script) -> io::Result<Server> {
    let (udp, tcp) = bind_both(bind).await?;
    let addr = udp.local_addr()?;
    let state = Arc::new(Mutex::new(State {
        script,
        counts: HashMap::new(),
        queries: Vec::new(),
    }));
    let udp = tokio::spawn(serve_udp(udp, state.clone()));
    let tcp = tokio::spawn(serve_tcp(tcp, state.clone()));
    Ok(Server {
        addr,
        state,
        udp,
        tcp,
    })
}

/// UDP and TCP on one port. With port 0, the UDP port the system picks may be taken for TCP:
/// then try another.
async fn bind_both(bind: SocketAddr) -> io::Result<(UdpSocket, TcpListener)> {
    let mut tries = 0;
    loop {
        let udp = UdpSocket::bind(bind).await?;
        match TcpListener::bind(udp.local_addr()?).await {
            Ok(tcp) => return Ok((udp, tcp)),
            Err(_) if bind.port() == 0 && tries + 1 < BIND_TRIES => tries += 1,
            Err(e) => return Err(e),
        }
    }
}

async fn serve_udp(socket: UdpSocket, state: Arc<Mutex<State>>) {
    let mut buf = vec![0u8; 65_535];
    loop {
        let (n, from) = match socket.recv_from(&mut buf).await {
            Ok(received) => received,
            // An ICMP error from an earlier answer's destination, reported on this socket.
            Err(_) => continue,
        };
        let Some((query, response)) = respond(&state, &buf[..n]) else {
            continue;
        };
        let Ok(mut bytes) = response.to_vec() else {
            continue;
        };
        if bytes.len() > usize::from(query.max_payload()) {
            // Too big for the client's UDP buffer: the header and question with TC set, so it
            // asks again over TCP.
            let Ok(truncated) = response.truncate().to_vec() else {
                continue;
            };
            bytes = truncated;
        }
        let _ = socket.send_to(&bytes, from).await;
    }
}

async fn serve_tcp(listener: TcpListener, state: Arc<Mutex<State>>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => {
                    if connections.len() < TCP_MAX_CONNECTIONS {
                        connections.spawn(tcp_connection(stream, state.clone()));
                    }
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// Length-prefixed messages (RFC 1035 4.2.2), answered in order; a silent name's query gets
/// nothing, the connection stays open.
async fn tcp_connection(mut stream: TcpStream, state: Arc<Mutex<State>>) {
    for _ in 0..TCP_MAX_MESSAGES {
        let mut length = [0u8; 2];
        if !matches!(
            timeout(TCP_IDLE, stream.read_exact(&mut length)).await,
            Ok(Ok(_))
        ) {
            return;
        }
        let mut message = vec![0u8; usize::from(u16::from_be_bytes(length))];
        if !matches!(
            timeout(TCP_IDLE, stream.read_exact(&mut message)).await,
            Ok(Ok(_))
        ) {
            return;
        }
        let Some((_query, response)) = respond(&state, &message) else {
            continue;
        };
        let Ok(bytes) = response.to_vec() else {
            continue;
        };
        let Ok(length) = u16::try_from(bytes.len()) else {
            continue;
        };
        let mut out = length.to_be_bytes().to_vec();
        out.extend_from_slice(&bytes);
        if !matches!(timeout(TCP_IDLE, stream.write_all(&out)).await, Ok(Ok(()))) {
            return;
        }
    }
}

/// The query and the answer to it, or `None` for silence: a message that does not parse, is not
/// a query, or asks for a silent name. Records the query.
fn respond(state: &Mutex<State>, bytes: &[u8]) -> Option<(Message, Message)> {
    let query = Message::from_vec(bytes).ok()?;
    if query.metadata.message_type != MessageType::Query {
        return None;
    }
    let mut response = Message::response(query.metadata.id, query.metadata.op_code);
    response.metadata.recursion_desired = query.metadata.recursion_desired;
    response.metadata.recursion_available = true;
    if query.metadata.op_code != OpCode::Query {
        response.metadata.response_code = ResponseCode::NotImp;
        return Some((query, response));
    }
    let Some(question) = query.queries.first().cloned() else {
        response.metadata.response_code = ResponseCode::FormErr;
        return Some((query, response));
    };
    response.add_query(question.clone());
    let name = normalize(&question.name().to_ascii());
    let kind = question.query_type();
    let recorded = Query {
        name: name.clone(),
        record_type: type_name(kind),
    };
    echo("dns_query", &recorded);
    let (answer, before) = {
        let mut state = lock(state);
        state.queries.push(recorded);
        let count = state.counts.entry(name.clone()).or_insert(0);
        let before = *count;
        *count += 1;
        (state.script.answers.get(&name).cloned(), before)
    };
    // The owner name as asked, case and all (0x20 randomization survives).
    let owner = question.name().clone();
    let (ips, ttl) = match answer {
        None | Some(Answer::NxDomain) => {
            response.metadata.response_code = ResponseCode::NXDomain;
            (Vec::new(), TTL)
        }
        Some(Answer::ServFail) => {
            response.metadata.response_code = ResponseCode::ServFail;
            (Vec::new(), TTL)
        }
        Some(Answer::Silent) => return None,
        Some(Answer::Empty) => (Vec::new(), TTL),
        Some(Answer::Addresses(ips)) => (ips, TTL),
        Some(Answer::Sequence(steps)) => {
            let step = steps.get(before).or(steps.last()).cloned();
            (step.unwrap_or_default(), 0)
        }
        Some(Answer::Cname(target)) => {
            let script = lock(state).script.clone();
            alias_chain(&script, &name, owner, &target, kind, &mut response);
            return Some((query, response));
        }
        Some(Answer::Raw(entries)) => {
            for record in entries.iter().filter_map(Entry::record) {
                response.add_answer(record);
            }
            return Some((query, response));
        }
    };
    add_addresses(&mut response, owner, &ips, kind, ttl);
    Some((query, response))
}

/// The records of `ips` of the asked type, owned by `owner`.
fn add_addresses(response: &mut Message, owner: Name, ips: &[IpAddr], kind: RecordType, ttl: u32) {
    for ip in ips {
        let rdata = match (ip, kind) {
            (IpAddr::V4(v4), RecordType::A) => RData::A(A(*v4)),
            (IpAddr::V6(v6), RecordType::AAAA) => RData::AAAA(AAAA(*v6)),
            _ => continue,
        };
        response.add_answer(Record::from_rdata(owner.clone(), ttl, rdata));
    }
}

/// An alias's answer, as a recursive resolver gives it: `owner CNAME target`, then the target's
/// own answer (its addresses of the asked type, or its alias in turn), until a name the script
/// neither aliases nor addresses, a name already on the chain, or [`MAX_ALIASES`] CNAMEs.
fn alias_chain(
    script: &Script,
    asked: &str,
    mut owner: Name,
    first: &str,
    kind: RecordType,
    response: &mut Message,
) {
    let mut seen = vec![asked.to_owned()];
    let mut target = first.to_owned();
    for _ in 0..MAX_ALIASES {
        let Some(next) = fqdn(&target) else {
            return;
        };
        response.add_answer(Record::from_rdata(
            owner,
            TTL,
            RData::CNAME(CNAME(next.clone())),
        ));
        if seen.contains(&target) {
            return;
        }
        seen.push(target.clone());
        owner = next;
        match script.answers.get(&target) {
            Some(Answer::Addresses(ips)) => {
                add_addresses(response, owner, ips, kind, TTL);
                return;
            }
            Some(Answer::Cname(further)) => target = further.clone(),
            _ => return,
        }
    }
}

fn type_name(kind: RecordType) -> String {
    match kind {
        RecordType::Unknown(code) => format!("TYPE{code}"),
        kind => kind.to_string(),
    }
}

#[cfg(test)]
#[path = "dns_tests.rs"]
mod tests;
