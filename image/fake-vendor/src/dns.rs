//! A scripted DNS server: each name gets the answer its script says (addresses, a rebinding
//! sequence, an error, or nothing at all), every other name NXDOMAIN, and every query is recorded.
//! UDP, and TCP on the same port for the retry a truncated UDP answer asks for.

use crate::{echo, lock, Error};
use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA};
use hickory_proto::rr::{RData, Record, RecordType};
use std::collections::{BTreeMap, HashMap};
use std::io;
use std::net::{IpAddr, SocketAddr};
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
    /// an earlier one.
    pub fn answer(mut self, name: &str, answer: Answer) -> Script {
        self.answers.insert(normalize(name), answer);
        self
    }

    /// Parse one `--answer` argument of the binary: `NAME=IP[,IP...]`, `NAME=IP1/IP2` (a
    /// Sequence: first query IP1, then IP2; each side may be a comma list, or `empty`),
    /// `NAME=servfail`, `NAME=empty`, `NAME=nxdomain`, `NAME=silent`.
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
        let labels_ok = name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        });
        if !labels_ok || name.len() > 253 {
            return Err(refuse(
                "the name must be dot-separated labels of letters, digits, `-` and `_`",
            ));
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
    };
    for ip in ips {
        let rdata = match (ip, kind) {
            (IpAddr::V4(v4), RecordType::A) => RData::A(A(v4)),
            (IpAddr::V6(v6), RecordType::AAAA) => RData::AAAA(AAAA(v6)),
            _ => continue,
        };
        // The owner name as asked, case and all (0x20 randomization survives).
        response.add_answer(Record::from_rdata(question.name().clone(), ttl, rdata));
    }
    Some((query, response))
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
