//! One function per parser of outside input. Each takes arbitrary bytes, must never panic, and
//! checks what the parser promises (it panics, failing the run, when a promise is broken):
//! errors name the problem without echoing a secret, what parses round-trips, a damaged log
//! never serves a damaged record.
//!
//! Two runners share them: `fuzz/` (cargo-fuzz, coverage-guided, nightly) for long campaigns,
//! and this crate's tests on stable, which run every file of `fuzz/corpus/{target}/` and a
//! bounded number of generated and mutated cases (`tests/targets.rs`). A crash a campaign finds
//! is saved in the corpus, so it stays a regression test.

use std::collections::BTreeMap;

use bytes::Bytes;
use chrono::{TimeZone, Utc};
use serde_json::{Value, json};

use hubhost_functions::batch::{EventRecord, PartitionContext};
use hubhost_functions::contract::decode::decode_request;
use hubhost_functions::contract::encode::{HostInvocation, MetadataFlavor, encode_request};
use hubhost_functions::function_app::{EventHubTrigger, FunctionSpec};

/// A fuzz target: arbitrary bytes in; a panic is a finding.
pub type Target = fn(&[u8]);

/// Every target by name, as `fuzz/fuzz_targets/` and the corpus folders name them.
pub const TARGETS: &[(&str, Target)] = &[
    ("host_request", host_request),
    ("host_request_roundtrip", host_request_roundtrip),
    ("json_text", json_text),
    ("connection_string", connection_string),
    ("host_json", host_json),
    ("function_json", function_json),
    ("local_settings", local_settings),
    ("emulator_config", emulator_config),
    ("checkpoint_metadata", checkpoint_metadata),
    ("legacy_lease", legacy_lease),
    ("sas_token", sas_token),
    ("selector_filter", selector_filter),
    ("timespan", timespan),
    ("segment_recovery", segment_recovery),
    ("received_message", received_message),
    ("frame_guard", frame_guard),
    ("kafka_request", kafka_request),
    ("kafka_record_batches", kafka_record_batches),
    ("kafka_connection", kafka_connection),
    ("admin_request", admin_request),
];

/// The key every connection string target plants, to check it never comes back in an error.
const SECRET: &str = "c2VjcmV0LWtleS1uZXZlci1pbi1hLW1lc3NhZ2U=";

fn text(data: &[u8]) -> String {
    String::from_utf8_lossy(data).into_owned()
}

fn trigger(cardinality: &str, data_type: Option<&str>) -> EventHubTrigger {
    let mut binding = json!({
        "type": "eventHubTrigger", "name": "events", "direction": "in",
        "eventHubName": "sensors", "connection": "EventHubConnection",
        "cardinality": cardinality,
    });
    if let Some(t) = data_type {
        binding["dataType"] = Value::from(t);
    }
    FunctionSpec::from_json("F", &json!({ "bindings": [binding] }))
        .expect("a valid function.json")
        .event_hub_trigger()
        .expect("an eventHubTrigger")
        .clone()
}

/// The host's request, any bytes: decoding answers or refuses, for every trigger shape.
pub fn host_request(data: &[u8]) {
    for (cardinality, data_type) in [
        ("many", None),
        ("many", Some("string")),
        ("many", Some("binary")),
        ("one", None),
        ("one", Some("binary")),
    ] {
        if let Ok(batch) = decode_request("F", &trigger(cardinality, data_type), data) {
            if cardinality == "one" {
                assert_eq!(batch.events.len(), 1, "cardinality one decoded to a batch");
            }
            for (i, event) in batch.events.iter().enumerate() {
                let _ = event.text();
                let _ = batch.system_properties.of(i);
            }
        }
    }
}

