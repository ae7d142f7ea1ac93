//! Azure Queue Storage over its REST API, for real Azure and for Azurite: the two operations a
//! queue output needs, put a message and create the queue. As the Storage Queues extension does
//! (`AddMessageAndCreateIfNotExistsAsync`), a put that finds no queue creates it and puts again.

use bytes::Bytes;
use percent_encoding::utf8_percent_encode;
use reqwest::{Method, StatusCode};

use super::StoreError;
use super::azure::PATH_KEEP;
use super::connection::StorageConnection;
use super::rest::{Dialect, RestRequest, ServiceEndpoint, rejection};

/// The queue service of one storage account.
pub struct QueueService {
    endpoint: ServiceEndpoint,
}

impl QueueService {
    /// The queue service `connection` names; `None` when it names none (a SAS for the blob
    /// service alone).
    pub fn new(connection: &StorageConnection) -> Result<Option<Self>, StoreError> {
        let endpoint = ServiceEndpoint::of(
            connection.queue_endpoint.as_deref(),
            connection,
            Dialect::Full,
        )?;
        Ok(endpoint.map(|endpoint| QueueService { endpoint }))
    }

    /// Puts one message whose text is `text` (already encoded as the queue's readers expect)
    /// on `queue`, creating the queue when it is missing.
    pub async fn put_message(&self, queue: &str, text: &str) -> Result<(), StoreError> {
        validate_queue_name(queue)?;
        match self.put_once(queue, text).await {
            Err(StoreError::NotFound { .. }) => {
                self.create(queue).await?;
                self.put_once(queue, text).await
            }
            other => other,
        }
    }

    /// Creates `queue`; one that exists already is fine.
    pub async fn create(&self, queue: &str) -> Result<(), StoreError> {
        validate_queue_name(queue)?;
        let path = format!("/{}", utf8_percent_encode(queue, PATH_KEEP));
        let resp = self
            .endpoint
            .send(&RestRequest {
                method: Method::PUT,
                path: &path,
                query: vec![],
                headers: vec![],
                body: Bytes::new(),
            })
            .await?;
        if resp.status().is_success() || resp.status() == StatusCode::CONFLICT {
            Ok(())
        } else {
            Err(self.error_from(resp, queue).await)
        }
    }

    async fn put_once(&self, queue: &str, text: &str) -> Result<(), StoreError> {
        let path = format!("/{}/messages", utf8_percent_encode(queue, PATH_KEEP));
        let body = format!(
            "<?xml version=\"1.0\" encoding=\"utf-8\"?><QueueMessage><MessageText>{}</MessageText></QueueMessage>",
            xml_escape(text)
        );
        let resp = self
            .endpoint
            .send(&RestRequest {
                method: Method::POST,
                path: &path,
                query: vec![],
                headers: vec![("Content-Type".into(), "application/xml".into())],
                body: Bytes::from(body),
            })
            .await?;
        if resp.status().is_success() {
            Ok(())
        } else {
            Err(self.error_from(resp, queue).await)
        }
    }

    async fn error_from(&self, resp: reqwest::Response, queue: &str) -> StoreError {
        rejection(resp)
            .await
            .into_error(self.endpoint.origin(), queue, "")
    }
}

/// Azure's rule for queue names: 3 to 63 lowercase letters, digits and hyphens, starting and
/// ending with a letter or digit, no two hyphens in a row.
pub fn validate_queue_name(name: &str) -> Result<(), StoreError> {
    if super::is_lowercase_dns_name(name) {
        Ok(())
    } else {
        Err(StoreError::InvalidName {
            name: name.chars().take(200).collect(),
            reason: "a queue name is 3 to 63 lowercase letters, digits and single hyphens, starting and ending with a letter or digit".into(),
        })
    }
}

fn xml_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_names_follow_azures_rule() {
        for good in ["abc", "orders-2026", "a1b"] {
            assert!(validate_queue_name(good).is_ok(), "{good}");
        }
        for bad in [
            "ab",
            "Orders",
            "-abc",
            "abc-",
            "a--b",
            "a_b",
            &"a".repeat(64),
        ] {
            assert!(validate_queue_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn message_text_is_escaped_for_xml() {
        assert_eq!(
            xml_escape(r#"<a b="c">&'"#),
            "&lt;a b=&quot;c&quot;&gt;&amp;&apos;"
        );
    }
}
