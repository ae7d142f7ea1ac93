//! The web page residents and operators watch, served by the custom handler: under the
//! Functions host as the HTTP-triggered function `Dashboard` (route `dashboard/{*path}`, the
//! request forwarded as it came), and by `hubhost demo` at `/`.
//!
//! Four views, each a JSON document the page polls (`views.rs` and `explorer.rs` compute them,
//! purely):
//! - `fleet.json` — events and homes per minute, alarms by type, homes with active alarms;
//! - `home.json?id=…` — one home's last hour: the home directory names its partition, that
//!   partition's window blocks hold its minutes, sensors and alarms;
//! - `operations.json` — each partition's owner, checkpoint, last enqueued sequence number,
//!   lag and rate, and the pool's instances;
//! - `explorer.json` — every hub with its partitions and consumer groups (owners, lag), with
//!   `explorer/events.json` to peek at a partition's events and `explorer/send` to send one
//!   (`explorer.rs`).
//!
//! Beside the views, `alarms` streams each alarm to the page the moment the alarms hub has it
//! (server-sent events, `live.rs`).
//!
//! It reads only what the app wrote (window blocks, the home directory), the checkpoint store
//! and the hub's partition properties. The fleet view keeps a summary of each window block by
//! ETag, so a poll re-reads only the blocks that changed; it lists the two newest windows on
//! every poll and two older ones, each older window about every 30 s (a listing is billed like
//! a write). Its memory and a poll's work stay flat as the hour of history fills: blocks too old
//! for an active alarm keep only counts, windows that stopped changing keep only their count of
//! homes, and windows both quiet and too old for an active alarm one summary for all their
//! blocks, with a digest of their listing to notice a change. The home view caches the blocks
//! of the partition it shows. The page's assets are compiled in (no CDN) and it puts every
//! value into the document as text, never as markup.

pub mod explorer;
pub mod live;
pub mod traces;
pub mod views;

pub use traces::TraceSources;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration as StdDuration;

use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Duration, Utc};
use serde_json::json;

use crate::aggregate::{WindowAggregate, window_start};
use crate::directory;
use crate::layout;
use hubhost_checkpoints::{CheckpointStore, ConsumerGroupKey};
use hubhost_eventhubs::EventHubTarget;
use hubhost_storage::{ETag, SharedStore, StoreError};
use views::{OperationsSample, OperationsView};

/// Where the page's route lives: the Functions host's `api` prefix and the function's route.
pub const BASE: &str = "/api/dashboard";
const INDEX_HTML: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const STYLE_CSS: &str = include_str!("assets/style.css");
/// Hub partition properties are read at most this often, however many pages poll.
const PARTITION_ENDS_EVERY: StdDuration = StdDuration::from_secs(1);
/// The admin endpoint of a `hubhost hub` on the official emulator's port.
pub const DEFAULT_HUB_ADMIN: &str = "http://127.0.0.1:5380";
/// The longest home id the app accepts (see `app::sensor`).
const MAX_HOME_ID: usize = 64;
/// How long the home view trusts the partition the directory gave for a home.
const HOME_PARTITION_KEPT: StdDuration = StdDuration::from_secs(60);
/// Homes whose partition the page remembers (then it forgets them all and asks again).
const HOME_PARTITIONS_KEPT_AT_MOST: usize = 10_000;

/// What the page reads besides the app's blobs.
#[derive(Clone)]
pub struct DashboardSources {
    /// The event hub shown (window blocks are named by it, lowercased).
    pub hub: String,
    pub consumer_group: String,
    /// The processor's ownership and checkpoints, and the namespace their names start with.
    pub checkpoints: Option<(CheckpointStore, ConsumerGroupKey)>,
    /// The hub, for its partitions' last enqueued sequence numbers.
    pub event_hub: Option<EventHubTarget>,
    /// After this long without renewal a foreign owner's ownership (one that vouched for no
    /// expiry: the Functions host, an SDK processor) no longer counts.
    pub foreign_ownership_expiry: StdDuration,
    /// Where the explorer reads (and may send).
    pub explorer: explorer::ExplorerSources,
    /// Where the trace view reads, when spans are at hand (the demo's own).
    pub traces: Option<TraceSources>,
    /// Where the alarms pushed to the page are read: the alarms hub.
    pub alarms: Option<live::AlarmSource>,
}

impl DashboardSources {
    pub fn new(hub: &str) -> Self {
        DashboardSources {
            hub: hub.to_string(),
            consumer_group: "$Default".into(),
            checkpoints: None,
            event_hub: None,
            foreign_ownership_expiry: hubhost_checkpoints::FOREIGN_OWNERSHIP_EXPIRY,
            traces: None,
            alarms: None,
            explorer: explorer::ExplorerSources {
                foreign_ownership_expiry: hubhost_checkpoints::FOREIGN_OWNERSHIP_EXPIRY,
                ..Default::default()
            },
        }
    }

    /// The explorer reads what the other views read, and a hubhost hub's admin endpoint:
    /// `hub_admin`, else the one a local hub on the official emulator's port has, with
    /// `hub_admin_token`, the token the endpoint requires.
    pub fn with_explorer(
        self,
        hub_admin: Option<String>,
        hub_admin_token: Option<String>,
        allow_send: bool,
    ) -> Self {
        self.with_explorer_on_any_host(hub_admin, hub_admin_token, allow_send, false)
    }

    /// [`with_explorer`](Self::with_explorer), for a page served beyond loopback on purpose
    /// (`any_host`: its sends may name any host, still only from the page itself).
    pub fn with_explorer_on_any_host(
        mut self,
        hub_admin: Option<String>,
        hub_admin_token: Option<String>,
        allow_send: bool,
        any_host: bool,
    ) -> Self {
        let local_default = self.event_hub.as_ref().and_then(|t| {
            (t.custom_endpoint.as_deref() == Some("amqp://127.0.0.1:5672"))
                .then(|| DEFAULT_HUB_ADMIN.to_string())
        });
        self.explorer = explorer::ExplorerSources {
            hub_admin: hub_admin.or(local_default),
            hub_admin_token,
            any_host,
            event_hub: self.event_hub.clone(),
            checkpoints: self.checkpoints.as_ref().map(|(store, _)| store.clone()),
            allow_send,
            foreign_ownership_expiry: self.foreign_ownership_expiry,
            triggered_hub: Some(self.hub.clone()),
        };
        self
    }

