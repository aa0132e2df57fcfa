//! What goes back to the agent for each request: the vendor's response relayed (its status and
//! headers but the hop-by-hop ones, its body streamed frame by frame through an [`Answer`],
//! counted against the response budget, cut when it runs out, read for usage), or cordon's own
//! answer (a refusal's JSON, a 502 or 504); and each request's [`Recording`], made once when
//! the answer ends or is dropped.

use super::*;

/// The vendor's response to the agent: its status and headers (not the hop-by-hop ones), its
/// body streamed through an [`Answer`].
pub(super) fn relay<U>(
    response: Response<Incoming>,
    mut recording: Recording,
    shared: &Shared<U>,
) -> Response<Answer> {
    let (parts, body) = response.into_parts();
    recording.call.status = parts.status.as_u16();
    let reader = Reader::for_type(&parts.headers);
    let chunked = parts.headers.contains_key(header::TRANSFER_ENCODING);
    // The vendor closes after this one: so does the agent's connection, cleanly.
    let closes = parts.headers.get_all(header::CONNECTION).iter().any(|v| {
        v.to_str()
            .is_ok_and(|v| v.to_ascii_lowercase().contains("close"))
    });
    let mut headers = HeaderMap::with_capacity(parts.headers.len());
    let this_hop = connection_options(&parts.headers);
    for (name, value) in &parts.headers {
        let framing = chunked && name == header::CONTENT_LENGTH;
        let hop = HOP_BY_HOP.contains(&name.as_str())
            || this_hop.iter().any(|option| option == name.as_str());
        if !hop && !framing {
            headers.append(name.clone(), value.clone());
        }
    }
    if closes {
        headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    let answer = Answer {
        source: Source::Vendor(body),
        reader,
        recording: Some(recording),
        terminator: Some(shared.terminator.clone()),
        ledger: shared.ledger.clone(),
        cut: None,
    };
    let mut out = Response::new(answer);
    *out.status_mut() = parts.status;
    *out.headers_mut() = headers;
    out
}

/// A refusal's answer: its status, a JSON error naming it, `x-cordon-refusal`.
pub(super) fn refused(refusal: &Refusal, mut recording: Recording) -> Response<Answer> {
    let id = refusal.rejection.id();
    tracing::info!(
        refusal = id,
        status = refusal.status,
        "vendor request refused"
    );
    recording.call.status = refusal.status;
    recording.call.refusal = Some(id);
    let body = format!(
        "{{\"type\":\"error\",\"error\":{{\"type\":\"cordon_refusal\",\
         \"message\":\"cordon refused this request: {id}\"}}}}"
    );
    let budget = recording.call.budget;
    let mut response = fixed(refusal.status, body, recording, refusal.close);
    let headers = response.headers_mut();
    headers.insert("x-cordon-refusal", HeaderValue::from_static(id));
    if let Some(spend) = budget {
        headers.insert("x-cordon-budget", HeaderValue::from_static(spend));
    }
    response
}

/// The vendor failed or did not answer: 502 or 504, and the connection closes (the vendor's is
/// gone; the agent reconnects through the proxy).
pub(super) fn failed(status: u16, mut recording: Recording) -> Response<Answer> {
    tracing::info!(status, "vendor request failed upstream");
    recording.call.status = status;
    let body = "{\"type\":\"error\",\"error\":{\"type\":\"cordon_upstream\",\
                \"message\":\"cordon: the vendor did not answer\"}}";
    fixed(status, body.to_owned(), recording, true)
}

pub(super) fn fixed(
    status: u16,
    body: String,
    recording: Recording,
    close: bool,
) -> Response<Answer> {
    let answer = Answer {
        source: Source::Fixed(Some(Bytes::from(body))),
        reader: Reader::None,
        ledger: recording.ledger.clone(),
        recording: Some(recording),
        terminator: None,
        cut: None,
    };
    let mut response = Response::new(answer);
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if close {
        headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// A request's record in the making: recorded once, when dropped (its response ended, failed,
/// or was dropped with the connection).
pub(super) struct Recording {
    pub(super) call: Call,
    pub(super) arrival: Instant,
    pub(super) ledger: Arc<Ledger>,
}

impl Recording {
    pub(super) fn start(
        ledger: &Arc<Ledger>,
        terminator: &Terminator,
        parts: &Parts,
        arrival: Instant,
    ) -> Recording {
        lock(&ledger.watch.state).in_flight += 1;
        let sentinel = &terminator.sentinel;
        Recording {
            call: Call {
                method: shown(parts.method.as_str(), SHOWN_METHOD, sentinel),
                path: shown(parts.uri.path(), SHOWN_PATH, sentinel),
                status: 0,
                request_bytes: 0,
                response_bytes: 0,
                duration_ms: 0,
                model: None,
                usage: None,
                refusal: None,
                budget: None,
            },
            arrival,
            ledger: ledger.clone(),
        }
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        let elapsed = self.arrival.elapsed().as_millis();
        self.call.duration_ms = u64::try_from(elapsed).unwrap_or(u64::MAX);
        let call = self.call.clone();
        self.ledger.calls.fetch_add(1, Ordering::SeqCst);
        self.ledger.watch.recorded();
        (self.ledger.record)(call);
    }
}

/// `text` for a record: withheld if it holds the sentinel, else at most `max` characters.
pub(super) fn shown(text: &str, max: usize, sentinel: &str) -> String {
    if holds(text, sentinel) {
        return "(withheld)".to_owned();
    }
    text.chars().take(max).collect()
}

pub(super) fn holds(text: &str, sentinel: &str) -> bool {
    !sentinel.is_empty() && text.contains(sentinel)
}

/// A response body to the agent: cordon's own (a refusal), or the vendor's, streamed, counted
/// against the response budget and read for usage.
pub(super) struct Answer {
    pub(super) source: Source,
    pub(super) reader: Reader,
    pub(super) recording: Option<Recording>,
    /// The budget the vendor's bytes count against (`None` for cordon's own answers).
    pub(super) terminator: Option<Arc<Terminator>>,
    pub(super) ledger: Arc<Ledger>,
    /// The response budget ran out (at this count of the agent connection's flushes): once
    /// what passed is flushed, the body ends with an error (before, hyper would drop it unsent).
    pub(super) cut: Option<u64>,
}

impl fmt::Debug for Answer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Answer").finish_non_exhaustive()
    }
}

pub(super) enum Source {
    Fixed(Option<Bytes>),
    Vendor(Incoming),
}

/// The usage reader a response's content type calls for.
pub(super) enum Reader {
    None,
    Stream(StreamUsage),
    Body(BodyUsage),
}

impl Reader {
    pub(super) fn for_type(headers: &HeaderMap) -> Reader {
        let kind = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .map(|v| v.trim().to_ascii_lowercase());
        match kind.as_deref() {
            Some("text/event-stream") => Reader::Stream(StreamUsage::default()),
            Some("application/json") => Reader::Body(BodyUsage::default()),
            _ => Reader::None,
        }
    }

    pub(super) fn feed(&mut self, bytes: &[u8]) {
        match self {
            Reader::None => {}
            Reader::Stream(reader) => reader.feed(bytes),
            Reader::Body(reader) => reader.feed(bytes),
        }
    }

    pub(super) fn usage(&self) -> Option<Usage> {
        match self {
            Reader::None => None,
            Reader::Stream(reader) => reader.usage(),
            Reader::Body(reader) => reader.usage(),
        }
    }
}

/// Why a response ended early (the agent sees a cut body; hyper closes the connection).
#[derive(Debug)]
pub(super) struct Cut(&'static str);

impl fmt::Display for Cut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the response was cut: {}", self.0)
    }
}

