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
    use std::io::Read;
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut request = format!("GET {path} HTTP/1.0\r\n");
    if !headers
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case("host"))
    {
        request.push_str("Host: localhost\r\n");
    }
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
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

#[test]
fn reading_large_events_through_the_admin_endpoint_is_bounded() {
    kit::require!(Tool::PythonSdk);
    let (hub, data, admin) = hub_with_admin_endpoint();
    let token = std::fs::read_to_string(data.path().join(".hubhost/admin-token")).unwrap();
    let bearer = format!("Bearer {}", token.trim());
    let sent = hub.python("send-large", &["0", "40", "1000000"]);
    assert_eq!(sent["sent"], 40, "{sent}");
    let idle = kit::resident_kib(hub.child.id()).unwrap();

    // One read of 100 events: at most 4 MiB of bodies, the rest left for the next read.
    let path = "/hubs/sensors/partitions/0/events?from=earliest&count=100";
    let (status, body) = admin_request(admin, path, &[("Authorization", &bearer)]);
    assert_eq!(status, 200, "{}", &body[..body.len().min(300)]);
    let events: serde_json::Value = serde_json::from_str(&body).unwrap();
    let returned = events.as_array().unwrap().len();
    assert!(
        (1..=4).contains(&returned),
        "{returned} events of 1 MB in one read"
    );
    assert!(body.len() < 3 * 1024 * 1024, "{} bytes", body.len());

    // Sixteen such reads at once: four at a time, the memory they take bounded.
    let readers: Vec<_> = (0..16)
        .map(|_| {
            let bearer = bearer.clone();
            std::thread::spawn(move || admin_request(admin, path, &[("Authorization", &bearer)]).0)
        })
        .collect();
    let mut peak = idle;
    while !readers.iter().all(|r| r.is_finished()) {
        peak = peak.max(kit::resident_kib(hub.child.id()).unwrap_or(0));
        std::thread::sleep(Duration::from_millis(20));
    }
    for reader in readers {
        assert_eq!(reader.join().unwrap(), 200);
    }
    eprintln!("16 concurrent reads of 1 MB events: {idle} KiB idle, {peak} KiB at most");
    assert!(
        peak < idle + MEMORY_BOUND_KIB,
        "concurrent reads took the hub from {idle} KiB to {peak} KiB"
    );
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
    use kafka_protocol::messages::*;
    use kafka_protocol::protocol::{Encodable, StrBytes};
    let mut subscription = bytes::BytesMut::new();
    bytes::BufMut::put_i16(&mut subscription, 0);
    ConsumerProtocolSubscription::default()
        .with_topics(vec![StrBytes::from_static_str("sensors")])
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
