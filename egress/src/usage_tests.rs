use super::*;

/// A streamed Messages response as the vendor documents it: usage in `message_start` (input,
/// cache) and the cumulative output in `message_delta`; text deltas between.
fn stream(text_deltas: &[&str]) -> Vec<u8> {
    let mut out = String::new();
    out.push_str(
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\
         \"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-x\",\"content\":[],\
         \"usage\":{\"input_tokens\":25,\"output_tokens\":1,\"cache_creation_input_tokens\":7,\
         \"cache_read_input_tokens\":3}}}\n\n",
    );
    out.push_str(": a comment line\n\nevent: ping\ndata: {\"type\": \"ping\"}\n\n");
    for text in text_deltas {
        let data = serde_json::json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": text}});
        out.push_str(&format!("event: content_block_delta\ndata: {data}\n\n"));
    }
    out.push_str(
        "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\
         \"end_turn\"},\"usage\":{\"output_tokens\":15}}\n\nevent: message_stop\ndata: \
         {\"type\":\"message_stop\"}\n\n",
    );
    out.into_bytes()
}

const EXPECTED: Usage = Usage {
    input_tokens: Some(25),
    output_tokens: Some(15),
    cache_creation_input_tokens: Some(7),
    cache_read_input_tokens: Some(3),
};

fn read(chunks: &[&[u8]]) -> Option<Usage> {
    let mut reader = StreamUsage::default();
    for chunk in chunks {
        reader.feed(chunk);
    }
    reader.usage()
}

#[test]
fn a_stream_reports_its_start_and_final_counts() {
    assert_eq!(read(&[&stream(&["Hello", " world"])]), Some(EXPECTED));
}

#[test]
fn every_split_of_the_stream_reads_the_same() {
    let whole = stream(&["a \"usage\" in text", "b"]);
    let mut bytewise = StreamUsage::default();
    for b in &whole {
        bytewise.feed(std::slice::from_ref(b));
    }
    assert_eq!(bytewise.usage(), Some(EXPECTED));
    for at in 0..=whole.len() {
        let (a, b) = whole.split_at(at);
        assert_eq!(read(&[a, b]), Some(EXPECTED), "split at {at}");
    }
}

#[test]
fn crlf_lines_a_data_field_without_its_space_and_data_over_lines_are_read() {
    let crlf = String::from_utf8(stream(&["x"]))
        .unwrap()
        .replace('\n', "\r\n");
    assert_eq!(read(&[crlf.as_bytes()]), Some(EXPECTED));
    let tight = b"data:{\"type\":\"message_delta\",\"usage\":{\"output_tokens\":9}}\n\n";
    assert_eq!(
        read(&[tight]),
        Some(Usage {
            output_tokens: Some(9),
            ..Usage::default()
        })
    );
    let split = b"data: {\"type\":\"message_delta\",\ndata: \"usage\":{\"output_tokens\":4}}\n\n";
    assert_eq!(
        read(&[split]),
        Some(Usage {
            output_tokens: Some(4),
            ..Usage::default()
        })
    );
}

#[test]
fn a_stream_without_usage_or_with_unreadable_usage_reports_none() {
    assert_eq!(read(&[b"event: ping\ndata: {\"type\":\"ping\"}\n\n"]), None);
    assert_eq!(read(&[b""]), None);
    // Unreadable JSON, a usage of the wrong shape, counts that are not counts.
    assert_eq!(
        read(&[b"data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":\n\n"]),
        None
    );
    assert_eq!(
        read(&[b"data: {\"type\":\"message_delta\",\"usage\":[1,2]}\n\n"]),
        None
    );
    assert_eq!(
        read(&[b"data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":-1,\"input_tokens\":\"9\"}}\n\n"]),
        None
    );
    // An event whose type is not a message's does not count, whatever it holds.
    assert_eq!(
        read(&[b"data: {\"type\":\"content_block_delta\",\"usage\":{\"output_tokens\":5}}\n\n"]),
        None
    );
    // An event not ended by a blank line is not dispatched.
    assert_eq!(
        read(&[b"data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":5}}\n"]),
        None
    );
}

#[test]
fn a_long_text_delta_streams_through_without_being_held() {
    let long = "y".repeat(4 * MAX_EVENT);
    let whole = stream(&[&long, "z"]);
    let mut reader = StreamUsage::default();
    let mut most = 0;
    for chunk in whole.chunks(4096) {
        reader.feed(chunk);
        most = most.max(reader.held());
    }
    assert_eq!(reader.usage(), Some(EXPECTED));
    assert!(most <= 2 * MAX_EVENT, "held {most} bytes");
    // A usage event past the bound is not read (nor held).
    let padded = format!(
        "data: {{\"type\":\"message_delta\",\"usage\":{{\"output_tokens\":3}},\"pad\":\"{}\"}}\n\n",
        "p".repeat(MAX_EVENT)
    );
    assert_eq!(read(&[padded.as_bytes()]), None);
    // Many data lines of one event, each short, together over the bound (valid JSON if joined
    // whole: the lines between are whitespace): not held past the bound, not read.
    let mut many = b"data: {\"type\":\"message_delta\",\n".to_vec();
    for _ in 0..=(MAX_EVENT / 1024) {
        many.extend_from_slice(b"data: ");
        many.extend_from_slice(&[b' '; 1024]);
        many.push(b'\n');
    }
    many.extend_from_slice(b"data: \"usage\":{\"output_tokens\":3}}\n");
    let mut reader = StreamUsage::default();
    reader.feed(&many);
    assert!(reader.held() <= MAX_EVENT, "held {}", reader.held());
    reader.feed(b"\n");
    assert_eq!(reader.usage(), None);
}

#[test]
fn a_whole_response_reports_its_usage_or_its_token_count() {
    let body = |text: &str| {
        let mut reader = BodyUsage::default();
        for chunk in text.as_bytes().chunks(3) {
            reader.feed(chunk);
        }
        reader.usage()
    };
    assert_eq!(
        body(r#"{"id":"m","usage":{"input_tokens":12,"output_tokens":34}}"#),
        Some(Usage {
            input_tokens: Some(12),
            output_tokens: Some(34),
            ..Usage::default()
        })
    );
    assert_eq!(
        body(r#"{"input_tokens":42}"#),
        Some(Usage {
            input_tokens: Some(42),
            ..Usage::default()
        })
    );
    assert_eq!(
        body(r#"{"type":"error","error":{"type":"overloaded_error"}}"#),
        None
    );
    assert_eq!(body("not json"), None);
    let huge = format!(r#"{{"input_tokens":1,"pad":"{}"}}"#, "p".repeat(MAX_BODY));
    assert_eq!(body(&huge), None);
}
