//! Entry points for the fuzz targets (crates/fuzz-targets) into the hub's internal parsers,
//! which nothing else outside this crate may call. Not part of the hub's API.

use bytes::Bytes;
use fe2o3_amqp::types::messaging::annotations::OwnedKey;
use fe2o3_amqp::types::messaging::message::__private::{Deserializable, Serializable};
use fe2o3_amqp::types::messaging::{
    AmqpValue, ApplicationProperties, Body, Data, Header, Message, MessageAnnotations,
};
use fe2o3_amqp::types::primitives::{Binary, OrderedMap, SimpleValue, Value};

use crate::AmqpMessage;
use crate::log::StoredEvent;

/// The stored message `payload` as a consumer receives it, both ways: for every payload the
/// hub can store (one that decodes), the fast path that splices bytes (`received`) must give
/// exactly the message of the typed path that decodes and encodes (`links::to_received`), or
/// leave the message to it; both for a receiver that tracks the partition's last enqueued event
/// and for one that does not. Panics when they disagree.
pub fn received_paths_agree(payload: &[u8], sequence: i64, offset: i64, enqueued_ms: i64) {
    let event = StoredEvent {
        sequence,
        offset,
        enqueued_ms,
        payload: Bytes::copy_from_slice(payload),
    };
    // Only messages that decode are ever stored: a producer's delivery (and every event of a
    // batch) is decoded before it is appended. Bytes that do not decode never reach either path.
    let last = crate::received::LastEnqueued::new(
        sequence.wrapping_add(7),
        offset.wrapping_add(1000),
        enqueued_ms.wrapping_add(5),
        enqueued_ms.wrapping_add(9),
    );
    for last in [None, Some(&last)] {
        let Some(typed) = crate::links::to_received(&event, last) else {
            return;
        };
        let Some(fast) =
            crate::received::received_bytes(payload, sequence, offset, enqueued_ms, last)
        else {
            continue;
        };
        let decoded: Deserializable<AmqpMessage> = serde_amqp::from_slice(&fast)
            .unwrap_or_else(|e| panic!("the fast path's bytes do not decode ({e}): {fast:02x?}"));
        assert_eq!(decoded.0, typed, "the two paths disagree on {payload:02x?}");
    }
}

/// An encoded AMQP message made from `data`: its body (data or a string value), application
/// properties, message annotations and header chosen by the bytes, so that a fuzzer's bytes
/// become messages producers could send.
pub fn message_from(data: &[u8]) -> Vec<u8> {
    let (shape, rest) = data.split_first().unwrap_or((&0, &[]));
    let body: Body<Value> = if shape & 1 == 0 {
        Body::Data(std::iter::once(Data(Binary::from(rest.to_vec()))).collect())
    } else {
        Body::Value(AmqpValue(Value::String(
            String::from_utf8_lossy(rest).into_owned(),
        )))
    };
    let mut message: AmqpMessage = Message {
        header: None,
        delivery_annotations: None,
        message_annotations: None,
        properties: None,
        application_properties: None,
        body,
        footer: None,
    };
    if shape & 2 != 0 {
        let mut properties = OrderedMap::new();
        for (i, chunk) in rest.chunks(7).take(6).enumerate() {
            properties.insert(
                format!("p{i}"),
                SimpleValue::String(String::from_utf8_lossy(chunk).into_owned()),
            );
        }
        message.application_properties = Some(ApplicationProperties(properties));
    }
    if shape & 4 != 0 {
        let mut annotations = OrderedMap::new();
        annotations.insert(
            OwnedKey::from("x-opt-partition-key"),
            Value::String(format!("home-{}", rest.len())),
        );
        if shape & 16 != 0 {
            // A stamp the producer set itself: the fast path must leave such a message alone.
            annotations.insert(
                OwnedKey::from(crate::received::SEQUENCE_NUMBER),
                Value::Long(-7),
            );
        }
        message.message_annotations = Some(MessageAnnotations(annotations));
    }
    if shape & 8 != 0 {
        message.header = Some(Header {
            durable: true,
            ..Header::default()
        });
    }
    serde_amqp::to_vec(&Serializable(message)).expect("a message encodes")
}

