//! `hubhost hub` against hostile clients, each attack made while well-behaved clients — the
//! official Python SDK over AMQP and librdkafka over Kafka, each sending one event — must still
//! succeed within 2 s, and the hub must stay up and within 64 MiB of its idle memory.
//!
//! - Sockets that connect to the Kafka endpoint and stall in a request's header never
//!   authenticate: they are closed at the open timeout, and meanwhile a new client takes the
//!   slot of the oldest of them when the hub is full; a request larger than the SASL exchange
//!   needs is refused from its declared size before authentication.
//! - A hub out of file descriptors (its limit set low with `prlimit`) keeps accepting: it
//!   closes its oldest unauthenticated connections to free descriptors, and never exits.
//!
//! - The second probe's findings, one test each: spoofed idempotent producer ids (and a restart
//!   after a burst of them) drop no acknowledged record; a request of a hundred compressed
//!   batches is refused before it is decompressed; unauthenticated connections' unfinished
//!   frames and WebSocket messages share one memory budget; a client scoped to one hub cannot
//!   lead another hub's group; throwaway groups fill only their own client's caps, and their
//!   offsets expire; the admin endpoint's reads count properties; a hub name too long for a
//!   file is refused with 400.
//!
//! (tests/hub/amqp_abuse.rs drives the AMQP side frame by frame.)

use std::io::Write;
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hubhost_testkit::{self as kit, Hub, KEY, Tool};

/// How long a well-behaved client may take beside an attack.
const WELL_BEHAVED_WITHIN: f64 = 2.0;

/// The most the hub's memory may grow through an attack.
const MEMORY_BOUND_KIB: u64 = 64 * 1024;

/// This test process's own descriptors, for a thousand sockets.
fn raise_own_descriptor_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: reading and setting this process's own limit through a local struct.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit);
        limit.rlim_cur = limit.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
    }
}

/// A well-behaved client's one send (tests/python/well_behaved_peer.py), which must succeed
/// within [`WELL_BEHAVED_WITHIN`].
fn well_behaved(args: &[&str], beside: &str) {
    let result = kit::python_json("well_behaved_peer.py", args);
    assert_eq!(result["ok"], true, "{} beside {beside}: {result}", args[0]);
    let seconds = result["seconds"].as_f64().unwrap();
    assert!(
        seconds < WELL_BEHAVED_WITHIN,
        "{} took {seconds:.2} s beside {beside}: {result}",
        args[0]
    );
}

/// An AMQP and a Kafka client each succeed beside `attack`.
fn both_well_behaved(port: u16, kafka: u16, attack: &str) {
    let cs = format!(
        "Endpoint=sb://localhost:{port};SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey={KEY};UseDevelopmentEmulator=true;"
    );
    well_behaved(&["amqp", &cs, "sensors"], attack);
    well_behaved(
        &["kafka", &format!("127.0.0.1:{kafka}"), &cs, "sensors"],
        attack,
    );
}

/// `count` sockets to `port`, each having sent `bytes` and then nothing.
fn stalled_sockets(port: u16, count: usize, bytes: &[u8]) -> Vec<TcpStream> {
    (0..count)
        .filter_map(|_| {
            let mut socket = TcpStream::connect(("127.0.0.1", port)).ok()?;
            let _ = socket.write_all(bytes);
            Some(socket)
        })
        .collect()
}

fn alive(child: &mut Child) -> bool {
    matches!(child.try_wait(), Ok(None))
}

#[test]
fn unauthenticated_kafka_sockets_lock_no_one_out_and_hold_no_memory() {
    kit::require!(Tool::PythonSdk, Tool::KafkaClients);
    raise_own_descriptor_limit();
    let kafka = kit::free_port();
    // The defaults that matter here: --max-connections 1000, --open-timeout 30.
    let mut hub = Hub::start_serving(
        kit::free_port(),
        None,
        &["sensors:4"],
        &["--kafka-port", &kafka.to_string()],
    );
    kit::wait_for_port(kafka, "the Kafka endpoint");
    both_well_behaved(hub.port, kafka, "nothing (warming up)");
    let idle = kit::resident_kib(hub.child.id()).unwrap();

    // 1,000 sockets, each a request of 100 bytes declared and half its header sent: every slot.
    let stalled = stalled_sockets(kafka, 1000, &[0, 0, 0, 100, 0, 3, 0, 0]);
    assert_eq!(stalled.len(), 1000);
    std::thread::sleep(Duration::from_secs(1));
    both_well_behaved(hub.port, kafka, "1,000 stalled Kafka sockets");
    assert!(alive(&mut hub.child));

    // 100 sockets each declaring 4 MiB and sending them: refused from the size.
    let mut body = vec![0u8; 4 * 1024 * 1024 + 4];
    body[..4].copy_from_slice(&(4 * 1024 * 1024_i32).to_be_bytes());
    body[4..8].copy_from_slice(&[0, 3, 0, 0]);
    let started = Instant::now();
    let large = stalled_sockets(kafka, 100, &body);
    eprintln!(
        "100 × 4 MiB sent (or refused) in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    both_well_behaved(hub.port, kafka, "100 sockets sending 4 MiB requests");
    let after = kit::resident_kib(hub.child.id()).unwrap();
    assert!(
        after < idle + MEMORY_BOUND_KIB,
        "the hub went from {idle} KiB to {after} KiB"
    );
    drop((stalled, large));
    assert!(alive(&mut hub.child));
}

#[test]
fn a_hub_out_of_file_descriptors_keeps_serving() {
    kit::require!(Tool::PythonSdk, Tool::KafkaClients, Tool::SystemTools);
    raise_own_descriptor_limit();
    let (port, kafka) = (kit::free_port(), kit::free_port());
    let log = tempfile::NamedTempFile::new().unwrap();
    // A low limit, as a shared machine or a container may set; the hub cannot raise it.
    let mut hub = kit::KilledOnDrop(
        Command::new("prlimit")
            .arg("--nofile=256:256")
            .arg("--")
            .arg(kit::binary("hubhost"))
            .args(["hub", "--in-memory", "--hub", "sensors:2"])
            .args([
                "--port",
                &port.to_string(),
                "--kafka-port",
                &kafka.to_string(),
            ])
            .stdout(Stdio::null())
            .stderr(log.reopen().unwrap())
            .spawn()
            .unwrap(),
    );
    kit::wait_for_port(port, "the hub");
    kit::wait_for_port(kafka, "the Kafka endpoint");

    // More stalled sockets than the hub has descriptors.
    let stalled = stalled_sockets(kafka, 400, &[0, 0, 0, 100, 0, 3]);
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        alive(&mut hub),
        "the hub exited when it ran out of descriptors"
    );
    both_well_behaved(port, kafka, "a hub out of descriptors");
    drop(stalled);
    assert!(alive(&mut hub));
    hub.stop();
    let log = std::fs::read_to_string(log.path()).unwrap();
    assert!(
        log.contains("out of file descriptors") || log.contains("accepting a connection failed"),
        "the hub says what happened:\n{log}"
    );
}