    /// From the app settings the Functions host passes (as `hubhost emulate` does too):
    /// `EventHubName` (default `sensors`), `EventHubConnection` for the hub (a connection string,
    /// or `EventHubConnection__fullyQualifiedNamespace` and an identity), and the host's
    /// checkpoint store in `AzureWebJobsStorage` (else `./hubhost-data`). A setting that is
    /// missing or wrong leaves that part of the operations view empty; the page still works.
    pub fn from_app_settings(env: impl Fn(&str) -> Option<String>) -> Self {
        let hub = env("EventHubName").unwrap_or_else(|| "sensors".into());
        let mut sources = DashboardSources::new(&hub);
        sources.event_hub = EventHubTarget::from_settings(
            hubhost_eventhubs::EVENTHUB_CONNECTION_SETTING,
            &hub,
            &env,
        )
        .ok();
        sources.alarms = live::AlarmSource::from_app_settings(sources.event_hub.as_ref(), &env);
        let namespace = hubhost_eventhubs::eventhub_namespace(&env);
        let storage = hubhost_storage::settings::resolve_storage(None, &env).ok();
        if let (Some(namespace), Some(storage)) = (namespace, storage)
            && let (Ok(blobs), Ok(key)) = (
                storage.open(),
                ConsumerGroupKey::new(namespace, &hub, &sources.consumer_group),
            )
        {
            let store = CheckpointStore::new(blobs, hubhost_checkpoints::DEFAULT_CONTAINER);
            sources.checkpoints = Some((store, key));
        }
        // Sending from the page is off here: under the Functions host the page is public. The
        // command that serves it turns it on for a loopback-only page (`with_explorer`).
        sources.with_explorer(
            env("HUBHOST_HUB_ADMIN"),
            env("HUBHOST_HUB_ADMIN_TOKEN"),
            false,
        )
    }
}

impl std::fmt::Debug for DashboardSources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DashboardSources")
            .field("hub", &self.hub)
            .field("consumer_group", &self.consumer_group)
            .field(
                "checkpoints",
                &self.checkpoints.as_ref().map(|(s, _)| s.describe()),
            )
            .field("event_hub", &self.event_hub)
            .finish()
    }
}

/// What the operations view remembers between polls: the partitions' last two readings (the
/// one shown, and the one before for the rates) and the recent backlog.
#[derive(Default)]
struct Previous {
    /// The partitions' reading before the last, for the rates.
    sample: Option<OperationsSample>,
    /// The partitions' last reading: when, the checkpoints, then the ends read *after* them,
    /// so that no checkpoint is ahead of the end it is shown beside (read the other way round,
    /// a busy partition's checkpoint moves past the end read a moment before, and the view
    /// shows an impossible state). Its `owners` are read at each poll instead.
    partitions: Option<OperationsSample>,
    /// The backlog and instance count of recent polls, for the chart.
    history: std::collections::VecDeque<views::OperationsPoint>,
}

/// Windows the fleet view lists on every poll: the current one, and the one before, which
/// readings sent in its last seconds still reach.
const FRESH_WINDOWS: usize = 2;
/// How often the fleet view lists an older window at most: only a late or replayed reading
/// changes it.
const OLD_WINDOWS_RELISTED_EVERY: Duration = Duration::seconds(30);
/// Older windows a poll lists at most: at a poll a second, each of an hour's windows is listed
/// again about every 30 s, and once the hour is known a poll lists four windows at most, however
/// long the history.
const OLD_WINDOWS_RELISTED_PER_POLL: usize = 2;
/// A window whose blocks brought no new version for this long keeps only its count of homes.
const HOMES_SETTLE_AFTER: Duration = Duration::minutes(2);

/// What the fleet view keeps between polls.
#[derive(Default)]
struct FleetCache {
    windows: BTreeMap<DateTime<Utc>, ListedWindow>,
    homes: views::HomesSeen,
}

/// What the fleet view keeps of one window.
struct ListedWindow {
    /// When the window was last listed.
    listed: DateTime<Utc>,
    /// A digest of that listing's block names and ETags ([`listing_digest`]).
    listing: u64,
    blocks: WindowBlocks,
}

/// A window's blocks as the fleet view keeps them.
///
/// Invariant: a window is `Merged` only while its homes are settled to a count, so a change to
/// a merged window has it read again whole, blocks and homes together.
enum WindowBlocks {
    /// Each block's summary, with the ETag it was made at, by block name: while the window's
    /// blocks change or one of its alarms can still be active.
    Each(HashMap<String, (ETag, Arc<views::BlockSummary>)>),
    /// One summary for all the window's blocks ([`views::BlockSummary::merged`]): an hour of
    /// history costs some 800 block names and ETags a window at the reference load, and only
    /// the last few windows need them.
    Merged(Arc<views::BlockSummary>),
}

/// A digest of a listing's block names and ETags: equal digests, unchanged blocks.
fn listing_digest(listed: &[hubhost_storage::BlobProperties]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut entries: Vec<(&str, &str)> = listed
        .iter()
        .map(|b| (b.name.as_str(), b.etag.as_str()))
        .collect();
    entries.sort_unstable();
    let mut hasher = std::hash::DefaultHasher::new();
    entries.hash(&mut hasher);
    hasher.finish()
}

