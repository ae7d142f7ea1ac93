//! Request/response nodes: `$cbs` (a client proves it holds a key by putting a SAS token, or
//! its identity by putting an Entra ID token of an issuer the hub trusts) and
//! `$management` (READ of `com.microsoft:eventhub` and `com.microsoft:partition`). Each request
//! is a message with the operation in its application properties; the answer carries
//! `status-code`/`statusCode` (the Rust SDK reads the first, Python's management link the second)
//! and the request's message id as its correlation id.

use fe2o3_amqp::types::messaging::{AmqpValue, ApplicationProperties, Body, Message, Properties};
use fe2o3_amqp::types::primitives::{Array, OrderedMap, SimpleValue, Timestamp, Value};

use super::sas::{self, Grant};
use super::{AmqpMessage, Namespace};

/// The outcome of one request: the reply, and for a successful put-token what it grants.
pub struct Handled {
    pub reply: AmqpMessage,
    pub grant: Option<Grant>,
}

/// Answers a `$cbs` put-token.
pub fn put_token(request: &AmqpMessage, namespace: &Namespace, now: i64) -> Handled {
    let operation = property(request, "operation");
    if operation.as_deref() != Some("put-token") {
        return refuse(
            request,
            400,
            &format!(
                "$cbs supports put-token, not {:?}",
                operation.unwrap_or_default()
            ),
        );
    }
    let Some(token) = body_string(request) else {
        return refuse(request, 400, "put-token needs the token as a string body");
    };
    let audience = property(request, "name").unwrap_or_default();
    let checked = match property(request, "type").as_deref() {
        // An Entra ID token covers what the client asked for (`name`) until it expires; with
        // no trusted issuer, Entra ID sign-in is refused as the official emulator refuses it.
        Some("jwt") => match &namespace.trusted_issuer {
            Some(issuer) => issuer
                .validate(&token, now)
                .map(|expires_at| Grant {
                    resource: sas::normalize_resource(&audience),
                    expires_at,
                    // Event Hubs decides an identity's rights by its role assignments, which a
                    // local hub does not have: a trusted issuer's token may do everything.
                    rights: sas::Rights::ALL,
                })
                .map_err(|e| e.to_string()),
            None => Err(
                "this hub trusts no Entra ID issuer (start it with --entra-issuer \
                         and --entra-jwks), so it accepts SAS tokens only"
                    .to_string(),
            ),
        },
        _ => sas::validate(&token, &namespace.keys, now).map_err(|e| e.to_string()),
    };
    match checked {
        Ok(grant) => {
            tracing::debug!(audience = %audience, resource = %grant.resource, "token accepted");
            Handled {
                reply: reply(request, 202, "Accepted", None),
                grant: Some(grant),
            }
        }
        Err(e) => {
            tracing::info!(error = %e, "token refused");
            refuse(request, 401, &format!("Unauthorized: {e}"))
        }
    }
}