/// One HTTP/1.0 request to the admin endpoint with `headers` (a `Host` among them, or
/// `localhost`'s): its status and body.
fn admin_request(port: u16, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
    admin_call(port, "GET", path, headers, "")
}

/// One HTTP/1.0 `method` request with `headers` and a `body` (JSON, when not empty): its
/// status and body.
fn admin_call(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    use std::io::Read;
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut request = format!("{method} {path} HTTP/1.0\r\n");
    if !headers
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case("host"))
    {
        request.push_str("Host: localhost\r\n");
    }
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    if !body.is_empty() {
        request.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).unwrap();
    let response = String::from_utf8_lossy(&response).into_owned();
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map_or(String::new(), |(_, b)| b.to_string());
    (status, body)
}

/// The hub's highest resident size while `readers` reads of `path` run at once (each must
/// answer 200).
fn peak_during_reads(
    hub: &Hub,
    admin: u16,
    bearer: &str,
    path: &'static str,
    readers: usize,
) -> u64 {
    let readers: Vec<_> = (0..readers)
        .map(|_| {
            let bearer = bearer.to_string();
            std::thread::spawn(move || admin_request(admin, path, &[("Authorization", &bearer)]).0)
        })
        .collect();
    let mut peak = 0;
    while !readers.iter().all(|r| r.is_finished()) {
        peak = peak.max(kit::resident_kib(hub.child.id()).unwrap_or(0));
        std::thread::sleep(Duration::from_millis(20));
    }
    for reader in readers {
        assert_eq!(reader.join().unwrap(), 200);
    }
    peak
}

/// A hub with its data in a temporary folder (where it writes its admin token) and its admin
/// endpoint on a free port.
fn hub_with_admin_endpoint() -> (Hub, tempfile::TempDir, u16) {
    let data = tempfile::tempdir().unwrap();
    let admin = kit::free_port();
    let hub = Hub::start_serving(
        kit::free_port(),
        Some(data.path()),
        &["sensors:2"],
        &["--admin-port", &admin.to_string()],
    );
    kit::wait_for_port(admin, "the admin endpoint");
    (hub, data, admin)
}

#[test]
fn the_admin_endpoint_answers_only_its_user() {
    kit::require!(Tool::PythonSdk);
    let (hub, data, admin) = hub_with_admin_endpoint();
    let token_file = data.path().join(".hubhost/admin-token");
    let token = std::fs::read_to_string(&token_file).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&token_file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "the token is its owner's only");
    }
    let bearer = format!("Bearer {}", token.trim());

    let (status, body) = admin_request(admin, "/hubs", &[("Authorization", &bearer)]);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("sensors"), "{body}");

    type Headers<'a> = Vec<(&'a str, &'a str)>;
    let refused: [(&str, Headers, u16); 4] = [
        ("no token", vec![], 401),
        ("a wrong token", vec![("Authorization", "Bearer 0000")], 401),
        (
            "a foreign Host (a rebound DNS name)",
            vec![("Authorization", &bearer), ("Host", "evil.example:5380")],
            403,
        ),
        (
            "a foreign Origin (another site's page)",
            vec![
                ("Authorization", &bearer),
                ("Origin", "http://evil.example"),
            ],
            403,
        ),
    ];
    for (what, headers, expected) in refused {
        let (status, body) = admin_request(admin, "/hubs", &headers);
        assert_eq!(status, expected, "{what}: {body}");
        let error: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert!(error["error"]["message"].is_string(), "{what}: {body}");
        assert!(
            !body.contains(token.trim()),
            "{what}: the token is not echoed"
        );
    }

    // 100 sockets that send half a request and stall take no slot from the user, and each is
    // closed once its header is late.
    let stalled = stalled_sockets(admin, 100, b"GET /hubs HTTP/1.1\r\nHost: localhost\r\n");
    assert_eq!(stalled.len(), 100);
    std::thread::sleep(Duration::from_millis(500));
    let started = Instant::now();
    let (status, body) = admin_request(admin, "/hubs", &[("Authorization", &bearer)]);
    assert_eq!(status, 200, "beside 100 stalled sockets: {body}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "the user waited {:?} beside 100 stalled sockets",
        started.elapsed()
    );
    let mut newest = stalled.into_iter().last().unwrap();
    newest
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let started = Instant::now();
    let mut answer = Vec::new();
    let read = std::io::Read::read_to_end(&mut newest, &mut answer);
    let timed_out = matches!(&read, Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut));
    assert!(
        !timed_out && started.elapsed() < Duration::from_secs(15),
        "a stalled socket was still open after {:?}: {read:?}",
        started.elapsed()
    );
    drop(hub);
}