/// Keeps what one listing of a window (whose [`listing_digest`] is `listing`) learnt: a summary
/// for each block listed, new ones from `summaries` and the others as they were.
fn keep_listing(
    cache: &mut FleetCache,
    start: DateTime<Utc>,
    now: DateTime<Utc>,
    (listed, listing): (&[hubhost_storage::BlobProperties], u64),
    summaries: Vec<(String, ETag, views::BlockSummary)>,
) {
    let mut kept = match cache.windows.remove(&start) {
        Some(ListedWindow {
            blocks: WindowBlocks::Each(blocks),
            ..
        }) => blocks,
        _ => HashMap::new(),
    };
    let mut new: HashMap<String, (ETag, views::BlockSummary)> = summaries
        .into_iter()
        .map(|(name, etag, summary)| (name, (etag, summary)))
        .collect();
    let mut blocks = HashMap::with_capacity(listed.len());
    for entry in listed {
        let block = match new.remove(&entry.name) {
            Some((etag, summary)) => Some((etag, Arc::new(summary))),
            None => kept.remove(&entry.name),
        };
        if let Some(block) = block {
            blocks.insert(entry.name.clone(), block);
        }
    }
    cache.windows.insert(
        start,
        ListedWindow {
            listed: now,
            listing,
            blocks: WindowBlocks::Each(blocks),
        },
    );
}

/// How many polls the operations chart shows (at one a second: five minutes).
const HISTORY_POINTS: usize = 300;

/// Reads for the page; shared by every request.
pub struct Dashboard {
    store: SharedStore,
    container: String,
    window_seconds: u32,
    sources: DashboardSources,
    /// Window blocks the home view read, by blob name, with the ETag they were read at.
    blocks: Mutex<HashMap<String, (ETag, Arc<WindowAggregate>)>>,
    /// Home → the partition the directory said, and when.
    home_partitions: Mutex<HashMap<String, (String, std::time::Instant)>>,
    fleet_cache: Mutex<FleetCache>,
    previous: tokio::sync::Mutex<Previous>,
    explorer: explorer::Explorer,
    /// The batches this handler's functions are failing now.
    retries: Option<Arc<crate::retrying::RetryBoard>>,
    /// The alarms pushed to open pages.
    live: Arc<live::LiveAlarms>,
}

#[derive(Debug, thiserror::Error)]
pub enum DashboardError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the checkpoint store: {0}")]
    Checkpoints(#[from] hubhost_checkpoints::CheckpointError),
}

impl Dashboard {
    pub fn new(
        store: SharedStore,
        container: &str,
        window_seconds: u32,
        sources: DashboardSources,
    ) -> Self {
        Dashboard {
            store,
            container: container.to_string(),
            window_seconds: window_seconds.max(1),
            explorer: explorer::Explorer::new(sources.explorer.clone()),
            live: live::LiveAlarms::new(sources.alarms.clone()),
            sources,
            blocks: Mutex::new(HashMap::new()),
            home_partitions: Mutex::new(HashMap::new()),
            fleet_cache: Mutex::new(FleetCache::default()),
            previous: tokio::sync::Mutex::new(Previous::default()),
            retries: None,
        }
    }

    /// The Operations view lists the batches on `board` as retrying.
    pub fn showing_retries(mut self, board: Arc<crate::retrying::RetryBoard>) -> Self {
        self.retries = Some(board);
        self
    }

    fn hub(&self) -> String {
        self.sources.hub.to_ascii_lowercase()
    }

    /// Every window block of the last hour (of one partition, when given), re-reading only
    /// those whose ETag changed.
    /// The partition `home` reports on: from the directory, then remembered for
    /// [`HOME_PARTITION_KEPT`] (a home page polls every second; a home changes partition only
    /// when its hub's partition count changes).
    async fn partition_of(&self, home: &str) -> Result<Option<String>, DashboardError> {
        let now = std::time::Instant::now();
        if let Some((partition, at)) = self
            .home_partitions
            .lock()
            .expect("home partitions")
            .get(home)
            && now.duration_since(*at) < HOME_PARTITION_KEPT
        {
            return Ok(Some(partition.clone()));
        }
        let found = directory::lookup(&self.store, &self.container, &self.hub(), home).await?;
        if let Some(partition) = &found {
            let mut kept = self.home_partitions.lock().expect("home partitions");
            if kept.len() >= HOME_PARTITIONS_KEPT_AT_MOST {
                kept.clear();
            }
            kept.insert(home.to_string(), (partition.clone(), now));
        }
        Ok(found)
    }

    async fn recent_blocks(
        &self,
        partition: &str,
        now: DateTime<Utc>,
    ) -> Result<Vec<Arc<WindowAggregate>>, DashboardError> {
        let hub = self.hub();
        let step = Duration::seconds(i64::from(self.window_seconds));
        let oldest = window_start(
            now - Duration::minutes(views::HISTORY_MINUTES),
            self.window_seconds,
        );
        let mut out = Vec::new();
        let mut start = window_start(now, self.window_seconds);
        while start >= oldest {
            let prefix = format!("{}p{partition}/", layout::window_prefix(&hub, start));
            for listed in self.store.list(&self.container, &prefix).await? {
                let cached = {
                    let blocks = self.blocks.lock().expect("block cache");
                    blocks
                        .get(&listed.name)
                        .filter(|(etag, _)| *etag == listed.etag)
                        .map(|(_, block)| block.clone())
                };
                let block = match cached {
                    Some(block) => block,
                    None => {
                        let Some(blob) = self.store.get(&self.container, &listed.name).await?
                        else {
                            continue;
                        };
                        // A block the app cannot have written is skipped, not shown half.
                        let Ok(block) = serde_json::from_slice::<WindowAggregate>(&blob.data)
                        else {
                            tracing::warn!(blob = %listed.name, "not a window block; skipped");
                            continue;
                        };
                        let block = Arc::new(block);
                        self.blocks
                            .lock()
                            .expect("block cache")
                            .insert(listed.name.clone(), (blob.properties.etag, block.clone()));
                        block
                    }
                };
                out.push(block);
            }
            start -= step;
        }
        self.blocks
            .lock()
            .expect("block cache")
            .retain(|_, (_, b)| b.window_start >= oldest);
        Ok(out)
    }

