//! Benchmarks, each printing its figures beside a baseline measured in the same run (these
//! machines are shared and noisy, so ratios mean more than absolute numbers).
//!
//! - `handler`: the custom handler end to end over loopback HTTP; baseline: a plain JSON parse.
//! - `checkpoints`: claims and checkpoint updates per backend; baseline: a plain blob write;
//!   plus the storage operations one instance makes per minute.
//! - `hub`: the local event hub's ingest and read through the SDKs; baseline: raw segment
//!   appends.
//! - `chaos`: a pool of `hubhost emulate` processes under seeded random faults, checked from
//!   outside for lost, doubled or misfiled events, backward checkpoints and orphaned
//!   partitions.
//! - `cost`: the reference app's blob storage requests at the reference load, by who makes them
//!   and kind of blob, per 1M events and per month, priced per transaction class.
//! - `latency`: the reference load in real time — enqueued → applied to its window block, and an
//!   alarm (intrusions aside) → on the page, with 1 and 4 instances; baseline: the bare SDK consumer's
//!   enqueued → received.
//! - `startup`: a handler executable's size, cold start (exec → `GET /` answered) and idle
//!   memory; baseline: another executable, started alternately.
//! - `soak`: the reference load for a long time through a pool, per window: p99, each process's
//!   memory and open files, the hub's and the store's disk; baseline: the run's own first windows.
//! - `pool`: a pool of `hubhost emulate` processes — takeover, handoff, rebalancing, steady
//!   ownership, end-to-end throughput, store traffic; baseline: the bare SDK consumer.

pub mod chaos;
pub mod checkpoints;
pub mod cost;
pub mod cpu;
pub mod handler;
pub mod hub;
pub mod kafka;
pub mod latency;
pub mod load;
pub mod local_hub;
pub mod pool;
pub mod rehearse;
pub mod soak;
pub mod startup;

pub use checkpoints::checkpoint_bench_key;
pub use handler::{BenchError, BenchOptions, RunFigures, run};

/// The `hubhost` executable the benchmarks start as hubs, emulated hosts and handlers: the one
/// beside this program (a workspace build puts them together), else the one on PATH.
pub fn hubhost_exe() -> std::io::Result<std::path::PathBuf> {
    hubhost_testkit::process::find_binary("hubhost").ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "the hubhost executable is neither beside hubhost-bench nor on PATH: build both with `cargo build --release --workspace`",
        )
    })
}