impl std::error::Error for Cut {}

impl Answer {
    /// Record the call, once: its usage as read so far.
    pub(super) fn finish(&mut self) {
        if let Some(mut recording) = self.recording.take() {
            recording.call.usage = self.reader.usage();
        }
    }

    /// Pass `data` as far as the response budget allows; past it, cut.
    pub(super) fn pass(&mut self, mut data: Bytes) -> Bytes {
        if let Some(terminator) = self.terminator.as_ref().filter(|t| !t.skip.budget) {
            let n = data.len() as u64;
            let passed = terminator.spending().response(&terminator.budget, n);
            if passed < n {
                self.cut = Some(self.ledger.watch.flushes());
                // `passed` is below a `usize` length.
                data.truncate(usize::try_from(passed).unwrap_or(0));
            }
        }
        self.reader.feed(&data);
        if let Some(recording) = &mut self.recording {
            recording.call.response_bytes += data.len() as u64;
            if self.cut.is_some() {
                recording.call.budget = Some(vendor::Spend::ResponseBytes.as_str());
            }
        }
        data
    }

    pub(super) fn end(&mut self, why: &'static str) -> Poll<Option<Result<Frame<Bytes>, Cut>>> {
        self.ledger.fail("response-cut");
        self.finish();
        Poll::Ready(Some(Err(Cut(why))))
    }
}

impl Body for Answer {
    type Data = Bytes;
    type Error = Cut;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Cut>>> {
        let this = self.get_mut();
        if let Some(at) = this.cut {
            if !this.ledger.watch.flushed_since(at, cx.waker()) {
                return Poll::Pending;
            }
            return this.end("the response budget ran out");
        }
        let body = match &mut this.source {
            Source::Fixed(bytes) => {
                let frame = bytes.take().map(|b| Ok(Frame::data(b)));
                if frame.is_none() {
                    this.finish();
                }
                return Poll::Ready(frame);
            }
            Source::Vendor(body) => body,
        };
        loop {
            match ready!(Pin::new(&mut *body).poll_frame(cx)) {
                None => {
                    this.finish();
                    return Poll::Ready(None);
                }
                Some(Err(_)) => return this.end("the vendor's body failed"),
                Some(Ok(frame)) => {
                    // Trailers are not passed on (HTTP/1.1 agents do not ask for them).
                    let Ok(data) = frame.into_data() else {
                        continue;
                    };
                    let data = this.pass(data);
                    if data.is_empty() && this.cut.is_some() {
                        // Nothing of it passes: end once what passed before is flushed.
                        cx.waker().wake_by_ref();
                        return Poll::Pending;
                    }
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.source {
            Source::Fixed(bytes) => bytes.is_none(),
            Source::Vendor(body) => self.cut.is_none() && body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.source {
            Source::Fixed(Some(bytes)) => SizeHint::with_exact(bytes.len() as u64),
            Source::Fixed(None) => SizeHint::with_exact(0),
            Source::Vendor(body) => body.size_hint(),
        }
    }
}

impl Drop for Answer {
    fn drop(&mut self) {
        self.finish();
    }
}
