//! Azure Table Storage over its REST API, for real Azure and for Azurite: what a table output
//! needs, write an entity and create the table. As the Tables extension does, a write that finds
//! no table creates it and writes again.
//!
//! An entity is a JSON object in the service's own form (`PartitionKey`, `RowKey`, properties,
//! and `name@odata.type` annotations for the types JSON cannot tell: Edm.Int64, Edm.DateTime,
//! Edm.Double for whole numbers, …).

use bytes::Bytes;
use percent_encoding::utf8_percent_encode;
use reqwest::{Method, StatusCode};
use serde_json::{Map, Value};

use super::StoreError;
use super::connection::StorageConnection;
use super::rest::{Dialect, RestRequest, ServiceEndpoint, rejection};

/// How an entity is written, as the Tables extension picks it from the entity's ETag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntityWrite {
    /// No ETag: insert, and an entity with the same keys is a conflict
    /// ([`StoreError::AlreadyExists`]).
    Insert,
    /// ETag `*`: insert or replace.
    Upsert,
    /// Any other ETag: replace that version of the entity.
    Replace { etag: String },
}

/// The table service of one storage account.
pub struct TableService {
    endpoint: ServiceEndpoint,
}

impl TableService {
    /// The table service `connection` names; `None` when it names none.
    pub fn new(connection: &StorageConnection) -> Result<Option<Self>, StoreError> {
        let endpoint = ServiceEndpoint::of(
            connection.table_endpoint.as_deref(),
            connection,
            Dialect::Table,
        )?;
        Ok(endpoint.map(|endpoint| TableService { endpoint }))
    }

    /// Writes `entity` (with its `PartitionKey` and `RowKey`) to `table`, creating the table
    /// when it is missing.
    pub async fn write(
        &self,
        table: &str,
        entity: &Map<String, Value>,
        how: &EntityWrite,
    ) -> Result<(), StoreError> {
        validate_table_name(table)?;
        match self.write_once(table, entity, how).await {
            Err(StoreError::NotFound { name, .. }) if name.is_empty() => {
                self.create(table).await?;
                self.write_once(table, entity, how).await
            }
            other => other,
        }
    }

    /// Creates `table`; one that exists already is fine.
    pub async fn create(&self, table: &str) -> Result<(), StoreError> {
        validate_table_name(table)?;
        let body = serde_json::json!({ "TableName": table }).to_string();
        let resp = self
            .endpoint
            .send(&RestRequest {
                method: Method::POST,
                path: "/Tables",
                query: vec![],
                headers: json_headers(),
                body: Bytes::from(body),
            })
            .await?;
        if resp.status().is_success() || resp.status() == StatusCode::CONFLICT {
            Ok(())
        } else {
            Err(self.error_from(resp, table, "").await)
        }
    }

    async fn write_once(
        &self,
        table: &str,
        entity: &Map<String, Value>,
        how: &EntityWrite,
    ) -> Result<(), StoreError> {
        let key = |name: &str| entity.get(name).and_then(Value::as_str).unwrap_or("");
        let (partition_key, row_key) = (key("PartitionKey"), key("RowKey"));
        let entity_path = || {
            let quoted =
                |k: &str| utf8_percent_encode(&k.replace('\'', "''"), KEY_KEEP).to_string();
            format!(
                "/{table}(PartitionKey='{}',RowKey='{}')",
                quoted(partition_key),
                quoted(row_key)
            )
        };
        let mut headers = json_headers();
        let (method, path) = match how {
            EntityWrite::Insert => (Method::POST, format!("/{table}")),
            EntityWrite::Upsert => (Method::PUT, entity_path()),
            EntityWrite::Replace { etag } => {
                headers.push(("If-Match".into(), etag.clone()));
                (Method::PUT, entity_path())
            }
        };
        let resp = self
            .endpoint
            .send(&RestRequest {
                method,
                path: &path,
                query: vec![],
                headers,
                body: Bytes::from(Value::Object(entity.clone()).to_string()),
            })
            .await?;
        if resp.status().is_success() {
            Ok(())
        } else {
            let name = format!("{partition_key}/{row_key}");
            Err(self.error_from(resp, table, &name).await)
        }
    }

    /// `name` is `PartitionKey/RowKey`, empty for the table itself.
    async fn error_from(&self, resp: reqwest::Response, table: &str, name: &str) -> StoreError {
        let refused = rejection(resp).await;
        let (c, n) = (table.to_string(), name.to_string());
        match (refused.status.as_u16(), refused.code.as_str()) {
            (409, "EntityAlreadyExists") => StoreError::AlreadyExists {
                container: c,
                name: n,
            },
            // The table is missing: the entity's name is dropped, so that the caller creates it.
            (404, "TableNotFound" | "ResourceNotFound") => StoreError::NotFound {
                container: c,
                name: String::new(),
            },
            _ => refused.into_error(self.endpoint.origin(), table, name),
        }
    }
}

/// What a key may keep unencoded in an entity's path.
const KEY_KEEP: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~')
    .remove(b'\'');

fn json_headers() -> Vec<(String, String)> {
    vec![
        ("Content-Type".into(), "application/json".into()),
        ("Accept".into(), "application/json;odata=nometadata".into()),
        ("Prefer".into(), "return-no-content".into()),
        ("DataServiceVersion".into(), "3.0".into()),
    ]
}

/// Azure's rule for table names: 3 to 63 letters and digits, starting with a letter.
pub fn validate_table_name(name: &str) -> Result<(), StoreError> {
    let ok = (3..=63).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_alphanumeric())
        && name.starts_with(|c: char| c.is_ascii_alphabetic());
    if ok && !name.eq_ignore_ascii_case("tables") {
        Ok(())
    } else {
        Err(StoreError::InvalidName {
            name: name.chars().take(200).collect(),
            reason: "a table name is 3 to 63 letters and digits, starting with a letter (and not \"tables\")".into(),
        })
    }
}

/// The Tables extension's rule for a `PartitionKey` or `RowKey`: at most 1 KiB, none of `/`,
/// `\`, `#`, `?`, and no control characters.
pub fn validate_entity_key(key: &str) -> Result<(), String> {
    if key.len() > 1024 {
        return Err("a key is at most 1 KiB".into());
    }
    if let Some(c) = key
        .chars()
        .find(|c| matches!(c, '/' | '\\' | '#' | '?') || c.is_control())
    {
        return Err(format!("a key cannot contain {c:?}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names_and_keys_follow_azures_rules() {
        assert!(validate_table_name("Readings2026").is_ok());
        for bad in ["ab", "1abc", "a-b", "Tables"] {
            assert!(validate_table_name(bad).is_err(), "{bad}");
        }
        assert!(validate_entity_key("home-7").is_ok());
        assert!(validate_entity_key("a/b").is_err());
        assert!(validate_entity_key("a\u{7}").is_err());
        assert!(validate_entity_key(&"k".repeat(1025)).is_err());
    }
}
