//! `hubhost bench checkpoints`: the checkpoint store's speed per backend, and its traffic.
//!
//! For each storage given (local directory, Azurite, memory…), three timed phases with one
//! task per partition, as instances do (each partition has one writer):
//! 1. claims/s — each task renews its partition's ownership with the ETag it holds;
//! 2. checkpoint updates/s — each task moves its partition's checkpoint forward;
//! 3. baseline — plain unconditional zero-byte blob writes with the same metadata.
//!
//! Then the storage operations one instance makes per minute while holding 4 of 16
//! partitions, counted by [`CountingStore`] over real store calls, beside the SDKs' figure for
//! the same work (one list, plus one write per owned partition, per load-balancing cycle).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;

use hubhost_checkpoints::{
    Checkpoint, CheckpointAdvance, CheckpointStore, ConsumerGroupKey, OwnershipClaim,
    PartitionOwnership,
};
use hubhost_storage::counting::CountingStore;
use hubhost_storage::{Condition, Metadata, SharedStore, StorageLocation};

const CONTAINER: &str = hubhost_checkpoints::DEFAULT_CONTAINER;

/// The consumer group the benchmark writes to (tests read it after killing a run).
pub fn checkpoint_bench_key() -> ConsumerGroupKey {
    ConsumerGroupKey::new("bench.servicebus.windows.net", "sensors", "$Default")
        .expect("valid names")
}

#[derive(Debug, Clone)]
pub struct CheckpointBenchOptions {
    /// Storages to measure: directories, connection strings, `memory:`.
    pub storages: Vec<String>,
    /// Duration of each timed phase.
    pub seconds: f64,
    pub partitions: u32,
}