/// 40 large events (sent by the Python SDK's `send_op`: 1 MB bodies, or 900 KB properties) read
/// through the admin endpoint: one read returns at most `most` of them and under 3 MiB, and
/// `readers` reads at once keep the hub within the memory bound. The hub, for more checks.
fn large_events_are_read_within_bounds(
    send_op: &str,
    size: &str,
    most: usize,
    readers: usize,
) -> Hub {
    let (hub, data, admin) = hub_with_admin_endpoint();
    let token = std::fs::read_to_string(data.path().join(".hubhost/admin-token")).unwrap();
    let bearer = format!("Bearer {}", token.trim());
    let sent = hub.python(send_op, &["0", "40", size]);
    assert_eq!(sent["sent"], 40, "{sent}");
    let idle = kit::resident_kib(hub.child.id()).unwrap();

    // One read of 100 events: at most 1 MiB of events, the rest left for the next read.
    let path = "/hubs/sensors/partitions/0/events?from=earliest&count=100";
    let (status, body) = admin_request(admin, path, &[("Authorization", &bearer)]);
    assert_eq!(status, 200, "{}", &body[..body.len().min(300)]);
    let events: serde_json::Value = serde_json::from_str(&body).unwrap();
    let returned = events.as_array().unwrap().len();
    assert!(
        (1..=most).contains(&returned),
        "{returned} events of {size} bytes ({send_op}) in one read"
    );
    assert!(body.len() < 3 * 1024 * 1024, "{} bytes", body.len());

    // Such reads at once: four at a time, the memory they take bounded.
    let peak = peak_during_reads(&hub, admin, &bearer, path, readers).max(idle);
    eprintln!("{readers} concurrent reads ({send_op}): {idle} KiB idle, {peak} KiB at most");
    assert!(
        peak < idle + MEMORY_BOUND_KIB,
        "concurrent reads took the hub from {idle} KiB to {peak} KiB"
    );
    hub
}

#[test]
fn reading_large_events_through_the_admin_endpoint_is_bounded() {
    kit::require!(Tool::PythonSdk);
    large_events_are_read_within_bounds("send-large", "1000000", 4, 16);
}

/// One of tests/python/rights_peer.py's operations: whether the client did it, and its error.
fn rights_peer(args: &[&str]) -> (bool, String) {
    let result = kit::python_json("rights_peer.py", args);
    (
        result["ok"] == true,
        result["error"].as_str().unwrap_or("").to_string(),
    )
}

#[test]
fn a_key_does_what_its_rights_allow_on_every_protocol() {
    kit::require!(Tool::PythonSdk, Tool::KafkaClients);
    let kafka = kit::free_port();
    let hub = Hub::start_serving(
        kit::free_port(),
        None,
        &["sensors:2", "alarms:1"],
        &[
            "--kafka-port",
            &kafka.to_string(),
            "--key",
            &format!("RootManageSharedAccessKey={KEY}"),
            "--key",
            "SendOnly=c2VuZC1vbmx5:Send",
            "--key",
            "ListenOnly=bGlzdGVuLW9ubHk=:Listen",
        ],
    );
    kit::wait_for_port(kafka, "the Kafka endpoint");
    let bootstrap = format!("127.0.0.1:{kafka}");
    let cs = |name: &str, key: &str| {
        format!(
            "Endpoint=sb://localhost:{};SharedAccessKeyName={name};SharedAccessKey={key};UseDevelopmentEmulator=true;",
            hub.port
        )
    };
    let root = hub.connection_string(KEY);
    let send_only = cs("SendOnly", "c2VuZC1vbmx5");
    let listen_only = cs("ListenOnly", "bGlzdGVuLW9ubHk=");

    // AMQP: sending needs Send, receiving Listen; the default key has both.
    for (what, args, allowed) in [
        ("root sends", ["amqp-send", &root, "sensors"], true),
        ("SendOnly sends", ["amqp-send", &send_only, "sensors"], true),
        (
            "ListenOnly sends",
            ["amqp-send", &listen_only, "sensors"],
            false,
        ),
        ("root receives", ["amqp-receive", &root, "sensors"], true),
        (
            "ListenOnly receives",
            ["amqp-receive", &listen_only, "sensors"],
            true,
        ),
        (
            "SendOnly receives",
            ["amqp-receive", &send_only, "sensors"],
            false,
        ),
    ] {
        let (ok, error) = rights_peer(&args);
        assert_eq!(ok, allowed, "{what}: {error}");
    }

    // Kafka: producing needs Send; consuming, a group and its offsets Listen.
    for (what, args, allowed) in [
        (
            "SendOnly produces",
            vec!["kafka-produce", &bootstrap, &send_only, "alarms"],
            true,
        ),
        (
            "ListenOnly produces",
            vec!["kafka-produce", &bootstrap, &listen_only, "alarms"],
            false,
        ),
        (
            "SendOnly consumes",
            vec!["kafka-consume", &bootstrap, &send_only, "sensors", "g1"],
            false,
        ),
        (
            "ListenOnly consumes",
            vec![
                "kafka-consume",
                &bootstrap,
                &listen_only,
                "sensors",
                "readers",
            ],
            true,
        ),
    ] {
        let (ok, error) = rights_peer(&args);
        assert_eq!(ok, allowed, "{what}: {error}");
    }

    // A group is tied to the hubs it consumes: a client scoped to `alarms` cannot join the
    // group that consumes (and committed for) `sensors`, though it may use a group of its own.
    let alarms_only = format!("{root}EntityPath=alarms");
    let (ok, error) = rights_peer(&[
        "kafka-consume",
        &bootstrap,
        &alarms_only,
        "alarms",
        "readers",
    ]);
    assert!(
        !ok,
        "a client scoped to alarms joined the sensors readers' group"
    );
    assert!(error.to_uppercase().contains("AUTHORIZ"), "{error}");
    let (ok, error) = rights_peer(&[
        "kafka-consume",
        &bootstrap,
        &alarms_only,
        "alarms",
        "alarm-readers",
    ]);
    assert!(
        ok,
        "a client scoped to alarms, in a group of its own: {error}"
    );
}

