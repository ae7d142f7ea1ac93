//! The test kit: what hubhost's own tests, benchmarks and chaos rig use to run the real parts
//! on one machine, and what a team testing *its* functions can use the same way.
//!
//! - [`process`]: run a command within a time limit, free loopback ports (and turns at the fixed
//!   ones the docs name), wait for a port, find the hubhost executables;
//! - [`LocalApp`]: *your* function app as Azure runs it, from an integration test — the local
//!   hub and the emulated host inside the test, your handler executable as the custom handler;
//!   send events, wait until they are processed, read what the outputs wrote;
//! - [`InProcessHub`]: the local event hub served inside the test, on a free port;
//! - [`Rehearsal`]: your app under a seeded plan of the faults Azure brings (redelivery,
//!   partition moves, frozen owners, retries, outages), and an audit of what its outputs did
//!   with each event (these three live in `hubhost-rehearse`, which the command line shares);
//! - [`Hub`], [`Server`], [`Azurite`]: a `hubhost hub`, a `hubhost serve` handler and an Azurite
//!   blob service as child processes on free ports, killed on drop;
//! - [`pool`]: a pool of `hubhost emulate` instances on one function app folder, and what they
//!   say of themselves (metrics, ownership);
//! - [`tools`]: the tools a test may need beyond Rust (Azurite, the Python SDK, Chromium,
//!   cargo-zigbuild) and [`require!`], which skips a test, saying what it needs, where they are
//!   missing — or fails it under the full suite (`HUBHOST_REQUIRE_TOOLS=1`, set by
//!   `scripts/test.sh`);
//! - [`requests`]: a host request built as the Functions host builds it;
//! - [`OtlpReceiver`]: an OTLP receiver (HTTP and gRPC) printing what it received;
//! - [`stats`]: median and range of repeated measurements;
//! - [`memory_store`]: a blob store in memory, e.g. for `Once::for_instance` in a unit test.

pub mod azurite;
pub mod hub;
pub mod kafka;
pub mod otlp;
pub mod pool;
pub mod process;
pub mod python;
pub mod requests;
pub mod serve;
pub mod stats;
pub mod tools;

pub use azurite::Azurite;
pub use hub::{Hub, KEY};
/// Rehearsals: plans, the audit, the report.
pub use hubhost_rehearse as rehearse;
pub use hubhost_rehearse::{
    EventsFileError, FaultKind, InProcessHub, LocalApp, LocalAppError, Rehearsal, read_event_bodies,
};
pub use kafka::{KafkaCallError, KafkaConnection, gzip_record_batch, record_batch};
pub use otlp::OtlpReceiver;

pub use process::{
    COMMAND_LIMIT, FIXED_PORTS_TURN, FixedPorts, KilledOnDrop, binary, build_examples, copy_dir,
    free_port, hold_fixed_ports, http_get, http_get_bearer, http_request, hubhost, output_within,
    process_status_number, resident_kib, set_by_cargo_test, status_number, transparent_huge_pages,
    try_free_port, try_wait_within, wait_for_port, wait_within, without_test_run_env,
};
pub use python::{json_output, python_json, python_output};
pub use requests::{host_request, partition_context};
pub use serve::Server;
pub use tools::{
    KAFKA_JAVA_VERSIONS, Tool, azurite_bin, java_libraries, js_sdk_node_modules, node_modules,
    python,
};

/// A blob store in memory, empty: what a unit test gives `Once::for_instance` (two instances
/// sharing one store see each other's marks), or anything else that keeps blobs.
///
/// ```
/// let store = hubhost_testkit::memory_store();
/// # let _ = store;
/// ```
pub fn memory_store() -> hubhost_storage::SharedStore {
    std::sync::Arc::new(hubhost_storage::memory::MemoryStore::default())
}

/// The repository the test kit is built in: where `scripts/test.sh` installs the tools
/// (`.tools/`) and where the Python peers live (`tests/python/`).
pub fn repository() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}
