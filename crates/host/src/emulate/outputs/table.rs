//! The `table` output: each item one entity in a Storage table of the account its `connection`
//! names (Azurite locally), as the Tables extension writes it.
//!
//! - The host hands the extension each item as a JSON object (its collector's type,
//!   `IAsyncCollector<JObject>`); anything else fails the invocation.
//! - `PartitionKey` and `RowKey` come from the object (its `partitionKey`/`rowKey` members,
//!   case ignored), else from the binding's `partitionKey`/`rowKey`, whose expressions are
//!   resolved once per invocation, as the host binds an attribute once.
//! - Other members become properties: strings (ISO 8601 date-times as `Edm.DateTime`, as the
//!   host's JSON reader parses them), integers as `Edm.Int64`, other numbers as `Edm.Double`,
//!   booleans; `null` is left out. A nested object or array fails the invocation.
//! - An entity without an ETag is inserted: one that exists already is a conflict, which fails
//!   the invocation, so a retried batch fails again. With `"odata.etag": "*"` it is inserted
//!   or replaced.
//!
//! The extension sends each partition's entities of one invocation as one transaction (up to
//! 100); here each entity is its own request, so entities before a conflict stay written.

use std::sync::Arc;

use serde_json::{Map, Value};

use super::{OutputError, OutputValue};
use crate::emulate::template::Template;
use hubhost_storage::table::{EntityWrite, TableService, validate_entity_key};

/// A table output's keys as the binding gives them (expressions resolved per invocation).
#[derive(Debug, Clone, Default)]
pub struct BindingKeys {
    pub partition_key: Option<Template>,
    pub row_key: Option<Template>,
}

/// One entity to write, and how.
#[derive(Debug, Clone, PartialEq)]
pub struct Entity {
    pub properties: Map<String, Value>,
    pub write: EntityWrite,
}