    /// The fleet view. It lists the two newest windows on every poll, a window never listed
    /// before at once, and two of the older ones per poll, those listed longest ago, when 30 s
    /// have passed since (`FRESH_WINDOWS`, `OLD_WINDOWS_RELISTED_PER_POLL`,
    /// `OLD_WINDOWS_RELISTED_EVERY`): a listing is billed like a write, and an hour has 60
    /// windows of some 800 blocks each, so a poll's work does not grow with the history kept. It
    /// reads only the blocks whose ETag changed, keeps each block's summary rather than the
    /// block, drops the alarms of blocks too old for any to be active, and keeps only the count
    /// of homes of windows that stopped changing.
    pub async fn fleet(&self, now: DateTime<Utc>) -> Result<views::FleetView, DashboardError> {
        let hub = self.hub();
        let step = Duration::seconds(i64::from(self.window_seconds));
        let oldest = window_start(
            now - Duration::minutes(views::HISTORY_MINUTES),
            self.window_seconds,
        );
        let newest = window_start(now, self.window_seconds);
        let mut due = Vec::new();
        let mut old_due = Vec::new();
        {
            let cache = self.fleet_cache.lock().expect("fleet cache");
            let mut start = newest;
            let mut fresh = 0;
            while start >= oldest {
                match cache.windows.get(&start) {
                    _ if fresh < FRESH_WINDOWS => due.push(start),
                    None => due.push(start),
                    Some(window) if now - window.listed >= OLD_WINDOWS_RELISTED_EVERY => {
                        old_due.push((window.listed, start))
                    }
                    Some(_) => {}
                }
                start -= step;
                fresh += 1;
            }
        }
        old_due.sort();
        due.extend(
            old_due
                .into_iter()
                .take(OLD_WINDOWS_RELISTED_PER_POLL)
                .map(|(_, start)| start),
        );
        for start in due {
            self.relist_window(&hub, start, now).await?;
        }
        let active_since = now - Duration::minutes(views::ACTIVE_ALARM_MINUTES);
        let mut guard = self.fleet_cache.lock().expect("fleet cache");
        let cache = &mut *guard;
        cache.windows = cache.windows.split_off(&oldest);
        cache.homes.retain_from(oldest);
        cache.homes.settle(now, HOMES_SETTLE_AFTER);
        for (start, window) in cache.windows.iter_mut() {
            let WindowBlocks::Each(blocks) = &mut window.blocks else {
                continue;
            };
            if *start + step > active_since {
                continue;
            }
            if cache.homes.is_settled(*start) {
                let merged =
                    views::BlockSummary::merged(*start, blocks.values().map(|(_, s)| &**s));
                window.blocks = WindowBlocks::Merged(Arc::new(merged));
            } else {
                for (_, summary) in blocks.values_mut() {
                    if !summary.alarms.is_empty() {
                        *summary = Arc::new(summary.without_alarm_details());
                    }
                }
            }
        }
        let summaries: Vec<Arc<views::BlockSummary>> = cache
            .windows
            .values()
            .flat_map(|window| match &window.blocks {
                WindowBlocks::Each(blocks) => blocks.values().map(|(_, s)| s.clone()).collect(),
                WindowBlocks::Merged(summary) => vec![summary.clone()],
            })
            .collect();
        Ok(views::fleet_view(
            &self.sources.hub,
            &summaries,
            &cache.homes,
            now,
        ))
    }