/// The contract's own JSON string reader against serde_json on any text: the same content
/// or both refusing; an array of strings read only as serde_json reads it; an object's members
/// (strings unescaped, other values as their exact text) as serde_json reads them, and every
/// object serde_json reads, read.
pub fn json_text(data: &[u8]) {
    use hubhost_functions::contract::json_text::{Member, ObjectReader, string_array, unescape};
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let theirs = serde_json::from_str::<String>(text).ok();
    let ours = unescape(text).ok().map(|s| s.into_owned());
    assert_eq!(
        ours, theirs,
        "unescape disagrees with serde_json on {text:?}"
    );

    if let Some(strings) = string_array(text) {
        let theirs: Vec<String> = serde_json::from_str(text).unwrap_or_else(|e| {
            panic!("string_array read {text:?}, which serde_json refuses: {e}")
        });
        assert_eq!(strings, theirs);
    }

    let read = || -> Result<Vec<(String, Member)>, _> {
        let mut object = ObjectReader::new(text, 0)?;
        let mut members = Vec::new();
        while let Some(key) = object.next_key()? {
            members.push((key.into_owned(), object.value()?));
        }
        if !object.at_end() {
            return Err(hubhost_functions::contract::json_text::TextError::TrailingCharacters);
        }
        Ok(members)
    };
    let theirs = serde_json::from_str::<serde_json::Map<String, Value>>(text);
    match (read(), theirs) {
        (Ok(members), Ok(map)) => {
            let mut last = BTreeMap::new();
            for (key, value) in members {
                let value = match value {
                    Member::Text(t) => Value::String(t.into_owned()),
                    Member::Raw(raw) => serde_json::from_str(raw).expect("serde_json read it"),
                };
                last.insert(key, value);
            }
            assert_eq!(last.len(), map.len(), "members of {text:?}");
            for (key, value) in &map {
                assert_eq!(last.get(key), Some(value), "member {key:?} of {text:?}");
            }
        }
        // serde_json's own raw values check escapes more leniently than its strings do.
        (Ok(members), Err(e)) => assert!(
            members.iter().any(|(_, value)| matches!(value,
                Member::Raw(raw) if serde_json::from_str::<Value>(raw).is_err())),
            "the object reader read {text:?}, which serde_json refuses: {e}"
        ),
        (Err(e), Ok(_)) => {
            panic!("the object reader refused {text:?}, which serde_json reads: {e}")
        }
        (Err(_), Err(_)) => {}
    }
}

/// Events made from the bytes, encoded as the host does and decoded again: the same bodies,
/// sequence numbers and partition.
pub fn host_request_roundtrip(data: &[u8]) {
    let bodies: Vec<&[u8]> = data.split(|b| *b == 0xff).take(64).collect();
    let partition = PartitionContext {
        fully_qualified_namespace: Some("ns.servicebus.windows.net".into()),
        event_hub_name: Some("sensors".into()),
        consumer_group: Some("$Default".into()),
        partition_id: (data.len() % 32).to_string(),
        is_checkpointing_after_invocation: Some(true),
    };
    let now = Utc.timestamp_opt(1_700_000_000, 0).unwrap();
    let event = |i: usize, body: Bytes| {
        let mut e = EventRecord::new(body);
        e.sequence_number = Some(i as i64);
        e.offset = Some((i * 100).to_string());
        e.enqueued_time = Some(now);
        e
    };
    for (data_type, as_text) in [("binary", false), ("string", true)] {
        let events: Vec<EventRecord> = bodies
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let body = if as_text {
                    Bytes::from(String::from_utf8_lossy(b).into_owned())
                } else {
                    Bytes::copy_from_slice(b)
                };
                event(i, body)
            })
            .collect();
        for cardinality in ["many", "one"] {
            let trigger = trigger(cardinality, Some(data_type));
            let events = if cardinality == "one" {
                &events[..1]
            } else {
                &events[..]
            };
            for flavor in [
                MetadataFlavor::Current,
                MetadataFlavor::EarlyV5,
                MetadataFlavor::LegacyV4,
            ] {
                let request = encode_request(&HostInvocation {
                    function: "F",
                    trigger: &trigger,
                    partition: &partition,
                    events,
                    retry: None,
                    flavor,
                    now,
                    inputs: &[],
                })
                .expect("events with bodies of the binding's type encode");
                let batch = decode_request("F", &trigger, &request).unwrap_or_else(|e| {
                    panic!("our own request does not decode ({flavor:?}): {e}")
                });
                let got: Vec<&Bytes> = batch.events.iter().map(|e| &e.body).collect();
                let sent: Vec<&Bytes> = events.iter().map(|e| &e.body).collect();
                assert_eq!(got, sent, "{data_type} {cardinality} {flavor:?}");
                let sequences: Vec<Option<i64>> =
                    batch.events.iter().map(|e| e.sequence_number).collect();
                let expected: Vec<Option<i64>> = events.iter().map(|e| e.sequence_number).collect();
                assert_eq!(sequences, expected, "{flavor:?}");
                assert_eq!(batch.partition.partition_id, partition.partition_id);
            }
        }
    }
}