/// Answers a `$management` request. `authorized` says whether the connection already holds a
/// token covering a given entity; a `security_token` in the request also counts.
pub fn management(
    request: &AmqpMessage,
    namespace: &Namespace,
    now: i64,
    authorized: impl Fn(&str) -> bool,
) -> Handled {
    let operation = property(request, "operation").unwrap_or_default();
    let kind = property(request, "type").unwrap_or_default();
    if operation != "READ" {
        return refuse(
            request,
            400,
            &format!("$management supports READ, not {operation:?}"),
        );
    }
    let Some(name) = property(request, "name") else {
        return refuse(
            request,
            400,
            "the request lacks the application property `name`",
        );
    };
    let Some(hub) = namespace.hub(&name) else {
        return refuse(
            request,
            404,
            &format!("The messaging entity '{name}' could not be found."),
        );
    };
    let token_grant = property(request, "security_token")
        .and_then(|t| sas::validate(&t, &namespace.keys, now).ok());
    let allowed = token_grant
        .as_ref()
        .is_some_and(|g| sas::grants_hub(g, &hub.name))
        || authorized(&hub.name);
    if !allowed {
        return refuse(
            request,
            401,
            &format!(
                "Unauthorized access to '{}': put a token for it on $cbs first",
                hub.name
            ),
        );
    }
    let mut map: OrderedMap<Value, Value> = OrderedMap::new();
    let mut put = |k: &str, v: Value| {
        map.insert(Value::String(k.to_string()), v);
    };
    match kind.as_str() {
        "com.microsoft:eventhub" => {
            put("name", Value::String(hub.name.clone()));
            put("type", Value::String(kind.clone()));
            put(
                "created_at",
                Value::Timestamp(Timestamp::from_milliseconds(hub.created_ms)),
            );
            put("partition_count", Value::Int(hub.partitions.len() as i32));
            put(
                "partition_ids",
                Value::Array(Array::from(
                    hub.partitions
                        .iter()
                        .map(|p| Value::String(p.id.clone()))
                        .collect::<Vec<_>>(),
                )),
            );
            // How many regions hold the hub: 1, without geo-replication. The Go SDK (v2)
            // refuses a hub's properties without it ("invalid value for
            // georeplication_factor"), and turns to string offsets when it is above 1.
            put("georeplication_factor", Value::Int(1));
        }
        "com.microsoft:partition" => {
            let id = property(request, "partition").unwrap_or_default();
            let Some(partition) = hub.partition(&id) else {
                return refuse(
                    request,
                    404,
                    &format!("The partition '{id}' of '{}' does not exist.", hub.name),
                );
            };
            let summary = partition.summary();
            let (last_sequence, last_offset, last_ms) = summary.last.unwrap_or((-1, -1, 0));
            put("name", Value::String(hub.name.clone()));
            put("type", Value::String(kind.clone()));
            put("partition", Value::String(partition.id.clone()));
            put(
                "begin_sequence_number",
                Value::Long(if summary.last.is_some() {
                    summary.begin_sequence
                } else {
                    -1
                }),
            );
            put("last_enqueued_sequence_number", Value::Long(last_sequence));
            put(
                "last_enqueued_offset",
                Value::String(last_offset.to_string()),
            );
            put(
                "last_enqueued_time_utc",
                Value::Timestamp(Timestamp::from_milliseconds(last_ms)),
            );
            // Event Hubs reports the epoch of the sequence numbers (bumped when a partition is
            // recreated); a local hub's never changes.
            put("last_enqueued_sequence_number_epoch", Value::Int(0));
            put(
                "is_partition_empty",
                Value::Bool(summary.begin_sequence >= summary.next_sequence),
            );
        }
        other => {
            return refuse(
                request,
                400,
                &format!(
                    "READ of type {other:?} is not supported (com.microsoft:eventhub, com.microsoft:partition)"
                ),
            );
        }
    }
    Handled {
        reply: reply(request, 200, "OK", Some(Value::Map(map))),
        grant: None,
    }
}

fn refuse(request: &AmqpMessage, code: i32, description: &str) -> Handled {
    Handled {
        reply: reply(request, code, description, None),
        grant: None,
    }
}

fn reply(request: &AmqpMessage, code: i32, description: &str, body: Option<Value>) -> AmqpMessage {
    let mut properties = OrderedMap::new();
    properties.insert("status-code".to_string(), SimpleValue::Int(code));
    properties.insert("statusCode".to_string(), SimpleValue::Int(code));
    properties.insert(
        "status-description".to_string(),
        SimpleValue::String(description.to_string()),
    );
    properties.insert(
        "statusDescription".to_string(),
        SimpleValue::String(description.to_string()),
    );
    let correlation_id = request
        .properties
        .as_ref()
        .and_then(|p| p.message_id.clone());
    Message::builder()
        .properties(Properties {
            correlation_id,
            ..Default::default()
        })
        .application_properties(ApplicationProperties(properties))
        .body(Body::Value(AmqpValue(body.unwrap_or(Value::Null))))
        .build()
}

/// A string application property of the request.
pub fn property(message: &AmqpMessage, key: &str) -> Option<String> {
    match message.application_properties.as_ref()?.0.get(key)? {
        SimpleValue::String(s) => Some(s.clone()),
        SimpleValue::Symbol(s) => Some(s.0.clone()),
        _ => None,
    }
}

fn body_string(message: &AmqpMessage) -> Option<String> {
    match &message.body {
        Body::Value(AmqpValue(Value::String(s))) => Some(s.clone()),
        Body::Value(AmqpValue(Value::Symbol(s))) => Some(s.0.clone()),
        Body::Data(batch) => batch
            .iter()
            .next()
            .and_then(|d| String::from_utf8(d.0.to_vec()).ok()),
        _ => None,
    }
}