#[derive(Debug, Clone)]
pub struct BackendFigures {
    pub backend: String,
    pub claims_per_s: f64,
    pub checkpoints_per_s: f64,
    pub raw_writes_per_s: f64,
    pub lost_claims: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum CheckpointBenchError {
    #[error("storage {0:?} is not usable: {1}")]
    Storage(String, String),
    #[error(transparent)]
    Checkpoint(#[from] hubhost_checkpoints::CheckpointError),
}

pub async fn run(
    opts: CheckpointBenchOptions,
) -> Result<Vec<BackendFigures>, CheckpointBenchError> {
    println!(
        "checkpoint store benchmark: {} partitions, one task per partition, {:.1} s per phase",
        opts.partitions, opts.seconds
    );
    println!(
        "{:<44} {:>10} {:>14} {:>12} | {:>7} {:>7}",
        "backend", "claims/s", "checkpoints/s", "raw puts/s", "claim", "ckpt"
    );
    let mut all = Vec::new();
    let mut first_store = None;
    for storage in &opts.storages {
        let location = StorageLocation::parse(storage)
            .map_err(|e| CheckpointBenchError::Storage(storage.clone(), e.to_string()))?;
        let blobs = location
            .open()
            .map_err(|e| CheckpointBenchError::Storage(storage.clone(), e.to_string()))?;
        let figures = measure_backend(blobs.clone(), &opts).await?;
        first_store.get_or_insert(blobs);
        println!(
            "{:<44} {:>10.0} {:>14.0} {:>12.0} | {:>7.2} {:>7.2}",
            truncate(&figures.backend, 44),
            figures.claims_per_s,
            figures.checkpoints_per_s,
            figures.raw_writes_per_s,
            figures.claims_per_s / figures.raw_writes_per_s,
            figures.checkpoints_per_s / figures.raw_writes_per_s,
        );
        all.push(figures);
    }
    println!(
        "claim, ckpt = throughput relative to raw puts on the same backend (1.00 = no overhead)"
    );
    if let Some(blobs) = first_store {
        operations_per_minute(blobs).await?;
    }
    Ok(all)
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        s.chars().take(n - 1).chain(['…']).collect()
    }
}

async fn measure_backend(
    blobs: SharedStore,
    opts: &CheckpointBenchOptions,
) -> Result<BackendFigures, CheckpointBenchError> {
    let store = CheckpointStore::new(blobs.clone(), CONTAINER);
    store.ensure_container().await?;
    let key = checkpoint_bench_key();
    let phase = Duration::from_secs_f64(opts.seconds);

    let owned = own_partitions(&store, &key, opts.partitions, |_| "bench".into()).await?;

    // 1. Claims: renewals with the ETag each task holds.
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for ownership in owned {
        let (store, key) = (store.clone(), key.clone());
        tasks.spawn(async move {
            let (mut done, mut lost) = (0u64, 0u64);
            let mut etag = ownership.etag;
            while started.elapsed() < phase {
                let claim = OwnershipClaim {
                    partition_id: ownership.partition_id.clone(),
                    owner_id: "bench".into(),
                    etag: Some(etag.clone()),
                    vouched_expiry: Some(
                        hubhost_processor::balancer::BalancerSettings::default().ownership_expiry,
                    ),
                };
                match store.claim_ownership(&key, &[claim]).await?.pop() {
                    Some(o) => {
                        etag = o.etag;
                        done += 1;
                    }
                    None => {
                        lost += 1;
                        break;
                    }
                }
            }
            Ok::<_, CheckpointBenchError>((done, lost))
        });
    }
    let (claims_done, lost_claims) = sum(&mut tasks).await?;
    let claims_per_s = claims_done as f64 / started.elapsed().as_secs_f64();

    // 2. Checkpoint updates, as a pump writes them: forward only, on the version it wrote last.
    let started = Instant::now();
    for p in 0..opts.partitions {
        let (store, key) = (store.clone(), key.clone());
        tasks.spawn(async move {
            let mut seq = 0i64;
            let mut known = None;
            while started.elapsed() < phase {
                seq += 1;
                let cp = Checkpoint::new(p.to_string(), Some((seq * 300).to_string()), seq);
                if let CheckpointAdvance::Written(etag) =
                    store.advance_checkpoint(&key, &cp, known.as_ref()).await?
                {
                    known = Some(etag);
                }
            }
            Ok((seq as u64, 0))
        });
    }
    let (checkpoints_done, _) = sum(&mut tasks).await?;
    let checkpoints_per_s = checkpoints_done as f64 / started.elapsed().as_secs_f64();

    // 3. Baseline: plain writes of the same zero-byte blob with the same metadata.
    let started = Instant::now();
    for p in 0..opts.partitions {
        let blobs = blobs.clone();
        tasks.spawn(async move {
            let name = format!("bench-baseline/raw/{p}");
            let mut n = 0u64;
            while started.elapsed() < phase {
                n += 1;
                let mut m = Metadata::new();
                m.insert("offset".into(), (n * 300).to_string());
                m.insert("sequencenumber".into(), n.to_string());
                blobs
                    .put(CONTAINER, &name, Bytes::new(), &m, &Condition::Always)
                    .await
                    .map_err(hubhost_checkpoints::CheckpointError::from)?;
            }
            Ok((n, 0))
        });
    }
    let (raw_done, _) = sum(&mut tasks).await?;
    let raw_writes_per_s = raw_done as f64 / started.elapsed().as_secs_f64();

    Ok(BackendFigures {
        backend: blobs.describe(),
        claims_per_s,
        checkpoints_per_s,
        raw_writes_per_s,
        lost_claims,
    })
}

/// Sets partitions `0..count` to the owners `owner_of` names, creating the records or taking
/// over whatever a previous run left (under the ETags just listed).
async fn own_partitions(
    store: &CheckpointStore,
    key: &ConsumerGroupKey,
    count: u32,
    owner_of: impl Fn(u32) -> String,
) -> Result<Vec<PartitionOwnership>, CheckpointBenchError> {
    let existing = store.list_ownership(key).await?;
    let claims: Vec<OwnershipClaim> = (0..count)
        .map(|p| OwnershipClaim {
            partition_id: p.to_string(),
            owner_id: owner_of(p),
            etag: existing
                .iter()
                .find(|o| o.partition_id == p.to_string())
                .map(|o| o.etag.clone()),
            vouched_expiry: None,
        })
        .collect();
    Ok(store.claim_ownership(key, &claims).await?)
}

async fn sum(
    tasks: &mut tokio::task::JoinSet<Result<(u64, u64), CheckpointBenchError>>,
) -> Result<(u64, u64), CheckpointBenchError> {
    let (mut a, mut b) = (0, 0);
    while let Some(r) = tasks.join_next().await {
        let (x, y) = r.expect("benchmark task panicked")?;
        a += x;
        b += y;
    }
    Ok((a, b))
}

/// One instance holding 4 of 16 partitions for one minute of load-balancing cycles (steady
/// state: nothing to claim, so each cycle lists and renews), at the Functions host's interval
/// (30 s), the Go/Python SDKs' (10 s) and hubhost's default (1.5 s, bought for fast takeover). Store calls are real; only the clock is skipped.
async fn operations_per_minute(blobs: SharedStore) -> Result<(), CheckpointBenchError> {
    let key = ConsumerGroupKey::new("bench.servicebus.windows.net", "sensors", "ops-per-minute")
        .expect("valid names");
    println!(
        "storage operations of one instance holding 4 of 16 partitions, per minute (steady state):"
    );
    let hubhost_default = hubhost_processor::balancer::BalancerSettings::default().update_interval;
    for interval_ms in [30_000u64, 10_000, hubhost_default.as_millis() as u64] {
        let counting = Arc::new(CountingStore::new(blobs.clone()));
        let counts = counting.counts.clone();
        let store = CheckpointStore::new(counting, CONTAINER);
        // Set-up (untimed, uncounted): 16 partitions, 4 of them ours.
        let setup = CheckpointStore::new(blobs.clone(), CONTAINER);
        own_partitions(&setup, &key, 16, |p| {
            if p < 4 {
                "me".into()
            } else {
                format!("other-{}", p % 3)
            }
        })
        .await?;
        let cycles = 60_000 / interval_ms;
        for _ in 0..cycles {
            let all = store.list_ownership(&key).await?;
            let renewals: Vec<_> = all
                .iter()
                .filter(|o| o.owner_id == "me")
                .map(|o| OwnershipClaim {
                    partition_id: o.partition_id.clone(),
                    owner_id: "me".into(),
                    etag: Some(o.etag.clone()),
                    vouched_expiry: o.vouched_expiry,
                })
                .collect();
            store.claim_ownership(&key, &renewals).await?;
        }
        let (lists, writes) = (
            counts.lists.load(Ordering::Relaxed),
            counts.writes.load(Ordering::Relaxed),
        );
        let sdk = cycles * (1 + 4);
        println!(
            "  interval {:>4.1} s: hubhost {} ops ({lists} lists + {writes} writes); SDKs' figure {sdk} ({cycles} × (1 list + 4 writes)); ratio {:.2}",
            interval_ms as f64 / 1000.0,
            counts.total(),
            counts.total() as f64 / sdk as f64
        );
    }
    println!(
        "  plus one write per checkpoint: with the host's batchCheckpointFrequency 1, one per batch per partition"
    );
    Ok(())
}
