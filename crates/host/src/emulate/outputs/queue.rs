//! The `queue` output: each item one message on a Storage queue of the account its `connection`
//! names (Azurite locally), as the Storage Queues extension 5.x writes it.
//!
//! - The host hands the extension each item as bytes (its collector's first type,
//!   `IAsyncCollector<byte[]>`): bytes as they are, a string as its UTF-8 text, other JSON as
//!   Newtonsoft's `ToString()` gives it (objects and arrays indented, `True`/`False`).
//! - The message text is the bytes in base64, or with host.json
//!   `extensions.queues.messageEncoding: "none"` the text itself.
//! - `queueName` is lowercased, as the extension does; the queue is created when a put finds
//!   none (`AddMessageAndCreateIfNotExistsAsync`).

use std::sync::Arc;

use base64::Engine;
use serde_json::Value;

use super::{OutputError, OutputValue};
use hubhost_storage::queue::QueueService;

/// host.json `extensions.queues.messageEncoding`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MessageEncoding {
    #[default]
    Base64,
    None,
}

/// Why host.json's `messageEncoding` cannot be read.
#[derive(Debug, thiserror::Error)]
#[error("host.json extensions.queues.messageEncoding is \"{value}\": it is \"base64\" or \"none\"")]
pub struct MessageEncodingError {
    value: String,
}

impl MessageEncoding {
    /// The encoding host.json sets (`base64` when it sets none; case ignored, as .NET's
    /// configuration binder ignores it).
    pub fn from_host_json(host: &Value) -> Result<Self, MessageEncodingError> {
        match host
            .pointer("/extensions/queues/messageEncoding")
            .and_then(Value::as_str)
        {
            None => Ok(MessageEncoding::Base64),
            Some(v) if v.eq_ignore_ascii_case("base64") => Ok(MessageEncoding::Base64),
            Some(v) if v.eq_ignore_ascii_case("none") => Ok(MessageEncoding::None),
            Some(other) => Err(MessageEncodingError {
                value: other.to_string(),
            }),
        }
    }

    /// A message's text for `bytes`.
    pub fn message_text(self, bytes: &[u8]) -> String {
        match self {
            MessageEncoding::Base64 => base64::engine::general_purpose::STANDARD.encode(bytes),
            MessageEncoding::None => String::from_utf8_lossy(bytes).into_owned(),
        }
    }
}

/// The bytes the host hands a byte-array collector for one item.
pub fn item_bytes(item: OutputValue) -> Vec<u8> {
    match item {
        OutputValue::Bytes(bytes) => bytes,
        OutputValue::Json(value) => newtonsoft_text(&value).into_bytes(),
    }
}

/// Newtonsoft's `JToken.ToString()`: a string's own text, `True`/`False`, numbers as written,
/// objects and arrays indented by two spaces.
fn newtonsoft_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::Null => String::new(),
        Value::Number(n) => n.to_string(),
        other => serde_json::to_string_pretty(other).unwrap_or_default(),
    }
}

/// Puts one message per item on `queue`, in order, within the storage time limit.
pub(super) async fn put(
    service: &Arc<QueueService>,
    queue: &str,
    encoding: MessageEncoding,
    items: Vec<OutputValue>,
    output: &str,
) -> Result<(), OutputError> {
    let put_all = async {
        for item in items {
            let text = encoding.message_text(&item_bytes(item));
            service.put_message(queue, &text).await?;
        }
        Ok(())
    };
    super::within_storage_timeout(output, put_all, |source| OutputError::Queue {
        output: output.to_string(),
        queue: queue.to_string(),
        source,
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn items_become_the_bytes_the_host_hands_the_extension() {
        assert_eq!(item_bytes(OutputValue::Json(json!("hi"))), b"hi");
        assert_eq!(item_bytes(OutputValue::Json(json!(7))), b"7");
        assert_eq!(item_bytes(OutputValue::Json(json!(true))), b"True");
        assert_eq!(
            item_bytes(OutputValue::Json(json!({"id": "1", "n": [2]}))),
            b"{\n  \"id\": \"1\",\n  \"n\": [\n    2\n  ]\n}"
        );
        assert_eq!(item_bytes(OutputValue::Bytes(vec![0, 255])), [0, 255]);
    }

    #[test]
    fn messages_are_base64_unless_host_json_says_none() {
        let host = json!({"extensions": {"queues": {"messageEncoding": "None"}}});
        assert_eq!(
            MessageEncoding::from_host_json(&host).unwrap(),
            MessageEncoding::None
        );
        assert_eq!(
            MessageEncoding::from_host_json(&json!({})).unwrap(),
            MessageEncoding::Base64
        );
        assert!(
            MessageEncoding::from_host_json(
                &json!({"extensions": {"queues": {"messageEncoding": "utf8"}}})
            )
            .unwrap_err()
            .to_string()
            .contains("\"utf8\"")
        );
        assert_eq!(MessageEncoding::Base64.message_text(b"hi"), "aGk=");
        assert_eq!(MessageEncoding::None.message_text(b"hi"), "hi");
    }
}
