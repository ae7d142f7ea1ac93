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
//! (tests/amqp_abuse.rs drives the AMQP side frame by frame.)

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
    let mut hub = Command::new("prlimit")
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
        .unwrap();
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
    let _ = hub.kill();
    let _ = hub.wait();
    let log = std::fs::read_to_string(log.path()).unwrap();
    assert!(
        log.contains("out of file descriptors") || log.contains("accepting a connection failed"),
        "the hub says what happened:\n{log}"
    );
}