/// A consumer's JoinGroup (v3: no member id required) for `group`, subscribed to `sensors`.
fn join_request(group: &str, member_id: &str) -> kafka_protocol::messages::JoinGroupRequest {
    join_request_for(group, member_id, "sensors")
}

/// A consumer's JoinGroup (v3) for `group`, subscribed to `topic`.
fn join_request_for(
    group: &str,
    member_id: &str,
    topic: &str,
) -> kafka_protocol::messages::JoinGroupRequest {
    use kafka_protocol::messages::*;
    use kafka_protocol::protocol::{Encodable, StrBytes};
    let mut subscription = bytes::BytesMut::new();
    bytes::BufMut::put_i16(&mut subscription, 0);
    ConsumerProtocolSubscription::default()
        .with_topics(vec![StrBytes::from(topic.to_string())])
        .encode(&mut subscription, 0)
        .unwrap();
    JoinGroupRequest::default()
        .with_group_id(GroupId(StrBytes::from(group.to_string())))
        .with_session_timeout_ms(6_000)
        .with_rebalance_timeout_ms(6_000)
        .with_member_id(StrBytes::from(member_id.to_string()))
        .with_protocol_type(StrBytes::from_static_str("consumer"))
        .with_protocols(vec![
            join_group_request::JoinGroupRequestProtocol::default()
                .with_name(StrBytes::from_static_str("range"))
                .with_metadata(subscription.freeze()),
        ])
}