/// The input guard reads a connection's bytes as they arrive: fed `input` in two pieces (cut at
/// `cut`), as a socket may deliver it, it must admit exactly what it admits of the whole, or
/// refuse it for the same reason; and what it admits is whole frames within the input.
pub fn frame_guard_agrees(input: &[u8], cut: usize) {
    use crate::inbound::FrameGuard;
    let guard = || FrameGuard::new(4096, 8192);
    let whole = guard().admit(input);
    if let Ok(n) = whole {
        assert!(n <= input.len(), "admitted {n} of {} bytes", input.len());
    }
    let cut = cut % (input.len() + 1);
    let mut stepwise = guard();
    let pieces = stepwise
        .admit(&input[..cut])
        .and_then(|first| stepwise.admit(&input[first..]).map(|second| first + second));
    assert_eq!(pieces, whole, "cut at {cut}: {input:02x?}");
}

/// A Kafka request frame (without its size prefix), any bytes: the frame checks, the array guard
/// and the decoder answer or refuse, never panic, and never reserve memory from a count the
/// bytes cannot hold (a run under a memory limit catches one that does).
pub fn kafka_request(frame: &[u8]) {
    let _ = crate::kafka::decode(Bytes::copy_from_slice(frame));
}

/// A produce request's record batches, any bytes: decoded or refused, never a panic; what
/// decodes is fetched back (encoded as the hub returns it) with the same keys, values and
/// headers.
pub fn kafka_record_batches(records: &[u8]) {
    use crate::kafka::batch;
    let Ok(batches) = batch::decode(
        Bytes::copy_from_slice(records),
        &std::cell::Cell::new(batch::MAX_DECOMPRESSED_BYTES),
    ) else {
        return;
    };
    let events: Vec<_> = batches.into_iter().flat_map(|b| b.events).collect();
    if events.is_empty() {
        return;
    }
    let fetched: Vec<batch::Fetched> = events
        .iter()
        .enumerate()
        .map(|(i, event)| batch::Fetched {
            sequence: i as i64,
            enqueued_ms: 0,
            event: event.clone(),
        })
        .collect();
    let again = batch::decode(
        batch::encode(&fetched),
        &std::cell::Cell::new(batch::MAX_DECOMPRESSED_BYTES),
    )
    .expect("what the hub encodes decodes");
    let round: Vec<_> = again.into_iter().flat_map(|b| b.events).collect();
    assert_eq!(
        round, events,
        "a fetched batch differs from the produced one"
    );
}

/// A runtime for one fuzz case, on the fuzzer's thread.
fn case_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

/// How long a fuzz case waits for one answer: a request that waits longer (a Fetch for events
/// that do not come, a join waiting for a rebalance) ends the case, as a client would wait.
const ANSWER_WAIT: std::time::Duration = std::time::Duration::from_millis(50);

/// A Kafka connection's sequence of requests, any bytes: frames of `[u16 length][bytes]`
/// answered one after the other by the endpoint over an in-memory namespace (hub `sensors`,
/// 2 partitions), from a fresh connection, or — when the first byte is odd — one that completed
/// SASL PLAIN with the emulator's connection string; a request that waits more than 50 ms ends
/// the case. Never a panic; before SASL, nothing but the
/// SASL exchange, ApiVersions and Metadata is answered; every response frame's size is its own.
pub fn kafka_connection(data: &[u8]) {
    use crate::kafka::{Kafka, Session};
    let Some((&mode, mut rest)) = data.split_first() else {
        return;
    };
    let config = crate::HubConfig::new(
        "127.0.0.1:0".parse().expect("an address"),
        vec![crate::HubSpec::parse_flag("sensors:2").expect("a hub")],
        None,
    );
    let namespace = std::sync::Arc::new(crate::Namespace::open(&config).expect("in memory"));
    case_runtime().block_on(async move {
        let kafka =
            Kafka::open(namespace, crate::kafka::DEFAULT_OFFSETS_RETENTION).expect("in memory");
        let mut session = Session::new("127.0.0.1:9092".parse().expect("an address"));
        if mode % 2 == 1 {
            for frame in sasl_plain_frames() {
                let answer = kafka.answer(&mut session, frame).await;
                assert!(answer.is_ok_and(|a| a.close.is_none()), "SASL PLAIN");
            }
            assert!(session.is_authenticated(), "SASL PLAIN");
        }
        while rest.len() >= 2 {
            let len = usize::from(u16::from_be_bytes([rest[0], rest[1]])).min(rest.len() - 2);
            let frame = Bytes::copy_from_slice(&rest[2..2 + len]);
            rest = &rest[2 + len..];
            let before = session.is_authenticated();
            let key = i16::from_be_bytes([
                frame.first().copied().unwrap_or(0),
                frame.get(1).copied().unwrap_or(0),
            ]);
            let Ok(answered) =
                tokio::time::timeout(ANSWER_WAIT, kafka.answer(&mut session, frame)).await
            else {
                return; // the request waits (for events, for a rebalance)
            };
            match answered {
                Err(_) => return, // the connection closes
                Ok(answer) => {
                    if !before {
                        assert!(
                            matches!(key, 18 | 17 | 36 | 3),
                            "API key {key} answered before SASL"
                        );
                    }
                    if let Some(out) = &answer.response {
                        let declared = i32::from_be_bytes([out[0], out[1], out[2], out[3]]);
                        assert_eq!(declared as usize, out.len() - 4, "a response's size");
                    }
                    if answer.close.is_some() {
                        return;
                    }
                }
            }
        }
    });
}