    /// Lists one window's blocks and summarises the ones new or changed since the last listing.
    /// If the window's homes were settled to a count and a block changed, all its blocks are
    /// read to count them again (rare: a partition catching up on old readings). What a listing
    /// learnt is kept in one step at the end, so that a poll that fails half-way, or another poll
    /// settling the window meanwhile, loses no home.
    async fn relist_window(
        &self,
        hub: &str,
        start: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<(), DashboardError> {
        let listed = self
            .store
            .list(&self.container, &layout::window_prefix(hub, start))
            .await?;
        let listing = listing_digest(&listed);
        // Which blocks to read: those new or changed since the last listing, or all of them
        // if the window is merged and its listing changed.
        let changed: Vec<bool> = {
            let mut cache = self.fleet_cache.lock().expect("fleet cache");
            match cache.windows.get_mut(&start) {
                Some(window) => match &window.blocks {
                    WindowBlocks::Merged(_) if window.listing == listing => {
                        window.listed = now;
                        return Ok(());
                    }
                    WindowBlocks::Merged(_) => vec![true; listed.len()],
                    WindowBlocks::Each(blocks) => listed
                        .iter()
                        .map(|entry| {
                            blocks
                                .get(&entry.name)
                                .is_none_or(|(etag, _)| *etag != entry.etag)
                        })
                        .collect(),
                },
                None => vec![true; listed.len()],
            }
        };
        let mut homes = std::collections::HashSet::new();
        let mut summaries = Vec::new();
        self.summarise_blocks(&listed, &changed, true, &mut homes, &mut summaries)
            .await?;
        {
            let mut cache = self.fleet_cache.lock().expect("fleet cache");
            if homes.is_empty() || cache.homes.add(start, homes.iter().copied(), now) {
                keep_listing(&mut cache, start, now, (&listed, listing), summaries);
                return Ok(());
            }
        }
        // Settled (and perhaps merged since): the blocks that did not change are read too, and
        // the window is kept whole, homes and summaries.
        self.summarise_blocks(&listed, &changed, false, &mut homes, &mut summaries)
            .await?;
        let mut cache = self.fleet_cache.lock().expect("fleet cache");
        cache.homes.replace(start, homes, now);
        keep_listing(&mut cache, start, now, (&listed, listing), summaries);
        Ok(())
    }

    /// Reads the listed blocks whose `changed` flag is `which`, adding their homes to `homes`
    /// and their summaries to `summaries`.
    async fn summarise_blocks(
        &self,
        listed: &[hubhost_storage::BlobProperties],
        changed: &[bool],
        which: bool,
        homes: &mut std::collections::HashSet<u64>,
        summaries: &mut Vec<(String, ETag, views::BlockSummary)>,
    ) -> Result<(), DashboardError> {
        for (entry, _) in listed.iter().zip(changed).filter(|(_, c)| **c == which) {
            if let Some((etag, block)) = self.read_block(&entry.name).await? {
                homes.extend(views::homes_of(&block));
                summaries.push((entry.name.clone(), etag, views::BlockSummary::of(&block)));
            }
        }
        Ok(())
    }

    /// A window block and its ETag; `None` if it is gone or not a block the app can have
    /// written (skipped, not shown half).
    async fn read_block(
        &self,
        name: &str,
    ) -> Result<Option<(ETag, WindowAggregate)>, DashboardError> {
        let Some(blob) = self.store.get(&self.container, name).await? else {
            return Ok(None);
        };
        match serde_json::from_slice::<WindowAggregate>(&blob.data) {
            Ok(block) => Ok(Some((blob.properties.etag, block))),
            Err(_) => {
                tracing::warn!(blob = %name, "not a window block; skipped");
                Ok(None)
            }
        }
    }

    pub async fn home(
        &self,
        home: &str,
        now: DateTime<Utc>,
    ) -> Result<views::HomeView, DashboardError> {
        let partition = self.partition_of(home).await?;
        let blocks = match &partition {
            Some(p) => self.recent_blocks(p, now).await?,
            None => Vec::new(),
        };
        Ok(views::home_view(home, partition.as_deref(), &blocks, now))
    }

    pub async fn operations(&self, now: DateTime<Utc>) -> Result<OperationsView, DashboardError> {
        let mut owners = BTreeMap::new();
        if let Some((store, key)) = &self.sources.checkpoints {
            for o in store.list_ownership(key).await? {
                let active = o.is_live(now, self.sources.foreign_ownership_expiry);
                owners.insert(o.partition_id, (o.owner_id, active));
            }
        }
        let mut previous = self.previous.lock().await;
        let fresh = previous
            .partitions
            .as_ref()
            .and_then(|r| r.at)
            .is_some_and(|at| {
                (now - at)
                    .to_std()
                    .is_ok_and(|age| age < PARTITION_ENDS_EVERY)
            });
        if !fresh {
            // The checkpoints first, then the ends: one moment, in an order that cannot show a
            // checkpoint past its partition's end.
            let mut reading = OperationsSample {
                at: Some(now),
                ..Default::default()
            };
            if let Some((store, key)) = &self.sources.checkpoints {
                for c in store.list_checkpoints(key).await?.items {
                    if let Some(seq) = c.sequence_number {
                        reading.checkpoints.insert(c.partition_id, seq);
                    }
                }
            }
            if let Some(target) = &self.sources.event_hub {
                match target.partition_ends().await {
                    Ok(ends) => {
                        reading.ends = ends
                            .into_iter()
                            .map(|e| (e.partition_id.clone(), e))
                            .collect();
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "the hub's partition properties could not be read")
                    }
                }
            }
            // The reading before is what the rates are measured against.
            previous.sample = previous.partitions.replace(reading);
        }
        let sample = OperationsSample {
            owners,
            ..previous
                .partitions
                .clone()
                .expect("read above unless a fresh one is kept")
        };
        let mut view = views::operations_view(
            &self.sources.hub,
            &self.sources.consumer_group,
            &sample,
            previous.sample.as_ref(),
        );
        previous.history.push_back(views::OperationsPoint {
            at: now,
            unprocessed_events: view.total_lag,
            instances: view.instances.len() as u32,
        });
        while previous.history.len() > HISTORY_POINTS {
            previous.history.pop_front();
        }
        view.history = previous.history.iter().cloned().collect();
        view.retrying = self
            .retries
            .as_ref()
            .map(|board| board.retrying())
            .unwrap_or_default();
        drop(previous);
        if let Some((store, key)) = &self.sources.checkpoints {
            view.scale = store.scale_history(key).await?;
        }
        Ok(view)
    }
}

/// The handler's routes for the page.
pub fn router<S: Clone + Send + Sync + 'static>(dashboard: Arc<Dashboard>) -> axum::Router<S> {
    use axum::routing::get;
    axum::Router::new()
        .route(BASE, get(index))
        .route(&format!("{BASE}/"), get(index))
        .route(&format!("{BASE}/app.js"), get(app_js))
        .route(&format!("{BASE}/style.css"), get(style_css))
        .route(&format!("{BASE}/fleet.json"), get(fleet))
        .route(&format!("{BASE}/home.json"), get(home))
        .route(&format!("{BASE}/operations.json"), get(operations))
        .route(&format!("{BASE}/explorer.json"), get(explorer_view))
        .route(&format!("{BASE}/traces.json"), get(traces_view))
        .route(&format!("{BASE}/alarms"), get(alarm_stream))
        .route(
            &format!("{BASE}/explorer/events.json"),
            get(explorer_events),
        )
        .route(
            &format!("{BASE}/explorer/send"),
            axum::routing::post(explorer_send),
        )
        .with_state(dashboard)
}

pub async fn index() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        INDEX_HTML,
    )
        .into_response()
}

async fn app_js() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        APP_JS,
    )
        .into_response()
}

async fn style_css() -> Response {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        STYLE_CSS,
    )
        .into_response()
}

fn answer<T: serde::Serialize>(result: Result<T, DashboardError>) -> Response {
    match result {
        Ok(view) => ([(header::CACHE_CONTROL, "no-store")], axum::Json(view)).into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "a dashboard view could not be read");
            problem(
                StatusCode::SERVICE_UNAVAILABLE,
                "storage_unavailable",
                &e.to_string(),
            )
        }
    }
}