/// A simple consumer's OffsetCommit (v2: no member, no generation) of partition 0 of `sensors`.
fn commit_request(group: &str, metadata: &str) -> kafka_protocol::messages::OffsetCommitRequest {
    use kafka_protocol::messages::*;
    use kafka_protocol::protocol::StrBytes;
    OffsetCommitRequest::default()
        .with_group_id(GroupId(StrBytes::from(group.to_string())))
        .with_generation_id_or_member_epoch(-1)
        .with_retention_time_ms(-1)
        .with_topics(vec![
            offset_commit_request::OffsetCommitRequestTopic::default()
                .with_name(TopicName(StrBytes::from_static_str("sensors")))
                .with_partitions(vec![
                    offset_commit_request::OffsetCommitRequestPartition::default()
                        .with_partition_index(0)
                        .with_committed_offset(1)
                        .with_committed_metadata(Some(StrBytes::from(metadata.to_string()))),
                ]),
        ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_group_state_a_client_can_make_the_hub_hold_is_bounded() {
    use kafka_protocol::error::ResponseError;
    let data = tempfile::tempdir().unwrap();
    let kafka = kit::free_port();
    let hub = Hub::start_serving(
        kit::free_port(),
        Some(data.path()),
        &["sensors:4"],
        &["--kafka-port", &kafka.to_string()],
    );
    kit::wait_for_port(kafka, "the Kafka endpoint");
    let address: std::net::SocketAddr = ([127, 0, 0, 1], kafka).into();
    let mut client = kit::KafkaConnection::open(address, &hub.connection_string(KEY))
        .await
        .unwrap();
    let pid = hub.child.id();
    let idle = kit::resident_kib(pid).unwrap();

    // 3,000 groups, each joined by one member: the hub holds 1,000 at once.
    let mut codes = std::collections::BTreeMap::<i16, usize>::new();
    for i in 0..3_000 {
        let response = client
            .call(&join_request(&format!("group-{i}"), ""), 3)
            .await
            .unwrap();
        *codes.entry(response.error_code).or_default() += 1;
    }
    assert_eq!(
        codes,
        [(0, 1_000), (ResponseError::InvalidGroupId.code(), 2_000)].into(),
        "joins by outcome"
    );

    // Member ids of 1 MiB (JoinGroup v6, whose strings may be that long) are refused, and
    // nothing of them is kept.
    let long_id = "m".repeat(1024 * 1024);
    for i in 0..50 {
        let response = client
            .call(&join_request(&format!("group-{i}"), &long_id), 6)
            .await
            .unwrap();
        assert_eq!(response.error_code, ResponseError::InvalidRequest.code());
    }

    // Commit metadata is bounded as Kafka bounds it, and so are the groups with offsets.
    let response = client
        .call(&commit_request("committer-0", &"x".repeat(5_000)), 2)
        .await
        .unwrap();
    assert_eq!(
        response.topics[0].partitions[0].error_code,
        ResponseError::OffsetMetadataTooLarge.code()
    );
    let mut refused = 0;
    for i in 0..1_100 {
        let response = client
            .call(&commit_request(&format!("committer-{i}"), "m"), 2)
            .await
            .unwrap();
        if response.topics[0].partitions[0].error_code == ResponseError::PolicyViolation.code() {
            refused += 1;
        }
    }
    assert_eq!(refused, 100, "commits for groups past the 1,000th");
    let files = std::fs::read_dir(data.path().join(".hubhost/kafka-offsets"))
        .unwrap()
        .count();
    assert_eq!(files, 1_000);

    let after = kit::resident_kib(pid).unwrap();
    eprintln!("Kafka group attacks: {idle} KiB idle, {after} KiB after");
    assert!(
        after < idle + MEMORY_BOUND_KIB,
        "the hub went from {idle} KiB to {after} KiB"
    );

    // The members go silent: past their session timeout the groups are forgotten, and new
    // groups may be made again.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let response = client
        .call(&join_request("a-new-group", ""), 3)
        .await
        .unwrap();
    assert_eq!(response.error_code, 0, "a join once the old groups expired");
}

// The second probe (2026-12-01): each defect it reproduced, as a test.

/// A runtime for the async parts of a test whose peers are blocking processes.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A connection string for `key_name` with `key` (base64) to the hub on `port`.
fn key_connection_string(port: u16, key_name: &str, key: &str) -> String {
    format!(
        "Endpoint=sb://localhost:{port};SharedAccessKeyName={key_name};SharedAccessKey={key};UseDevelopmentEmulator=true;"
    )
}

/// One record of `value` at `sequence` from producer `producer` (epoch 0).
fn record_of(producer: i64, sequence: i32, value: Vec<u8>) -> kafka_protocol::records::Record {
    kit::kafka::record(producer, sequence, value.into())
}

/// A Produce request of `records` (encoded batches) to a partition of `topic`.
fn produce_request(
    topic: &str,
    partition: i32,
    records: bytes::Bytes,
) -> kafka_protocol::messages::ProduceRequest {
    kit::kafka::produce_request(topic, partition, records)
}

/// The error code of the only partition of a produce response.
fn produce_code(response: &kafka_protocol::messages::ProduceResponse) -> i16 {
    response.responses[0].partition_responses[0].error_code
}

/// The next offset of a partition of `topic` (ListOffsets, latest).
async fn end_offset(client: &mut kit::KafkaConnection, topic: &str, partition: i32) -> i64 {
    use kafka_protocol::messages::*;
    use kafka_protocol::protocol::StrBytes;
    let request = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![
            list_offsets_request::ListOffsetsTopic::default()
                .with_name(TopicName(StrBytes::from(topic.to_string())))
                .with_partitions(vec![
                    list_offsets_request::ListOffsetsPartition::default()
                        .with_partition_index(partition)
                        .with_timestamp(-1),
                ]),
        ]);
    let response = client.call(&request, 1).await.unwrap();
    let found = &response.topics[0].partitions[0];
    assert_eq!(found.error_code, 0, "{response:?}");
    found.offset
}

/// A producer id from InitProducerId.
async fn new_producer_id(client: &mut kit::KafkaConnection) -> i64 {
    let request = kafka_protocol::messages::InitProducerIdRequest::default()
        .with_transactional_id(None)
        .with_transaction_timeout_ms(60_000);
    let response = client.call(&request, 1).await.unwrap();
    assert_eq!(response.error_code, 0, "{response:?}");
    assert!(response.producer_id.0 >= 0, "{response:?}");
    response.producer_id.0
}

/// One record as producer `producer` at sequence 0 to partition 0 of `topic`: the error code.
async fn produce_one(
    client: &mut kit::KafkaConnection,
    producer: i64,
    topic: &str,
    value: &[u8],
) -> i16 {
    let batch = kit::record_batch(&[record_of(producer, 0, value.to_vec())]).unwrap();
    let response = client
        .call(&produce_request(topic, 0, batch), 7)
        .await
        .unwrap();
    produce_code(&response)
}

/// The next offset of partition 0 of `orders`, read on a new connection with `cs`.
async fn orders_end(address: std::net::SocketAddr, cs: &str) -> i64 {
    let mut reader = kit::KafkaConnection::open(address, cs).await.unwrap();
    end_offset(&mut reader, "orders", 0).await
}

/// An idempotent librdkafka producer's `count` records to `topic`: the offsets acknowledged.
fn idempotent_produce(bootstrap: &str, cs: &str, topic: &str, count: usize, tag: &str) -> Vec<i64> {
    let out = kit::python_json(
        "kafka_peer.py",
        &[
            "produce",
            bootstrap,
            cs,
            "confluent",
            topic,
            &count.to_string(),
            tag,
            "none",
        ],
    );
    let placed = out["placed"].as_array().unwrap_or_else(|| panic!("{out}"));
    assert_eq!(placed.len(), count, "{out}");
    let mut offsets: Vec<i64> = placed
        .iter()
        .map(|p| p["offset"].as_i64().unwrap())
        .collect();
    offsets.sort();
    offsets
}

/// Asserts the hub's memory is within [`MEMORY_BOUND_KIB`] of `idle`, after `what`.
fn within_memory_bound(hub: &Hub, idle: u64, what: &str) {
    let now = kit::resident_kib(hub.child.id()).unwrap();
    eprintln!("{what}: {idle} KiB idle, {now} KiB now");
    assert!(
        now < idle + MEMORY_BOUND_KIB,
        "{what} took the hub from {idle} KiB to {now} KiB"
    );
}

#[test]
fn spoofed_producer_ids_make_the_hub_drop_no_acknowledged_record() {
    kit::require!(Tool::PythonSdk, Tool::KafkaClients);
    let data = tempfile::tempdir().unwrap();
    let (port, kafka) = (kit::free_port(), kit::free_port());
    let start = || {
        Hub::start_serving(
            port,
            Some(data.path()),
            &["sensors:4", "orders:1"],
            &[
                "--kafka-port",
                &kafka.to_string(),
                "--key",
                &format!("RootManageSharedAccessKey={KEY}"),
                "--key",
                "SendOnly=c2VuZC1vbmx5:Send",
            ],
        )
    };
    let mut hub = start();
    kit::wait_for_port(kafka, "the Kafka endpoint");
    both_well_behaved(port, kafka, "nothing (warming up)");
    let idle = kit::resident_kib(hub.child.id()).unwrap();
    let address: std::net::SocketAddr = ([127, 0, 0, 1], kafka).into();
    let bootstrap = format!("127.0.0.1:{kafka}");
    let root = key_connection_string(port, "RootManageSharedAccessKey", KEY);
    let send_only = key_connection_string(port, "SendOnly", "c2VuZC1vbmx5");
    let rt = runtime();

    // A Send-only client takes an id, then writes one record at sequence 0 as each of the next
    // five ids: where ids come from a counter, those are the next producers' ids.
    let before = rt.block_on(async {
        let mut attacker = kit::KafkaConnection::open(address, &send_only)
            .await
            .unwrap();
        let own = new_producer_id(&mut attacker).await;
        for id in own + 1..=own + 5 {
            assert_eq!(produce_one(&mut attacker, id, "orders", b"spoof").await, 0);
        }
        orders_end(address, &root).await
    });
    assert_eq!(before, 5);
    // An ordinary idempotent producer's three records: acknowledged, and stored.
    let offsets = idempotent_produce(&bootstrap, &root, "orders", 3, "victim");
    assert_eq!(offsets, [5, 6, 7], "the records got offsets of their own");
    let after = rt.block_on(orders_end(address, &root));
    assert_eq!(after, 8, "every acknowledged record is stored");

    // A burst of ids, each writing a batch at sequence 0, then a kill -9 and a restart: the
    // restarted hub hands out no id whose batches its journal holds.
    let burst = 10_000;
    rt.block_on(async {
        let mut attacker = kit::KafkaConnection::open(address, &send_only)
            .await
            .unwrap();
        for _ in 0..burst {
            let id = new_producer_id(&mut attacker).await;
            assert_eq!(produce_one(&mut attacker, id, "orders", b"burst").await, 0);
        }
    });
    hub.kill_9();
    let hub = start();
    kit::wait_for_port(kafka, "the restarted Kafka endpoint");
    let end = 8 + burst;
    let offsets = idempotent_produce(&bootstrap, &root, "orders", 3, "after-restart");
    assert_eq!(offsets, [end, end + 1, end + 2]);
    let after = rt.block_on(orders_end(address, &root));
    assert_eq!(after, end + 3, "every acknowledged record is stored");
    both_well_behaved(port, kafka, "spoofed producer ids");
    // The restarted hub's memory, against the first one's idle figure.
    within_memory_bound(&hub, idle, "spoofed producer ids and a burst");
}

#[test]
fn a_request_of_a_hundred_compressed_batches_is_refused_before_it_is_decompressed() {
    kit::require!(Tool::PythonSdk, Tool::KafkaClients);
    let (port, kafka) = (kit::free_port(), kit::free_port());
    let hub = Hub::start_serving(
        port,
        None,
        &["sensors:4"],
        &["--kafka-port", &kafka.to_string()],
    );
    kit::wait_for_port(kafka, "the Kafka endpoint");
    both_well_behaved(port, kafka, "nothing (warming up)");
    let idle = kit::resident_kib(hub.child.id()).unwrap();
    let address: std::net::SocketAddr = ([127, 0, 0, 1], kafka).into();
    let rt = runtime();
    // A hundred batches, each a few KiB of gzip that decompress to just under 4 MiB: each
    // alone within what one batch may be, together 400 MiB.
    let one =
        kit::gzip_record_batch(&[record_of(-1, -1, vec![0; 4 * 1024 * 1024 - 4096])]).unwrap();
    let mut request = bytes::BytesMut::new();
    for _ in 0..100 {
        request.extend_from_slice(&one);
    }
    let request = request.freeze();
    eprintln!("a request of 100 gzip batches: {} bytes", request.len());
    let codes = rt.block_on(async {
        let mut client = kit::KafkaConnection::open(address, &hub.connection_string(KEY))
            .await
            .unwrap();
        let mut codes = Vec::new();
        for _ in 0..4 {
            let response = client
                .call(&produce_request("sensors", 0, request.clone()), 7)
                .await
                .unwrap();
            codes.push(produce_code(&response));
        }
        codes
    });
    let too_large = kafka_protocol::error::ResponseError::MessageTooLarge.code();
    assert_eq!(codes, [too_large; 4]);
    within_memory_bound(&hub, idle, "four decompression bombs");
    both_well_behaved(port, kafka, "decompression bombs");
}

/// A raw WebSocket upgrade to the hub's AMQP path on `port`; the socket once it is upgraded.
fn upgraded_websocket(port: u16) -> Option<TcpStream> {
    use std::io::Read;
    let mut socket = TcpStream::connect(("127.0.0.1", port)).ok()?;
    socket.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    socket
        .set_write_timeout(Some(Duration::from_secs(5)))
        .ok()?;
    socket
        .write_all(
            b"GET /$servicebus/websocket HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: AMQPWSB10\r\n\r\n",
        )
        .ok()?;
    let mut response = Vec::new();
    let mut byte = [0u8];
    while !response.ends_with(b"\r\n\r\n") {
        socket.read_exact(&mut byte).ok()?;
        response.push(byte[0]);
    }
    response.starts_with(b"HTTP/1.1 101").then_some(socket)
}

#[test]
fn unauthenticated_connections_share_one_memory_budget() {
    kit::require!(Tool::PythonSdk, Tool::KafkaClients);
    raise_own_descriptor_limit();
    let (port, kafka, websocket) = (kit::free_port(), kit::free_port(), kit::free_port());
    let hub = Hub::start_serving(
        port,
        None,
        &["sensors:4"],
        &[
            "--kafka-port",
            &kafka.to_string(),
            "--websocket-port",
            &websocket.to_string(),
        ],
    );
    kit::wait_for_port(kafka, "the Kafka endpoint");
    kit::wait_for_port(websocket, "the WebSocket endpoint");
    both_well_behaved(port, kafka, "nothing (warming up)");
    let idle = kit::resident_kib(hub.child.id()).unwrap();

    // 300 WebSockets, each upgraded and holding an unfinished message of about 260 KB (its
    // frame declares 260,000 bytes; 259,000 follow).
    let mut header = vec![0x82, 0xff];
    header.extend_from_slice(&260_000_u64.to_be_bytes());
    header.extend_from_slice(&[0, 0, 0, 0]);
    let payload = vec![0u8; 259_000];
    let messages: Vec<TcpStream> = (0..300)
        .filter_map(|_| {
            let mut socket = upgraded_websocket(websocket)?;
            let _ = socket
                .write_all(&header)
                .and_then(|()| socket.write_all(&payload));
            Some(socket)
        })
        .collect();
    assert!(messages.len() > 250, "{} upgraded", messages.len());
    std::thread::sleep(Duration::from_secs(1));
    within_memory_bound(&hub, idle, "300 unfinished WebSocket messages");
    both_well_behaved(port, kafka, "300 unfinished WebSocket messages");
    drop(messages);
    // What they held is given back once the hub's workers are idle.
    std::thread::sleep(Duration::from_secs(3));
    within_memory_bound(&hub, idle, "the WebSockets closed");

    // 300 AMQP connections, each holding an unfinished SASL frame of 262,144 bytes.
    let mut frame = b"AMQP\x03\x01\x00\x00".to_vec();
    frame.extend_from_slice(&262_144_u32.to_be_bytes());
    frame.extend_from_slice(&[2, 1, 0, 0]);
    frame.extend_from_slice(&vec![0x40; 261_000]);
    let frames: Vec<TcpStream> = (0..300)
        .filter_map(|_| {
            let mut socket = TcpStream::connect(("127.0.0.1", port)).ok()?;
            socket
                .set_write_timeout(Some(Duration::from_secs(5)))
                .ok()?;
            let _ = socket.write_all(&frame);
            Some(socket)
        })
        .collect();
    std::thread::sleep(Duration::from_secs(1));
    within_memory_bound(&hub, idle, "300 unfinished AMQP frames");
    both_well_behaved(port, kafka, "300 unfinished AMQP frames");
    drop(frames);
    std::thread::sleep(Duration::from_secs(3));
    let closed = kit::resident_kib(hub.child.id()).unwrap();
    eprintln!("the AMQP connections closed: {idle} KiB idle, {closed} KiB now");
    assert!(
        closed < idle + MEMORY_BOUND_KIB / 4,
        "the hub kept {} KiB of closed connections",
        closed.saturating_sub(idle)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_scoped_to_one_hub_cannot_lead_another_hub_s_group() {
    use kafka_protocol::error::ResponseError;
    kit::require!(Tool::PythonSdk, Tool::KafkaClients);
    let (port, kafka) = (kit::free_port(), kit::free_port());
    let hub = Hub::start_serving(
        port,
        None,
        &["sensors:4", "alarms:1"],
        &["--kafka-port", &kafka.to_string()],
    );
    kit::wait_for_port(kafka, "the Kafka endpoint");
    let address: std::net::SocketAddr = ([127, 0, 0, 1], kafka).into();
    let root = hub.connection_string(KEY);
    let idle = kit::resident_kib(hub.child.id()).unwrap();

    // A client whose connection string names alarms opens the group first, and leads it.
    let mut attacker = kit::KafkaConnection::open(address, &format!("{root}EntityPath=alarms"))
        .await
        .unwrap();
    let joined = attacker
        .call(&join_request_for("sensor-readers", "", "alarms"), 3)
        .await
        .unwrap();
    assert_eq!(joined.error_code, 0);
    assert_eq!(
        joined.leader, joined.member_id,
        "the attacker leads its group"
    );

    // The sensors consumer is refused at once: it is never a member the attacker assigns.
    let mut victim = kit::KafkaConnection::open(address, &root).await.unwrap();
    let refused = tokio::time::timeout(
        Duration::from_secs(2),
        victim.call(&join_request_for("sensor-readers", "", "sensors"), 3),
    )
    .await
    .expect("answered within 2 s, not parked for the attacker's rebalance")
    .unwrap();
    assert_eq!(
        refused.error_code,
        ResponseError::GroupAuthorizationFailed.code()
    );
    // As a real consumer sees it.
    let bootstrap = format!("127.0.0.1:{kafka}");
    let (ok, error) = tokio::task::spawn_blocking(move || {
        rights_peer(&[
            "kafka-consume",
            &bootstrap,
            &root,
            "sensors",
            "sensor-readers",
        ])
    })
    .await
    .unwrap();
    assert!(
        !ok,
        "a sensors consumer joined the group the alarms client leads"
    );
    assert!(error.to_uppercase().contains("AUTHORIZ"), "{error}");
    let port = hub.port;
    tokio::task::spawn_blocking(move || both_well_behaved(port, kafka, "a scoped group leader"))
        .await
        .unwrap();
    within_memory_bound(&hub, idle, "a scoped group leader");
}

/// A simple consumer's commit for `group`: its error code.
async fn commit(client: &mut kit::KafkaConnection, group: &str) -> i16 {
    let response = client.call(&commit_request(group, "m"), 2).await.unwrap();
    response.topics[0].partitions[0].error_code
}

#[test]
fn throwaway_groups_fill_only_their_own_client_s_caps_and_their_offsets_expire() {
    use kafka_protocol::error::ResponseError;
    kit::require!(Tool::PythonSdk, Tool::KafkaClients);
    let data = tempfile::tempdir().unwrap();
    let (port, kafka) = (kit::free_port(), kit::free_port());
    // Offsets of groups without members kept 6 s (Kafka's default is 7 days).
    let hub = Hub::start_serving(
        port,
        Some(data.path()),
        &["sensors:4"],
        &[
            "--kafka-port",
            &kafka.to_string(),
            "--key",
            &format!("RootManageSharedAccessKey={KEY}"),
            "--key",
            "ListenOnly=bGlzdGVuLW9ubHk=:Listen",
            "--kafka-offsets-retention-minutes",
            "0.1",
        ],
    );
    kit::wait_for_port(kafka, "the Kafka endpoint");
    both_well_behaved(port, kafka, "nothing (warming up)");
    let idle = kit::resident_kib(hub.child.id()).unwrap();
    let address: std::net::SocketAddr = ([127, 0, 0, 1], kafka).into();
    let listen_only = key_connection_string(port, "ListenOnly", "bGlzdGVuLW9ubHk=");
    let root = key_connection_string(port, "RootManageSharedAccessKey", KEY);
    runtime().block_on(async {
        let mut thrower = kit::KafkaConnection::open(address, &listen_only)
            .await
            .unwrap();
        // 1,000 groups with offsets, then the client's own cap.
        for i in 0..1_000 {
            assert_eq!(
                commit(&mut thrower, &format!("throwaway-{i}")).await,
                0,
                "throwaway-{i}"
            );
        }
        assert_eq!(
            commit(&mut thrower, "one-more").await,
            ResponseError::PolicyViolation.code()
        );
        // 1,000 live groups, each with a member, then the client's own cap.
        for i in 0..1_000 {
            let response = thrower
                .call(&join_request(&format!("held-{i}"), ""), 3)
                .await
                .unwrap();
            assert_eq!(response.error_code, 0, "held-{i}");
        }
        let response = thrower
            .call(&join_request("held-one-more", ""), 3)
            .await
            .unwrap();
        assert_eq!(response.error_code, ResponseError::InvalidGroupId.code());

        // Another client is served: a new group's commit and a new group's join.
        let mut legitimate = kit::KafkaConnection::open(address, &root).await.unwrap();
        assert_eq!(
            commit(&mut legitimate, "readers").await,
            0,
            "a new group's commit after 1,000 throwaway"
        );
        let response = legitimate
            .call(&join_request("live-readers", ""), 3)
            .await
            .unwrap();
        assert_eq!(
            response.error_code, 0,
            "a new group's join after 1,000 held"
        );

        // Past the retention, the throwaway groups' offsets are gone, files and all, and the
        // client may commit for new groups again.
        let files = || {
            std::fs::read_dir(data.path().join(".hubhost/kafka-offsets"))
                .unwrap()
                .count()
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while files() > 0 {
            assert!(
                Instant::now() < deadline,
                "{} offsets files 30 s after a retention of 6 s",
                files()
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        assert_eq!(
            commit(&mut thrower, "after-retention").await,
            0,
            "a commit once the old groups expired"
        );
    });
    both_well_behaved(port, kafka, "throwaway groups");
    within_memory_bound(&hub, idle, "throwaway groups");
}

#[test]
fn admin_reads_count_events_whole_properties_and_all() {
    kit::require!(Tool::PythonSdk);
    let hub = large_events_are_read_within_bounds("send-large-properties", "900000", 2, 8);
    well_behaved(
        &["amqp", &hub.connection_string(KEY), "sensors"],
        "admin reads",
    );
}

/// Asks the admin endpoint, with the token, for a hub of one partition named `name`: the
/// status and body.
fn add_hub(port: u16, bearer: &str, name: &str) -> (u16, String) {
    let body = format!(r#"{{"name": "{name}", "partitions": 1}}"#);
    admin_call(port, "POST", "/hubs", &[("Authorization", bearer)], &body)
}

#[test]
fn a_hub_name_too_long_for_a_file_is_refused_with_400() {
    kit::require!(Tool::PythonSdk);
    let (hub, data, admin) = hub_with_admin_endpoint();
    let token = std::fs::read_to_string(data.path().join(".hubhost/admin-token")).unwrap();
    let bearer = format!("Bearer {}", token.trim());
    let too_long = "x".repeat(256);
    let (status, body) = add_hub(admin, &bearer, &too_long);
    assert_eq!(status, 400, "{body}");
    let error: serde_json::Value = serde_json::from_str(&body).unwrap();
    let message = error["error"]["message"].as_str().unwrap();
    assert!(message.contains("255"), "{message}");
    // The longest name the hub can keep is kept.
    let longest = "y".repeat(255);
    let (status, body) = add_hub(admin, &bearer, &longest);
    assert_eq!(status, 201, "{body}");
    assert!(data.path().join(&longest).is_dir());
    well_behaved(
        &["amqp", &hub.connection_string(KEY), "sensors"],
        "a long name",
    );

    // At start, the same refusal, as a usage error.
    let out = Command::new(kit::binary("hubhost"))
        .args([
            "hub",
            "--in-memory",
            "--port",
            &kit::free_port().to_string(),
        ])
        .args(["--hub", &format!("{too_long}:1")])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("cannot name an event hub"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kafka_session_ends_with_its_token_unless_the_client_re_authenticates() {
    use kafka_protocol::messages::*;
    use kafka_protocol::protocol::StrBytes;
    let kafka = kit::free_port();
    let hub = Hub::start_serving(
        kit::free_port(),
        None,
        &["sensors:1"],
        &["--kafka-port", &kafka.to_string()],
    );
    kit::wait_for_port(kafka, "the Kafka endpoint");
    let address: std::net::SocketAddr = ([127, 0, 0, 1], kafka).into();
    let key = hubhost_hub::sas::SharedAccessKey::emulator();
    let now = chrono::Utc::now().timestamp();
    let token_string = |expires_at: i64| {
        let token = hubhost_hub::sas::sign(
            &format!("sb://localhost:{}/sensors", hub.port),
            &key,
            expires_at,
        );
        format!(
            "Endpoint=sb://localhost:{};SharedAccessSignature={token}",
            hub.port
        )
    };
    let produce = || {
        let batch = kit::record_batch(&[record_of(-1, -1, b"during".to_vec())]).unwrap();
        produce_request("sensors", 0, batch)
    };

    // A session on a token that expires in 3 s: served until then, closed after.
    let mut expiring = kit::KafkaConnection::open(address, &token_string(now + 3))
        .await
        .unwrap();
    // A second one that re-authenticates with a new token before its first expires.
    let mut renewing = kit::KafkaConnection::open(address, &token_string(now + 3))
        .await
        .unwrap();
    assert_eq!(
        produce_code(&expiring.call(&produce(), 7).await.unwrap()),
        0
    );
    let handshake = renewing
        .call(
            &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN")),
            1,
        )
        .await
        .unwrap();
    assert_eq!(handshake.error_code, 0);
    let renewed = renewing
        .call(
            &SaslAuthenticateRequest::default().with_auth_bytes(bytes::Bytes::from(format!(
                "\0$ConnectionString\0{}",
                token_string(now + 3600)
            ))),
            2,
        )
        .await
        .unwrap();
    assert_eq!(renewed.error_code, 0);
    assert!(
        renewed.session_lifetime_ms > 3_000_000,
        "the client is told its new lifetime: {renewed:?}"
    );

    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        expiring.call(&produce(), 7).await.is_err(),
        "a session past its token's expiry is closed"
    );
    assert_eq!(
        produce_code(&renewing.call(&produce(), 7).await.unwrap()),
        0,
        "a re-authenticated session goes on"
    );
}
