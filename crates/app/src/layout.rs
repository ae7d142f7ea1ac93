//! Where the reference app's blobs live. One place, so that the writers (the functions) and the
//! readers (the web page, the tests) agree.
//!
//! All in one container (default `hubhost`), names lowercased:
//! - `windows/{hub}/{yyyy-mm-dd}/{hhmmss}/p{partition}/{block}.json` — one [`WindowAggregate`]
//!   per partition, window and block of 1,000 sequence numbers (`unsequenced` for readings
//!   without one): a batch rewrites the one or two blocks its readings fall in, and a reader
//!   merges the blocks under `windows/{hub}/{date}/{hhmmss}/` (see `aggregate.rs` for why).
//! - `homes/{hub}/{bucket}/p{partition}.json` — the home directory: which partition a home's
//!   events arrive on, in 16 buckets by a hash of the home id, each split by partition, so only a
//!   partition's owner writes its part and instances never race on a bucket; written behind the
//!   batches (an index, rebuilt by a home's next report if lost). A page showing one home lists
//!   its bucket and reads the parts (one per partition), then that partition's blocks.
//! - `archive/{hub}/{consumergroup}/{yyyy-mm-dd}/{hhmmss}/p{partition}/{block}.json` — raw events
//!   by enqueued-time window, in blocks of 1,000 sequence numbers.
//! - `deadletter/{hub}/{consumergroup}/p{partition}/{sequence}.json` — poison events with their
//!   reason, one blob per event (idempotent by name).
//!
//! [`WindowAggregate`]: super::aggregate::WindowAggregate

use chrono::{DateTime, Utc};

pub const DEFAULT_CONTAINER: &str = "hubhost";
/// Buckets of the home directory (each split into one blob per partition).
pub const HOME_BUCKETS: u64 = 16;

/// Why a name from a request cannot become part of a blob name.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "{what} '{value}' cannot be used in a blob name: use 1-100 letters, digits, '.', '_', '-' or '$'"
)]
pub struct BadName {
    pub what: &'static str,
    pub value: String,
}

/// Lowercases and checks a hub, consumer group or partition id taken from a request, so that it
/// cannot add path segments or escape a directory.
pub fn segment(what: &'static str, value: &str) -> Result<String, BadName> {
    let ok = !value.is_empty()
        && value.len() <= 100
        && value != "."
        && value != ".."
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'$'));
    if ok {
        Ok(value.to_ascii_lowercase())
    } else {
        Err(BadName {
            what,
            value: value.chars().take(100).collect(),
        })
    }
}

fn window_path(start: DateTime<Utc>) -> String {
    start.format("%Y-%m-%d/%H%M%S").to_string()
}

/// Where a window's blocks of every partition are.
pub fn window_prefix(hub: &str, window_start: DateTime<Utc>) -> String {
    format!("windows/{hub}/{}/", window_path(window_start))
}

pub fn window_block_blob(
    hub: &str,
    window_start: DateTime<Utc>,
    partition: &str,
    block: &str,
) -> String {
    format!(
        "{}p{partition}/{block}.json",
        window_prefix(hub, window_start)
    )
}

pub fn fnv1a(s: &str) -> u64 {
    let mut hash: u64 = 0xcbf29ce484222325;
    for b in s.bytes() {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x100000001b3);
    }
    hash
}

pub fn home_bucket(home_id: &str) -> u64 {
    fnv1a(home_id) % HOME_BUCKETS
}

/// The part of home directory bucket `bucket` that holds the homes reporting on `partition`.
pub fn home_directory_blob(hub: &str, bucket: u64, partition: &str) -> String {
    format!("{}p{partition}.json", home_bucket_prefix(hub, bucket))
}

/// The prefix under which every partition's part of bucket `bucket` lies.
pub fn home_bucket_prefix(hub: &str, bucket: u64) -> String {
    format!("homes/{hub}/{bucket:02}/")
}

pub fn archive_blob(
    hub: &str,
    consumer_group: &str,
    window_start: DateTime<Utc>,
    partition: &str,
    block: &str,
) -> String {
    format!(
        "archive/{hub}/{consumer_group}/{}/p{partition}/{block}.json",
        window_path(window_start)
    )
}

pub fn deadletter_blob(hub: &str, consumer_group: &str, partition: &str, id: &str) -> String {
    format!("deadletter/{hub}/{consumer_group}/p{partition}/{id}.json")
}

/// What an app blob is, from its name (a label of the storage request counts).
pub fn blob_kind(name: &str) -> &'static str {
    match name.split('/').next().unwrap_or_default() {
        "windows" => "window block",
        "homes" => "home directory",
        "archive" => "archive",
        "deadletter" => "dead letter",
        // `hubhost_functions::once`'s marks (container `hubhost-once`), named by function.
        "sensoraggregator" => "alarm mark",
        _ => "other",
    }
}

/// The same for what the web page reads, counted apart from what the functions do.
pub fn page_blob_kind(name: &str) -> &'static str {
    match blob_kind(name) {
        "window block" => "page: window block",
        "home directory" => "page: home directory",
        _ => "page: other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn app_blobs_are_counted_by_kind_and_the_page_s_apart() {
        let t = "2026-11-25T12:00:00Z".parse().unwrap();
        assert_eq!(
            blob_kind(&window_block_blob("sensors", t, "3", "0")),
            "window block"
        );
        assert_eq!(blob_kind(&window_prefix("sensors", t)), "window block");
        assert_eq!(
            blob_kind(&home_directory_blob("sensors", 7, "3")),
            "home directory"
        );
        assert_eq!(
            blob_kind(&deadletter_blob("sensors", "$Default", "3", "9")),
            "dead letter"
        );
        assert_eq!(blob_kind("elsewhere/x.json"), "other");
        assert_eq!(
            page_blob_kind(&window_prefix("sensors", t)),
            "page: window block"
        );
    }

    #[test]
    fn names_from_requests_cannot_escape() {
        assert_eq!(segment("hub", "Sensors").unwrap(), "sensors");
        assert_eq!(segment("consumer group", "$Default").unwrap(), "$default");
        for bad in ["", ".", "..", "a/b", "a\\b", "x y", "../etc"] {
            assert!(segment("partition", bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn blob_names_follow_the_layout() {
        let t = DateTime::parse_from_rfc3339("2026-11-22T13:30:00Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(
            window_block_blob("sensors", t, "3", "0000000012"),
            "windows/sensors/2026-11-22/133000/p3/0000000012.json"
        );
        assert_eq!(
            home_directory_blob("sensors", 7, "3"),
            "homes/sensors/07/p3.json"
        );
        assert!(
            home_directory_blob("sensors", 7, "3").starts_with(&home_bucket_prefix("sensors", 7))
        );
        assert_eq!(
            archive_blob("sensors", "archive", t, "3", "0000000012"),
            "archive/sensors/archive/2026-11-22/133000/p3/0000000012.json"
        );
        assert!(home_bucket("home-000001") < HOME_BUCKETS);
    }
}