/// SaslHandshake v1 (PLAIN) and SaslAuthenticate v2 with the emulator's connection string, as
/// frames without their size prefix.
fn sasl_plain_frames() -> [Bytes; 2] {
    use kafka_protocol::messages::{
        ApiKey, RequestHeader, SaslAuthenticateRequest, SaslHandshakeRequest,
    };
    use kafka_protocol::protocol::{Encodable, StrBytes};
    fn frame<R: Encodable>(key: ApiKey, version: i16, request: &R) -> Bytes {
        let mut out = bytes::BytesMut::new();
        RequestHeader::default()
            .with_request_api_key(key as i16)
            .with_request_api_version(version)
            .with_correlation_id(1)
            .encode(&mut out, key.request_header_version(version))
            .expect("a header");
        request.encode(&mut out, version).expect("a request");
        out.freeze()
    }
    let password = format!(
        "\0$ConnectionString\0Endpoint=sb://localhost;SharedAccessKeyName={};SharedAccessKey={};UseDevelopmentEmulator=true;",
        crate::sas::EMULATOR_KEY_NAME,
        crate::sas::EMULATOR_KEY
    );
    [
        frame(
            ApiKey::SaslHandshake,
            1,
            &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN")),
        ),
        frame(
            ApiKey::SaslAuthenticate,
            2,
            &SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(password)),
        ),
    ]
}

/// An HTTP request to the admin endpoint, any bytes: a method (the first byte: GET or POST),
/// then `path\n`, header lines `name: value\n` up to an empty line, and the body. Answered by
/// the endpoint's routes over an in-memory namespace, behind its guard: never a panic or a
/// server error, every refusal a JSON error, and nothing served without the token.
pub fn admin_request(data: &[u8]) {
    use tower::ServiceExt;
    let Some((&method, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    let (path, rest) = text.split_once('\n').unwrap_or((&text, ""));
    let (head, body) = rest.split_once("\n\n").unwrap_or((rest, ""));
    let mut request = axum::http::Request::builder()
        .method(if method % 2 == 0 { "GET" } else { "POST" })
        .uri(path);
    let mut with_token = false;
    for line in head.lines() {
        if let Some((name, value)) = line.split_once(':') {
            with_token |= name.trim().eq_ignore_ascii_case("authorization")
                && value.trim() == format!("Bearer {FUZZ_ADMIN_TOKEN}");
            request = request.header(name.trim(), value.trim());
        }
    }
    let Ok(request) = request.body(axum::body::Body::from(body.to_string())) else {
        return; // not a request axum could be handed
    };
    let config = crate::HubConfig::new(
        "127.0.0.1:0".parse().expect("an address"),
        vec![crate::HubSpec::parse_flag("sensors:2").expect("a hub")],
        None,
    );
    let namespace = std::sync::Arc::new(crate::Namespace::open(&config).expect("in memory"));
    let state = crate::admin::AdminState::new(namespace, None, FUZZ_ADMIN_TOKEN);
    case_runtime().block_on(async move {
        let response = crate::admin::router(state)
            .oneshot(request)
            .await
            .expect("the router answers");
        let status = response.status();
        assert!(!status.is_server_error(), "{status}");
        if status.is_success() {
            assert!(with_token, "served without the token: {status}");
        }
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("a body");
        if status.is_client_error() {
            let error: serde_json::Value = serde_json::from_slice(&body)
                .unwrap_or_else(|e| panic!("{status}: not JSON ({e}): {body:?}"));
            assert!(error["error"]["message"].is_string(), "{status}: {error}");
        }
    });
}

/// The admin token of [`admin_request`]'s endpoint.
pub const FUZZ_ADMIN_TOKEN: &str = "fuzz-token";