/// The entity the Tables extension makes of one item, with the binding's keys where the item
/// has none; an error says why the extension would refuse it.
pub fn entity_of(
    item: OutputValue,
    partition_key: Option<&str>,
    row_key: Option<&str>,
) -> Result<Entity, String> {
    let object = match item {
        OutputValue::Json(Value::Object(object)) => object,
        OutputValue::Json(other) => {
            return Err(format!(
                "a table output takes JSON objects, not {}",
                kind_of(&other)
            ));
        }
        OutputValue::Bytes(_) => {
            return Err("a table output takes JSON objects, not bytes (base64 text)".into());
        }
    };
    let mut partition_key = partition_key.map(str::to_string);
    let mut row_key = row_key.map(str::to_string);
    let mut write = EntityWrite::Insert;
    let mut properties = Map::new();
    for (name, value) in object {
        if name.eq_ignore_ascii_case("partitionKey") || name.eq_ignore_ascii_case("rowKey") {
            let key = match value {
                Value::String(s) => s,
                Value::Null => continue,
                other => other.to_string(),
            };
            if name.eq_ignore_ascii_case("partitionKey") {
                partition_key = Some(key);
            } else {
                row_key = Some(key);
            }
            continue;
        }
        if name == "odata.etag" {
            write = match value.as_str() {
                Some("*") => EntityWrite::Upsert,
                Some(etag) => EntityWrite::Replace {
                    etag: etag.to_string(),
                },
                None => EntityWrite::Insert,
            };
            continue;
        }
        if name == "Timestamp" {
            // The service's own property: the SDK never sends it.
            continue;
        }
        match value {
            Value::Null => {}
            Value::String(text) if is_iso_date_time(&text) => {
                properties.insert(format!("{name}@odata.type"), "Edm.DateTime".into());
                properties.insert(name, Value::String(text));
            }
            Value::Number(n) if n.is_i64() || n.is_u64() => {
                let Some(n) = n.as_i64() else {
                    return Err(format!(
                        "property '{name}': {n} does not fit a 64-bit integer"
                    ));
                };
                properties.insert(format!("{name}@odata.type"), "Edm.Int64".into());
                properties.insert(name, Value::String(n.to_string()));
            }
            Value::Number(n) => {
                properties.insert(format!("{name}@odata.type"), "Edm.Double".into());
                properties.insert(name, Value::Number(n));
            }
            Value::Object(_) | Value::Array(_) => {
                return Err(format!(
                    "property '{name}' holds {}: a table entity's properties are single values",
                    kind_of(&value)
                ));
            }
            value => {
                properties.insert(name, value);
            }
        }
    }
    let (Some(partition_key), Some(row_key)) = (partition_key, row_key) else {
        return Err(
            "the entity has no PartitionKey or RowKey (give them in the value, or as the binding's partitionKey and rowKey)".into(),
        );
    };
    for (which, key) in [("PartitionKey", &partition_key), ("RowKey", &row_key)] {
        validate_entity_key(key).map_err(|e| format!("{which} \"{key}\": {e}"))?;
    }
    properties.insert("PartitionKey".into(), Value::String(partition_key));
    properties.insert("RowKey".into(), Value::String(row_key));
    Ok(Entity { properties, write })
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Newtonsoft's reading of a string as a date-time: `yyyy-MM-ddTHH:mm:ss`, optional
/// fraction, optional `Z` or offset.
fn is_iso_date_time(text: &str) -> bool {
    let b = text.as_bytes();
    b.len() >= 19
        && b[4] == b'-'
        && b[7] == b'-'
        && b[10] == b'T'
        && b[13] == b':'
        && b[16] == b':'
        && (chrono::DateTime::parse_from_rfc3339(text).is_ok()
            || chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S%.f").is_ok())
}

/// The entities of one answer's value: one per item, the binding's keys rendered once for the
/// invocation.
pub fn entities(
    value: OutputValue,
    keys: &BindingKeys,
    now: chrono::DateTime<chrono::Utc>,
    guid: uuid::Uuid,
) -> Result<Vec<Entity>, String> {
    let partition_key = keys.partition_key.as_ref().map(|t| t.render(now, guid));
    let row_key = keys.row_key.as_ref().map(|t| t.render(now, guid));
    super::collector_items(value)
        .into_iter()
        .map(|item| entity_of(item, partition_key.as_deref(), row_key.as_deref()))
        .collect()
}

/// Writes one entity per item to `table`, in order, within the storage time limit.
pub(super) async fn write(
    service: &Arc<TableService>,
    table: &str,
    entities: Vec<Entity>,
    output: &str,
) -> Result<(), OutputError> {
    let write_all = async {
        for entity in &entities {
            service
                .write(table, &entity.properties, &entity.write)
                .await?;
        }
        Ok(())
    };
    super::within_storage_timeout(output, write_all, |source| OutputError::Table {
        output: output.to_string(),
        table: table.to_string(),
        source,
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn entities_are_made_as_the_tables_extension_makes_them() {
        let item = OutputValue::Json(json!({
            "partitionKey": "home-7", "RowKey": "r1", "watts": 12, "ratio": 0.5,
            "ok": true, "at": "2026-12-01T10:00:00Z", "note": "x", "gone": null,
        }));
        let entity = entity_of(item, Some("ignored"), None).unwrap();
        assert_eq!(entity.write, EntityWrite::Insert);
        assert_eq!(
            Value::Object(entity.properties),
            json!({
                "PartitionKey": "home-7", "RowKey": "r1",
                "watts@odata.type": "Edm.Int64", "watts": "12",
                "ratio@odata.type": "Edm.Double", "ratio": 0.5,
                "ok": true,
                "at@odata.type": "Edm.DateTime", "at": "2026-12-01T10:00:00Z",
                "note": "x",
            })
        );
        // The binding's keys fill what the value lacks; "*" upserts.
        let upsert = entity_of(
            OutputValue::Json(json!({"odata.etag": "*"})),
            Some("p"),
            Some("r"),
        )
        .unwrap();
        assert_eq!(upsert.write, EntityWrite::Upsert);
        assert_eq!(upsert.properties["RowKey"], "r");
    }

    #[test]
    fn what_the_extension_refuses_is_refused_saying_why() {
        let refused = |value: Value| entity_of(OutputValue::Json(value), Some("p"), Some("r"));
        assert!(refused(json!("text")).unwrap_err().contains("a string"));
        assert!(
            refused(json!({"a": {"b": 1}}))
                .unwrap_err()
                .contains("holds an object")
        );
        assert!(
            entity_of(OutputValue::Json(json!({"a": 1})), None, None)
                .unwrap_err()
                .contains("no PartitionKey")
        );
        assert!(
            refused(json!({"rowKey": "a/b"}))
                .unwrap_err()
                .contains("RowKey")
        );
    }
}