/// Event Hubs and storage connection strings: parsed or refused, and a refusal never repeats
/// the key.
pub fn connection_string(data: &[u8]) {
    let raw = text(data);
    // As written, and with a key planted in it: the error must not echo it.
    for s in [
        raw.clone(),
        format!("{raw};SharedAccessKey={SECRET}"),
        format!("AccountKey={SECRET};{raw}"),
    ] {
        match hubhost_eventhubs::EventHubTarget::parse(&s, None) {
            Ok(target) => {
                let shown = format!("{target:?}");
                assert!(!shown.contains(SECRET), "a target shows its key: {shown}");
            }
            Err(e) => assert!(!e.to_string().contains(SECRET), "error echoes the key: {e}"),
        }
        match hubhost_storage::StorageLocation::parse(&s) {
            Ok(location) => {
                if let hubhost_storage::StorageLocation::Azure(connection) = location {
                    let shown = format!("{connection:?}");
                    assert!(
                        !shown.contains(SECRET),
                        "a connection shows its key: {shown}"
                    );
                }
            }
            Err(e) => assert!(!e.to_string().contains(SECRET), "error echoes the key: {e}"),
        }
    }
}

/// host.json's `extensions.eventHubs`: options or a message naming the key; options that
/// parse are consistent.
pub fn host_json(data: &[u8]) {
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let wrapped = json!({"version": "2.0", "extensions": {"eventHubs": value.clone()}});
    for host in [value, wrapped] {
        if let Ok(options) = hubhost_processor::ProcessorOptions::from_host_json(&host) {
            assert!(options.max_batch_size >= 1);
            assert!(options.min_batch_size <= options.max_batch_size);
            assert!(options.balancer.validate().is_ok());
            assert!(options.balancer.foreign_ownership_expiry >= options.balancer.ownership_expiry);
        }
    }
}

/// A function.json: a spec or a message.
pub fn function_json(data: &[u8]) {
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let wrapped = json!({ "bindings": [value.clone()] });
    for json in [value, wrapped] {
        if let Ok(spec) = FunctionSpec::from_json("F", &json)
            && let Some(trigger) = spec.event_hub_trigger()
        {
            assert!(!trigger.binding_name.is_empty());
        }
    }
}

/// local.settings.json: its `Values`, or a message.
pub fn local_settings(data: &[u8]) {
    if let Ok(values) = hubhost_host::emulate::AppSettings::parse_values(&text(data)) {
        for key in values.keys() {
            assert!(!key.is_empty() || values.contains_key(""));
        }
    }
}

/// The official emulator's Config.json (or hubhost's own hub list).
pub fn emulator_config(data: &[u8]) {
    if let Ok(hubs) = hubhost_hub::config::hubs_from_json(&text(data)) {
        for hub in hubs {
            assert!(
                (1..=32).contains(&hub.partitions),
                "a hub with {} partitions was accepted",
                hub.partitions
            );
            assert!(hubhost_hub::config::is_valid_hub_name(&hub.name));
        }
    }
}

/// Checkpoint blob metadata, as any writer may have left it.
pub fn checkpoint_metadata(data: &[u8]) {
    let raw = text(data);
    let mut metadata = BTreeMap::new();
    for pair in raw.split('\n') {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        metadata.insert(k.to_string(), v.to_string());
    }
    let now = Utc.timestamp_opt(1_700_000_000, 0).unwrap();
    if let Ok(checkpoint) = hubhost_checkpoints::checkpoint_from_metadata(
        "ns/hub/cg/checkpoint/0",
        "0".into(),
        &metadata,
        now,
    ) {
        assert!(checkpoint.offset.is_some() || checkpoint.sequence_number.is_some());
    }
}

/// A legacy (v3/v4) JSON lease blob.
pub fn legacy_lease(data: &[u8]) {
    if let Ok(Some(lease)) = hubhost_checkpoints::legacy::parse("ns/hub/cg/0", "0", data) {
        let _ = format!("{lease:?}");
    }
}

