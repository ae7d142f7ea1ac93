//! The outbox: where the emulated host keeps the values of output bindings that no local
//! service carries out (cosmosDB, serviceBus, sql, signalR, any other type; queue and table
//! outputs whose connection names no storage account), so that an app with such outputs runs,
//! and its outputs can be read and audited.
//!
//! One file per function and binding, `{outbox}/{function}/{binding}.jsonl`, one JSON line per
//! item the host's collector would be handed, each saying where it came from:
//!
//! ```text
//! {"function":"Fan","binding":"docs","type":"cosmosDB","invocationId":"…","partitionId":"3",
//!  "firstSequenceNumber":40,"lastSequenceNumber":49,"keptAt":"2026-12-02T10:00:00.123Z",
//!  "value":{"id":"home-7","state":"open"}}
//! ```
//!
//! `value` is the item as JSON; an item the host reads as bytes (a base64 string on a binding
//! that is not `dataType: binary`) is `"bytes"`, in base64, instead.
//!
//! A value's lines are appended in one write, off the async workers, before the invocation
//! counts as succeeded and its batch can be checkpointed: what is checkpointed is in the file,
//! through a kill -9 of the process (the file is not fsynced, so not through a power cut).
//! Instances of a pool may share an outbox: appends of whole lines with `O_APPEND` do not
//! interleave on a local file system. A retried batch appends again, as the host would call
//! the extension again: the outbox is at-least-once, like every output.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use base64::Engine;
use serde_json::{Value, json};

use super::{InvocationOrigin, OutputValue};

/// The longest function or binding name the outbox takes (the host's own limit is 128).
const MAX_NAME_CHARS: usize = 128;

/// A folder of outbox files, shared by every function of an instance.
#[derive(Clone)]
pub struct Outbox {
    dir: PathBuf,
    /// Held while a value's lines are written: within the process, a value's lines stay
    /// together whatever the file system does.
    writing: Arc<Mutex<()>>,
}

/// A function or binding name that cannot name an outbox file.
#[derive(Debug, thiserror::Error)]
#[error(
    "{what} name {name:?} cannot name an outbox file: it must be 1 to {MAX_NAME_CHARS} letters, digits, '_', '-' or '$', not starting with '-'"
)]
pub struct OutboxNameError {
    pub what: &'static str,
    pub name: String,
}

/// Why a value could not be kept.
#[derive(Debug, thiserror::Error)]
pub enum OutboxError {
    #[error("writing the outbox file {}: {source}", file.display())]
    Write {
        file: PathBuf,
        source: std::io::Error,
    },
    #[error("the outbox writer stopped")]
    Stopped,
}

impl Outbox {
    pub fn new(dir: PathBuf) -> Self {
        Outbox {
            dir,
            writing: Arc::new(Mutex::new(())),
        }
    }

    /// The file of `function`'s output `binding`; names that could leave the folder or hide a
    /// file are refused.
    pub fn file_for(&self, function: &str, binding: &str) -> Result<PathBuf, OutboxNameError> {
        check_name("function", function)?;
        check_name("binding", binding)?;
        Ok(self.dir.join(function).join(format!("{binding}.jsonl")))
    }

    /// Appends `lines` (whole lines) to `file`, creating it and its folders if missing.
    pub async fn append(&self, file: &Path, lines: Vec<u8>) -> Result<(), OutboxError> {
        if lines.is_empty() {
            return Ok(());
        }
        let file = file.to_path_buf();
        let writing = self.writing.clone();
        tokio::task::spawn_blocking(move || {
            let _one_at_a_time = writing.lock().unwrap_or_else(|e| e.into_inner());
            let written = (|| {
                if let Some(folder) = file.parent() {
                    std::fs::create_dir_all(folder)?;
                }
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&file)?
                    .write_all(&lines)
            })();
            written.map_err(|source| OutboxError::Write { file, source })
        })
        .await
        .map_err(|_| OutboxError::Stopped)?
    }
}

fn check_name(what: &'static str, name: &str) -> Result<(), OutboxNameError> {
    let fine = !name.is_empty()
        && name.chars().count() <= MAX_NAME_CHARS
        && !name.starts_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '$'));
    if fine {
        Ok(())
    } else {
        Err(OutboxNameError {
            what,
            name: name.to_string(),
        })
    }
}

/// One item as an outbox line's field: `("value", json)` or `("bytes", base64)`.
fn item_field(item: &OutputValue) -> (&'static str, Value) {
    match item {
        OutputValue::Json(value) => ("value", value.clone()),
        OutputValue::Bytes(bytes) => (
            "bytes",
            Value::from(base64::engine::general_purpose::STANDARD.encode(bytes)),
        ),
    }
}