fn problem(status: StatusCode, code: &str, message: &str) -> Response {
    (
        status,
        axum::Json(json!({"error": {"code": code, "message": message}})),
    )
        .into_response()
}

/// How long one page's stream lasts at most: then the browser opens another (`EventSource`
/// reconnects by itself), so a stream a proxy holds back is let go, and a page never holds a
/// connection for good.
const STREAM_LASTS_AT_MOST: StdDuration = StdDuration::from_secs(300);

/// `GET /api/dashboard/alarms`: server-sent events — `connected` at once, `live` once the
/// alarms hub is read, `alarm` for each alarm (the fleet view's row), `unavailable` while it
/// cannot be read, `missed` when this page fell behind. 404 without an Event Hubs connection,
/// 503 when [`live::MAX_STREAMS`] pages stream already: the page polls either way.
async fn alarm_stream(State(d): State<Arc<Dashboard>>) -> Response {
    use axum::response::sse::{Event, KeepAlive, Sse};
    let subscription = match d.live.subscribe() {
        Ok(subscription) => subscription,
        Err(e @ live::LiveError::NoSource) => {
            return problem(StatusCode::NOT_FOUND, "no_alarm_feed", &e.to_string());
        }
        Err(e @ live::LiveError::TooManyStreams) => {
            return problem(
                StatusCode::SERVICE_UNAVAILABLE,
                "too_many_streams",
                &e.to_string(),
            );
        }
    };
    let events = futures::stream::unfold(subscription, |mut subscription| async move {
        let event = match subscription.next().await? {
            live::Pushed::Connected => Event::default().event("connected").data("{}"),
            live::Pushed::Live => Event::default().event("live").data("{}"),
            live::Pushed::Alarm(row) => Event::default().event("alarm").data(&*row),
            live::Pushed::Unavailable(why) => Event::default()
                .event("unavailable")
                .data(json!({"message": &*why}).to_string()),
            live::Pushed::Missed(missed) => Event::default()
                .event("missed")
                .data(json!({"missed": missed}).to_string()),
        };
        Some((Ok::<_, std::convert::Infallible>(event), subscription))
    });
    let ends = tokio::time::sleep(STREAM_LASTS_AT_MOST);
    let events = futures::StreamExt::take_until(events, ends);
    (
        [(header::CACHE_CONTROL, "no-store")],
        Sse::new(events).keep_alive(KeepAlive::new().interval(StdDuration::from_secs(15))),
    )
        .into_response()
}

async fn fleet(State(d): State<Arc<Dashboard>>) -> Response {
    answer(d.fleet(Utc::now()).await)
}

async fn operations(State(d): State<Arc<Dashboard>>) -> Response {
    answer(d.operations(Utc::now()).await)
}

async fn home(
    State(d): State<Arc<Dashboard>>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let Some(id) = query.get("id").map(|s| s.trim()).filter(|s| !s.is_empty()) else {
        return problem(
            StatusCode::BAD_REQUEST,
            "missing_home_id",
            "give the home's id: home.json?id=home-000042",
        );
    };
    if id.chars().count() > MAX_HOME_ID || id.chars().any(char::is_control) {
        return problem(
            StatusCode::BAD_REQUEST,
            "bad_home_id",
            "a home id is 1-64 printable characters",
        );
    }
    answer(d.home(id, Utc::now()).await)
}

/// The explorer's failures as answers: what the page asked wrongly is a 4xx naming it.
fn explorer_answer<T: serde::Serialize>(result: Result<T, explorer::ExplorerError>) -> Response {
    use explorer::ExplorerError as E;
    match result {
        Ok(view) => ([(header::CACHE_CONTROL, "no-store")], axum::Json(view)).into_response(),
        Err(e) => {
            let (status, code) = match &e {
                E::BadRequest(_) => (StatusCode::BAD_REQUEST, "bad_request"),
                E::SendDisabled => (StatusCode::FORBIDDEN, "send_disabled"),
                E::Unavailable(_) => (StatusCode::NOT_IMPLEMENTED, "unavailable"),
                E::Hub(_) | E::Checkpoints(_) => {
                    tracing::warn!(error = %e, "the explorer could not read");
                    (StatusCode::SERVICE_UNAVAILABLE, "hub_unavailable")
                }
            };
            problem(status, code, &e.to_string())
        }
    }
}

async fn traces_view(State(d): State<Arc<Dashboard>>) -> Response {
    let Some(sources) = &d.sources.traces else {
        return problem(
            StatusCode::NOT_IMPLEMENTED,
            "unavailable",
            "traces are shown where this process's spans are at hand: run `hubhost demo`, or export them with the OTEL_* variables to a tracing backend",
        );
    };
    explorer_answer(traces::recent(sources, &d.explorer).await)
}

async fn explorer_view(State(d): State<Arc<Dashboard>>) -> Response {
    explorer_answer(d.explorer.view(Utc::now()).await)
}

async fn explorer_events(
    State(d): State<Arc<Dashboard>>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let (Some(hub), Some(partition)) = (query.get("hub"), query.get("partition")) else {
        return problem(
            StatusCode::BAD_REQUEST,
            "missing_parameter",
            "give hub and partition: explorer/events.json?hub=sensors&partition=0",
        );
    };
    let count = match query.get("count").map(|c| c.parse::<usize>()) {
        None => 20,
        Some(Ok(n)) if (1..=100).contains(&n) => n,
        Some(_) => {
            return problem(
                StatusCode::BAD_REQUEST,
                "bad_count",
                "count is a number from 1 to 100",
            );
        }
    };
    let from = query.get("from").map(String::as_str).unwrap_or("earliest");
    explorer_answer(d.explorer.events(hub, partition, from, count).await)
}