/// A SAS token: refused or granted, never granted when tampered with.
pub fn sas_token(data: &[u8]) {
    use hubhost_hub::sas::{SharedAccessKey, sign, validate};
    let key = SharedAccessKey::emulator();
    let now = 1_700_000_000;
    let raw = text(data);
    let _ = validate(&raw, std::slice::from_ref(&key), now);
    // A token we sign for the bytes as a resource is granted, for that resource only; the
    // same token with any byte changed is not.
    let resource = format!("sb://localhost/{}", raw.replace(['\r', '\n'], ""));
    let token = sign(&resource, &key, now + 60);
    let grant = validate(&token, std::slice::from_ref(&key), now)
        .unwrap_or_else(|e| panic!("a token signed here is refused: {e}: {token}"));
    assert_eq!(
        grant.resource,
        hubhost_hub::sas::normalize_resource(&resource)
    );
    if let Some(first) = data.first() {
        let position = usize::from(*first) % token.len();
        let mut tampered = token.clone().into_bytes();
        tampered[position] = if tampered[position] == b'A' {
            b'B'
        } else {
            b'A'
        };
        if let Ok(tampered) = String::from_utf8(tampered)
            && tampered != token
            && let Ok(g) = validate(&tampered, std::slice::from_ref(&key), now)
        {
            // Only a change that leaves the signed parts equal may pass (e.g. a key name's
            // case, or the order of fields); never one that changes what is granted.
            assert_eq!(g.resource, grant.resource, "tampered: {tampered}");
            assert_eq!(g.expires_at, grant.expires_at, "tampered: {tampered}");
        }
    }
    // Expired is refused.
    assert!(validate(&token, std::slice::from_ref(&key), now + 61).is_err());
}

/// A receiver's selector filter.
pub fn selector_filter(data: &[u8]) {
    let raw = text(data);
    let _ = hubhost_hub::filter::parse(Some(&raw));
}

/// host.json time spans (`00:00:05`, `1.02:03:04.5`).
pub fn timespan(data: &[u8]) {
    if let Some(span) = hubhost_trigger::time::parse_timespan(&text(data)) {
        let _ = span.as_secs_f64();
    }
}

/// A partition log whose segment files were truncated or damaged: it opens without a panic,
/// serves only records exactly as written, and keeps every whole record before the damage.
///
/// The bytes choose the records (count and sizes), the segment size and the damage: a
/// truncation or a changed byte at some position of the byte stream.
pub fn segment_recovery(data: &[u8]) {
    use hubhost_hub::log::{LogOptions, PartitionLog};
    let mut bytes = data.iter().copied().chain(std::iter::repeat(7));
    let mut next = || bytes.next().unwrap_or(0);
    let count = 1 + usize::from(next()) % 40;
    let segment_bytes = 64 + u64::from(next()) * 8;
    let dir = tempfile::tempdir().expect("a temporary folder");
    let options = || LogOptions {
        dir: Some(dir.path().to_path_buf()),
        segment_bytes,
        cache_bytes: 1 << 20,
        fsync: false,
    };
    let mut written = Vec::new();
    {
        let mut log = PartitionLog::open(options()).expect("a new log opens");
        for i in 0..count {
            let len = usize::from(next()) % 48;
            let payload: Vec<u8> = (0..len).map(|j| (i * 31 + j) as u8).collect();
            let placed = log
                .append(vec![(
                    Bytes::from(payload.clone()),
                    1_700_000_000_000 + i as i64,
                )])
                .expect("append");
            let (sequence, offset) = placed[0];
            written.push((sequence, offset, payload));
        }
    }
    let end = written
        .last()
        .map(|(_, offset, p)| offset + 24 + p.len() as i64)
        .unwrap_or(0);
    // The damage: a position in the byte stream, and what happens there.
    let position = (u64::from(next()) << 8 | u64::from(next())) as i64 % end.max(1);
    let truncate = next() % 2 == 0;
    let mut segments: Vec<(i64, std::path::PathBuf)> = std::fs::read_dir(dir.path())
        .expect("the log's folder")
        .filter_map(|e| {
            let path = e.ok()?.path();
            let first: i64 = path.file_stem()?.to_str()?.parse().ok()?;
            Some((first, path))
        })
        .collect();
    segments.sort();
    let Some((first, path)) = segments
        .iter()
        .rev()
        .find(|(first, _)| *first <= position)
        .cloned()
    else {
        return;
    };
    let mut file = std::fs::read(&path).expect("a segment");
    let at = (position - first) as usize;
    if at >= file.len() {
        return;
    }
    if truncate {
        file.truncate(at);
    } else {
        file[at] ^= 1 | next();
    }
    std::fs::write(&path, &file).expect("the damaged segment");

    let log = PartitionLog::open(options()).expect("a damaged log still opens");
    let summary = log.summary();
    let mut served = Vec::new();
    let mut from = summary.begin_sequence;
    while from < summary.next_sequence {
        let events = log.read(from, 100).expect("reading the recovered log");
        let Some(last) = events.last() else { break };
        from = last.sequence + 1;
        served.extend(events);
    }
    let by_sequence: BTreeMap<i64, &(i64, i64, Vec<u8>)> =
        written.iter().map(|w| (w.0, w)).collect();
    for event in &served {
        let (_, offset, payload) = by_sequence
            .get(&event.sequence)
            .unwrap_or_else(|| panic!("served sequence {} was never written", event.sequence));
        assert_eq!(event.offset, *offset, "sequence {}", event.sequence);
        assert_eq!(
            &event.payload[..],
            &payload[..],
            "sequence {} served damaged",
            event.sequence
        );
    }
    // Every record wholly before the damage is still there.
    let kept: std::collections::BTreeSet<i64> = served.iter().map(|e| e.sequence).collect();
    for (sequence, offset, payload) in &written {
        if offset + 24 + payload.len() as i64 <= position {
            assert!(
                kept.contains(sequence),
                "record {sequence} (bytes {offset}..{}) was lost to damage at {position}",
                offset + 24 + payload.len() as i64
            );
        }
    }
}