/// One item as `hubhost invoke` shows it: its JSON, or `{"bytes": base64}`.
pub(super) fn item_json(item: &OutputValue) -> Value {
    match item_field(item) {
        ("value", value) => value,
        (key, value) => json!({ key: value }),
    }
}

/// The outbox lines of `items`, handed to `binding` (of type `kind`) by `origin` at `kept_at`.
pub(super) fn lines(
    origin: &InvocationOrigin<'_>,
    binding: &str,
    kind: &str,
    items: &[OutputValue],
    kept_at: chrono::DateTime<chrono::Utc>,
) -> Vec<u8> {
    let kept_at = kept_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let mut out = Vec::new();
    for item in items {
        let mut line = json!({
            "function": origin.function,
            "binding": binding,
            "type": kind,
            "invocationId": origin.invocation_id,
            "partitionId": origin.partition_id,
            "firstSequenceNumber": origin.sequence_numbers.map(|(first, _)| first),
            "lastSequenceNumber": origin.sequence_numbers.map(|(_, last)| last),
            "keptAt": kept_at,
        });
        let (key, value) = item_field(item);
        line[key] = value;
        serde_json::to_writer(&mut out, &line).expect("JSON to a Vec");
        out.push(b'\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::emulate::outputs::{binding_value, collector_items};

    fn origin() -> InvocationOrigin<'static> {
        InvocationOrigin {
            function: "Fan",
            invocation_id: "inv-1",
            partition_id: "3",
            sequence_numbers: Some((40, 41)),
        }
    }

    #[test]
    fn each_item_is_one_line_saying_where_it_came_from() {
        let items = collector_items(binding_value(false, json!([{"id": "a"}, "text", "aGk="])));
        let text = String::from_utf8(lines(
            &origin(),
            "docs",
            "cosmosDB",
            &items,
            chrono::Utc::now(),
        ))
        .unwrap();
        let read: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(read.len(), 3, "{text}");
        assert_eq!(read[0]["function"], "Fan");
        assert_eq!(read[0]["binding"], "docs");
        assert_eq!(read[0]["type"], "cosmosDB");
        assert_eq!(read[0]["invocationId"], "inv-1");
        assert_eq!(read[0]["partitionId"], "3");
        assert_eq!(read[0]["firstSequenceNumber"], 40);
        assert_eq!(read[0]["lastSequenceNumber"], 41);
        assert_eq!(read[0]["value"], json!({"id": "a"}));
        // Array elements stay JSON: only a whole value is read as base64.
        assert_eq!(read[1]["value"], "text");
        assert_eq!(read[2]["value"], "aGk=");
        // A whole value that is base64 is bytes, as the host reads it.
        let bytes = collector_items(binding_value(false, json!("aGk=")));
        let text =
            String::from_utf8(lines(&origin(), "q", "queue", &bytes, chrono::Utc::now())).unwrap();
        let line: Value = serde_json::from_str(text.trim()).unwrap();
        assert_eq!(line["bytes"], "aGk=");
        assert!(line.get("value").is_none());
    }

    #[test]
    fn names_that_could_leave_the_folder_are_refused() {
        let outbox = Outbox::new(PathBuf::from("out"));
        assert_eq!(
            outbox.file_for("Fan", "$return").unwrap(),
            Path::new("out/Fan/$return.jsonl")
        );
        for (function, binding) in [
            ("..", "docs"),
            ("Fan", "../x"),
            ("Fan", "a/b"),
            ("", "docs"),
            ("Fan", "-rf"),
            ("Fan", ".hidden"),
        ] {
            let e = outbox.file_for(function, binding).unwrap_err();
            assert!(e.to_string().contains("cannot name an outbox file"), "{e}");
        }
    }

    #[tokio::test]
    async fn appends_keep_every_line_of_every_value() {
        let dir = tempfile::tempdir().unwrap();
        let outbox = Outbox::new(dir.path().join("outbox"));
        let file = outbox.file_for("Fan", "docs").unwrap();
        let mut writers = Vec::new();
        for writer in 0..8 {
            let outbox = outbox.clone();
            let file = file.clone();
            writers.push(tokio::spawn(async move {
                for value in 0..50 {
                    let items = collector_items(binding_value(
                        false,
                        json!([{"w": writer, "v": value}, {"w": writer, "v": value}]),
                    ));
                    let lines = lines(&origin(), "docs", "cosmosDB", &items, chrono::Utc::now());
                    outbox.append(&file, lines).await.unwrap();
                }
            }));
        }
        for writer in writers {
            writer.await.unwrap();
        }
        let text = std::fs::read_to_string(&file).unwrap();
        let read: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(read.len(), 8 * 50 * 2);
        // A value's two lines are next to each other.
        for pair in read.chunks(2) {
            assert_eq!(pair[0]["value"], pair[1]["value"]);
        }
    }
}