async fn explorer_send(
    State(d): State<Arc<Dashboard>>,
    headers: axum::http::HeaderMap,
    body: Result<axum::Json<explorer::SendRequest>, axum::extract::rejection::JsonRejection>,
) -> Response {
    if let Err(reason) = send_comes_from_the_page(&headers, d.explorer.sources().any_host) {
        tracing::warn!(%reason, "an explorer send was refused");
        return problem(StatusCode::FORBIDDEN, "not_from_the_page", &reason);
    }
    match body {
        Ok(axum::Json(request)) => explorer_answer(d.explorer.send(request).await),
        Err(rejection) => problem(
            StatusCode::BAD_REQUEST,
            "bad_send",
            &format!(
                "send takes JSON {{\"hub\", \"body\", \"partitionKey\"?, \"partitionId\"?, \"properties\"?}}: {}",
                rejection.body_text()
            ),
        ),
    }
}

/// Whether a send comes from the page itself: a browser's `Origin`, when it sends one, names
/// the host the request went to (no other site's page), and that host is a loopback name
/// unless the page is served beyond loopback on purpose (`--allow-send`), so that a site whose
/// name was rebound to 127.0.0.1 is refused too. Pure.
fn send_comes_from_the_page(headers: &axum::http::HeaderMap, any_host: bool) -> Result<(), String> {
    let text = |name| {
        headers
            .get(name)
            .and_then(|v: &axum::http::HeaderValue| v.to_str().ok())
    };
    let host = text(header::HOST).unwrap_or("");
    if let Some(origin) = text(header::ORIGIN) {
        let origin_host = origin.split_once("://").map_or("", |(_, rest)| rest);
        if !origin_host.eq_ignore_ascii_case(host) {
            return Err(format!(
                "a page from {origin} may not send through this one ({host})"
            ));
        }
    }
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split_once(']').map_or("", |(name, _)| name),
        None => host.split(':').next().unwrap_or(""),
    };
    let loopback = name.eq_ignore_ascii_case("localhost") || name == "127.0.0.1" || name == "::1";
    if !loopback && !any_host {
        return Err(format!(
            "the page sends when it is asked for on this machine's loopback (127.0.0.1, localhost), not as {host:?}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::HomeWindow;

    #[test]
    fn a_send_must_come_from_the_page_on_loopback() {
        let headers = |pairs: &[(header::HeaderName, &str)]| {
            let mut map = axum::http::HeaderMap::new();
            for (name, value) in pairs {
                map.insert(name.clone(), value.parse().unwrap());
            }
            map
        };
        let page = [
            (header::HOST, "127.0.0.1:7071"),
            (header::ORIGIN, "http://127.0.0.1:7071"),
        ];
        assert!(send_comes_from_the_page(&headers(&page), false).is_ok());
        assert!(send_comes_from_the_page(&headers(&page[..1]), false).is_ok());
        let elsewhere = [
            (header::HOST, "127.0.0.1:7071"),
            (header::ORIGIN, "http://evil.example"),
        ];
        assert!(send_comes_from_the_page(&headers(&elsewhere), false).is_err());
        let rebound = [
            (header::HOST, "evil.example:7071"),
            (header::ORIGIN, "http://evil.example:7071"),
        ];
        assert!(send_comes_from_the_page(&headers(&rebound), false).is_err());
        // Served beyond loopback on purpose: its own name is fine, another site still not.
        let named = [
            (header::HOST, "myhost:7071"),
            (header::ORIGIN, "http://myhost:7071"),
        ];
        assert!(send_comes_from_the_page(&headers(&named), true).is_ok());
        assert!(send_comes_from_the_page(&headers(&elsewhere), true).is_err());
    }
    use hubhost_storage::counting::CountingStore;
    use hubhost_storage::memory::MemoryStore;
    use hubhost_storage::{Condition, Metadata};

    async fn write_block(
        store: &SharedStore,
        start: DateTime<Utc>,
        partition: &str,
        homes: &[&str],
    ) {
        let mut block = WindowAggregate::new("sensors", partition, start, 60, "0");
        for home in homes {
            block.events += 1;
            block.homes.insert(home.to_string(), HomeWindow::default());
        }
        let name = layout::window_block_blob("sensors", start, partition, "0");
        let data = serde_json::to_vec(&block).unwrap();
        store
            .put(
                "app",
                &name,
                data.into(),
                &Metadata::new(),
                &Condition::Always,
            )
            .await
            .unwrap();
    }

    /// An empty in-memory store, the page on it (minute windows) and a moment to poll at.
    async fn dashboard_on_memory() -> (SharedStore, Dashboard, DateTime<Utc>) {
        let store: SharedStore = Arc::new(MemoryStore::default());
        store.ensure_container("app").await.unwrap();
        let dashboard = Dashboard::new(store.clone(), "app", 60, DashboardSources::new("sensors"));
        (store, dashboard, "2026-11-25T12:00:30Z".parse().unwrap())
    }

    /// Polls a second apart from `t` until `relisted` holds of the cache, which a window's
    /// listing every 30 s brings within 30 polls.
    async fn poll_until_relisted(
        dashboard: &Dashboard,
        t: &mut DateTime<Utc>,
        relisted: impl Fn(&FleetCache) -> bool,
    ) -> views::FleetView {
        for _ in 0..31 {
            *t += Duration::seconds(1);
            let view = dashboard.fleet(*t).await.unwrap();
            if relisted(&dashboard.fleet_cache.lock().unwrap()) {
                return view;
            }
        }
        panic!("the window is listed again within 30 polls");
    }

    fn lists(store: &CountingStore) -> u64 {
        store
            .counts
            .lists
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    #[tokio::test]
    async fn the_fleet_view_lists_the_newest_windows_each_poll_and_older_ones_every_30_s() {
        let memory: SharedStore = Arc::new(MemoryStore::default());
        memory.ensure_container("app").await.unwrap();
        let counting = Arc::new(CountingStore::new(memory.clone()));
        let dashboard = Dashboard::new(
            counting.clone(),
            "app",
            60,
            DashboardSources::new("sensors"),
        );
        let now: DateTime<Utc> = "2026-11-25T12:00:30Z".parse().unwrap();
        let minute = |ago: i64| window_start(now, 60) - Duration::minutes(ago);
        write_block(&memory, minute(0), "0", &["h1", "h2"]).await;
        write_block(&memory, minute(5), "1", &["h3"]).await;

        let first = dashboard.fleet(now).await.unwrap();
        // The first poll lists the hour: 61 windows (the current one and 60 before it).
        assert_eq!(lists(&counting), 61);
        assert_eq!(first.events_last_hour, 3);

        // A late reading lands in the old window; the new one gains a home.
        write_block(&memory, minute(5), "1", &["h3", "h4"]).await;
        write_block(&memory, minute(0), "0", &["h1", "h2", "h5"]).await;
        let soon = dashboard.fleet(now + Duration::seconds(10)).await.unwrap();
        assert_eq!(
            lists(&counting),
            61 + 2,
            "only the two newest windows are listed"
        );
        assert_eq!(
            soon.events_last_hour,
            3 + 1,
            "the old window is not read again yet"
        );
        assert_eq!(soon.homes_reporting, 3);

        // From 30 s on, each poll lists the two newest windows and two older ones, those
        // listed longest ago: the oldest windows first, the late reading's some polls later.
        let mut second = 31;
        let mut before = lists(&counting);
        let later = loop {
            let view = dashboard
                .fleet(now + Duration::seconds(second))
                .await
                .unwrap();
            assert_eq!(lists(&counting) - before, 2 + 2, "at +{second} s");
            before = lists(&counting);
            if view.events_last_hour == 5 {
                break view;
            }
            second += 1;
            assert!(
                second < 31 + 30,
                "the late reading is listed within 30 polls"
            );
        };
        // 54 older windows were listed before the one five minutes back, two per poll.
        assert_eq!(second, 31 + 27);
        let old = later.minutes.iter().find(|m| m.start == minute(5)).unwrap();
        assert_eq!(old.homes, 2);
    }

    /// A window quiet for two minutes keeps only its count of homes; a block of it that changes
    /// later has the window counted again from all its blocks.
    #[tokio::test]
    async fn a_settled_window_is_counted_again_when_a_block_changes() {
        let (store, dashboard, now) = dashboard_on_memory().await;
        let old = window_start(now, 60) - Duration::minutes(5);
        write_block(&store, old, "0", &["h1", "h2"]).await;
        write_block(&store, old, "1", &["h2", "h3"]).await;
        let homes_in = |view: &views::FleetView| {
            view.minutes
                .iter()
                .find(|m| m.start == old)
                .map(|m| m.homes)
        };
        assert_eq!(homes_in(&dashboard.fleet(now).await.unwrap()), Some(3));
        let mut t = now;
        for _ in 0..150 {
            t += Duration::seconds(1);
            dashboard.fleet(t).await.unwrap();
        }
        {
            let cache = dashboard.fleet_cache.lock().unwrap();
            assert!(cache.homes.is_settled(old));
            assert_eq!(
                cache.homes.open_windows(),
                0,
                "no window changed for two minutes"
            );
        }
        // Partition 1's block gains h1 (seen in partition 0's) and h4.
        write_block(&store, old, "1", &["h2", "h3", "h1", "h4"]).await;
        let view =
            poll_until_relisted(&dashboard, &mut t, |cache| !cache.homes.is_settled(old)).await;
        assert_eq!(homes_in(&view), Some(4), "h1 once, and h4");
    }

    /// A window whose homes settled and whose alarms are too old to be active keeps one
    /// summary for all its blocks; a block of it that changes later has it read again whole.
    #[tokio::test]
    async fn an_old_quiet_window_keeps_one_summary_and_is_read_again_when_it_changes() {
        let (store, dashboard, now) = dashboard_on_memory().await;
        let old = window_start(now, 60) - Duration::minutes(12);
        let recent = window_start(now, 60) - Duration::minutes(1);
        for (partition, homes) in [("0", &["h1", "h2"][..]), ("1", &["h2", "h3"][..])] {
            write_block(&store, old, partition, homes).await;
            write_block(&store, recent, partition, homes).await;
        }
        let minute_of = |view: &views::FleetView, start| {
            view.minutes
                .iter()
                .find(|m| m.start == start)
                .map(|m| (m.events, m.homes))
        };
        let first = dashboard.fleet(now).await.unwrap();
        assert_eq!(minute_of(&first, old), Some((4, 3)));
        let merged = |dashboard: &Dashboard, start| {
            matches!(
                dashboard.fleet_cache.lock().unwrap().windows[&start].blocks,
                WindowBlocks::Merged(_)
            )
        };
        assert!(!merged(&dashboard, old), "its homes are not settled yet");
        let mut t = now;
        for _ in 0..150 {
            t += Duration::seconds(1);
            dashboard.fleet(t).await.unwrap();
        }
        assert!(merged(&dashboard, old), "quiet, and its alarms too old");
        assert!(
            !merged(&dashboard, recent),
            "quiet, but an alarm of it may still be active"
        );
        let view = dashboard.fleet(t).await.unwrap();
        assert_eq!(minute_of(&view, old), Some((4, 3)), "the same counts");
        assert_eq!(minute_of(&view, recent), Some((4, 3)));

        // Partition 1's block gains h1 (seen in partition 0's) and h4.
        write_block(&store, old, "1", &["h2", "h3", "h1", "h4"]).await;
        let view = poll_until_relisted(&dashboard, &mut t, |cache| {
            !matches!(cache.windows[&old].blocks, WindowBlocks::Merged(_))
        })
        .await;
        assert_eq!(minute_of(&view, old), Some((6, 4)), "h1 once, and h4");
        let cache = dashboard.fleet_cache.lock().unwrap();
        let WindowBlocks::Each(blocks) = &cache.windows[&old].blocks else {
            unreachable!()
        };
        assert_eq!(blocks.len(), 2, "both blocks summarised again");
    }
}