/// A stored message as a consumer receives it: the byte-splicing fast path agrees with the
/// typed path (decode, stamp, encode) on every message, or leaves it to the typed path. Half of
/// the inputs are made into well-formed messages first, half are taken as raw bytes.
pub fn received_message(data: &[u8]) {
    let (first, rest) = data.split_first().unwrap_or((&0, &[]));
    let sequence = i64::from(*first) * 1_000_003;
    let offset = i64::from(*first) << 20;
    let enqueued_ms = 1_700_000_000_000 + i64::from(*first);
    if first & 1 == 0 {
        let message = hubhost_hub::fuzzing::message_from(rest);
        hubhost_hub::fuzzing::received_paths_agree(&message, sequence, offset, enqueued_ms);
    } else {
        hubhost_hub::fuzzing::received_paths_agree(rest, sequence, offset, enqueued_ms);
    }
}

/// A client's bytes through the hub's input guard (`hubhost_hub::inbound`): delivered whole or
/// in two pieces (the first byte chooses the cut), it admits the same frames or refuses for the
/// same reason, and never panics.
pub fn frame_guard(data: &[u8]) {
    let (first, rest) = data.split_first().unwrap_or((&0, &[]));
    hubhost_hub::fuzzing::frame_guard_agrees(rest, usize::from(*first) * 7);
}

/// A Kafka request frame, any bytes: refused or decoded, never a panic or an allocation the
/// frame's bytes cannot justify.
pub fn kafka_request(data: &[u8]) {
    hubhost_hub::fuzzing::kafka_request(data);
}

/// A produce request's record batches, any bytes: refused or decoded, and what decodes comes
/// back the same when fetched.
pub fn kafka_record_batches(data: &[u8]) {
    hubhost_hub::fuzzing::kafka_record_batches(data);
}

/// A Kafka connection's requests in sequence (frames of `[u16 length][bytes]`), before SASL or
/// after it (the first byte odd): answered or closed, never a panic; before SASL nothing but the
/// exchange, ApiVersions and Metadata is answered.
pub fn kafka_connection(data: &[u8]) {
    hubhost_hub::fuzzing::kafka_connection(data);
}

/// A request to the hub's admin endpoint (a method byte, `path\n`, header lines, an empty line,
/// a body): never a panic or a server error, every refusal a JSON error, nothing served without
/// the token.
pub fn admin_request(data: &[u8]) {
    hubhost_hub::fuzzing::admin_request(data);
}
