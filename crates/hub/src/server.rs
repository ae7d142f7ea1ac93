//! The AMQP side of `hubhost hub`: accepts TCP connections (SASL ANONYMOUS, as the SDKs use with
//! claims-based security), their sessions and links, and hands each link to what serves it —
//! `requests` for `$cbs`/`$management`, `links` for producers and consumers.
//!
//! A connection remembers the tokens put on its `$cbs` node; an entity link attaches only if one
//! of them (unexpired) covers the hub. Replies to `$cbs`/`$management` requests go out on the
//! reply link the client attached from that node, found by the request's `reply-to` address.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fe2o3_amqp::acceptor::{
    ConnectionAcceptor, LinkAcceptor, LinkEndpoint, ListenerSessionHandle, SaslAnonymousMechanism,
    SessionAcceptor, SupportedReceiverSettleModes,
};
use fe2o3_amqp::link::delivery::Sendable;
use fe2o3_amqp::link::{Receiver, Sender};
use fe2o3_amqp::types::definitions::{AmqpError, Fields, LinkError, ReceiverSettleMode, Role};
use fe2o3_amqp::types::messaging::{Body, TargetArchetype};
use fe2o3_amqp::types::performatives::Attach;
use fe2o3_amqp::types::primitives::{Symbol, Value};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use super::links::{self, Address};
use super::requests::{self, AmqpMessage};
use super::sas::{self, Grant};
use super::{MAX_MESSAGE_BYTES, Namespace};

/// What one client connection has proven, and where its replies go.
#[derive(Default)]
struct ConnectionState {
    grants: Mutex<Vec<Grant>>,
    /// Reply links by the address the client receives replies on (and by node name).
    replies: Mutex<HashMap<String, mpsc::UnboundedSender<AmqpMessage>>>,
}

impl ConnectionState {
    fn authorized(&self, hub: &str) -> bool {
        let now = chrono::Utc::now().timestamp();
        self.grants
            .lock()
            .expect("grants lock")
            .iter()
            .any(|g| g.expires_at > now && sas::grants_hub(g, hub))
    }
}

/// Accepts connections until the listener fails.
pub async fn serve(listener: TcpListener, namespace: Arc<Namespace>) -> std::io::Result<()> {
    loop {
        let (stream, peer) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let namespace = namespace.clone();
        tokio::spawn(async move {
            tracing::debug!(%peer, "connection");
            connection(stream, namespace).await;
            tracing::debug!(%peer, "connection closed");
        });
    }
}

async fn connection(stream: tokio::net::TcpStream, namespace: Arc<Namespace>) {
    // Python's AMQP stack decodes performatives as complete lists: a frame whose trailing null
    // fields are left out (legal AMQP, and fe2o3's default) fails there. Setting the last field,
    // `properties`, makes every performative we open carry all its fields.
    let acceptor = ConnectionAcceptor::builder()
        .container_id("hubhost")
        .properties(product_properties())
        .sasl_acceptor(SaslAnonymousMechanism::new())
        .build();
    let mut connection = match acceptor.accept(super::wire::WireStream::new(stream)).await {
        Ok(c) => c,
        Err(e) => {
            tracing::info!(error = %e, "AMQP connection refused");
            return;
        }
    };
    let state = Arc::new(ConnectionState::default());
    // Python's AMQP stack compares against the session's handle-max without a default for it, so
    // it must be on the wire (the AMQP default, u32::MAX, would be left out).
    let sessions = SessionAcceptor::builder()
        .handle_max(u32::MAX - 1)
        .properties(product_properties())
        .build();
    while let Some(incoming) = connection.next_incoming_session().await {
        match sessions
            .accept_incoming_session(incoming, &mut connection)
            .await
        {
            Ok(session) => {
                tokio::spawn(session_loop(session, namespace.clone(), state.clone()));
            }
            Err(e) => {
                tracing::info!(error = %e, "session refused");
                break;
            }
        }
    }
    let _ = connection.close().await;
}

async fn session_loop(
    mut session: ListenerSessionHandle,
    namespace: Arc<Namespace>,
    state: Arc<ConnectionState>,
) {
    // Like the service, settle in the first mode only: a receiver's disposition settles the
    // delivery (Python's producer asks for `second` and waits for a settled disposition).
    let acceptor = |max_message_size: u64| {
        LinkAcceptor::builder()
            .supported_receiver_settle_modes(SupportedReceiverSettleModes::First)
            .fallback_receiver_settle_mode(ReceiverSettleMode::First)
            .max_message_size(max_message_size)
            .properties(product_properties())
            .build()
    };
    // What a client sends is held to the service's limit. What it receives is not: the three
    // stamps take an event sent at the limit past it, and a limit there would end the link at
    // that event every time the consumer came back — its partition stuck for good. So the hub
    // sets none on the links it sends on, and passes over the one a receiver states (Python's
    // says 1 MiB, and neither SDK checks what arrives), as the service delivers such events.
    let links_clients_send_on = acceptor(MAX_MESSAGE_BYTES);
    let links_clients_receive_on = acceptor(0);
    while let Some(mut attach) = session.next_incoming_attach().await {
        let address = link_address(&attach);
        let owner_level = owner_level(&attach);
        let filter = selector(&attach);
        let name = attach.name.clone();
        let acceptor = match attach.role {
            Role::Sender => &links_clients_send_on,
            Role::Receiver => {
                attach.max_message_size = None;
                &links_clients_receive_on
            }
        };
        let endpoint = match acceptor.accept_incoming_attach(attach, &mut session).await {
            Ok(link) => link,
            Err(e) => {
                tracing::info!(error = %e, "link refused");
                continue;
            }
        };
        let namespace = namespace.clone();
        let state = state.clone();
        tokio::spawn(async move {
            match endpoint {
                LinkEndpoint::Receiver(receiver) => {
                    client_sends(receiver, address, namespace, state).await
                }
                LinkEndpoint::Sender(sender) => {
                    client_receives(sender, address, owner_level, filter, name, namespace, state)
                        .await
                }
            }
        });
    }
    let _ = session.end().await;
}

fn product_properties() -> Fields {
    let mut fields = Fields::new();
    fields.insert(Symbol::from("product"), Value::String("hubhost".into()));
    fields
}

/// The address of the node a link is attached to: the target when the client sends, the source
/// when it receives.
fn link_address(attach: &Attach) -> Option<String> {
    match attach.role {
        Role::Sender => match attach.target.as_deref()? {
            TargetArchetype::Target(t) => t.address.clone(),
            #[allow(unreachable_patterns)]
            _ => None,
        },
        Role::Receiver => attach.source.as_ref()?.address.clone(),
    }
}

fn reply_address(sender: &Sender) -> Option<String> {
    sender.target().as_ref()?.address.clone()
}

fn owner_level(attach: &Attach) -> Option<i64> {
    let value = attach
        .properties
        .as_ref()?
        .iter()
        .find(|(k, _)| k.0 == "com.microsoft:epoch")?
        .1
        .clone();
    match value {
        Value::Long(v) => Some(v),
        Value::Int(v) => Some(v as i64),
        Value::Uint(v) => Some(v as i64),
        Value::Ulong(v) => Some(v as i64),
        _ => None,
    }
}

fn selector(attach: &Attach) -> Option<String> {
    let filter = attach.source.as_ref()?.filter.as_ref()?;
    filter.iter().find_map(|(key, value)| {
        if !key.0.contains("selector-filter") {
            return None;
        }
        match value {
            Value::Described(d) => match &d.value {
                Value::String(s) => Some(s.clone()),
                _ => None,
            },
            Value::String(s) => Some(s.clone()),
            _ => None,
        }
    })
}

/// The hub an entity link names, if it exists and the connection holds a token for it.
fn authorized_hub(
    namespace: &Namespace,
    state: &ConnectionState,
    hub: &str,
) -> Result<Arc<super::Hub>, (AmqpError, String)> {
    let Some(found) = namespace.hub(hub).cloned() else {
        let text = format!("The messaging entity '{hub}' could not be found.");
        return Err((AmqpError::NotFound, text));
    };
    if !state.authorized(&found.name) {
        let text = format!("Unauthorized access to '{hub}': put a token for it on $cbs first");
        return Err((AmqpError::UnauthorizedAccess, text));
    }
    Ok(found)
}

/// A link on which the client sends: requests to `$cbs`/`$management`, or events to a hub.
async fn client_sends(
    receiver: Receiver,
    address: Option<String>,
    namespace: Arc<Namespace>,
    state: Arc<ConnectionState>,
) {
    match address.as_deref().and_then(links::parse_address) {
        Some(Address::Node(node)) => requests_loop(receiver, node, namespace, state).await,
        Some(Address::Send { hub, partition }) => {
            let hub_state = match authorized_hub(&namespace, &state, &hub) {
                Ok(h) => h,
                Err((condition, text)) => {
                    return links::refuse_receiver(receiver, condition, text).await;
                }
            };
            let partition_state = match partition {
                Some(id) => match hub_state.partition(&id) {
                    Some(p) => Some(p.clone()),
                    None => {
                        let text = format!("The partition '{id}' of '{hub}' does not exist.");
                        return links::refuse_receiver(receiver, AmqpError::NotFound, text).await;
                    }
                },
                None => None,
            };
            links::ingest(receiver, hub_state, partition_state).await
        }
        _ => {
            let text = format!("cannot send to {address:?}");
            links::refuse_receiver(receiver, AmqpError::NotFound, text).await
        }
    }
}

/// A link on which the client receives: replies from `$cbs`/`$management`, or a partition's events.
async fn client_receives(
    sender: Sender,
    address: Option<String>,
    owner_level: Option<i64>,
    filter: Option<String>,
    name: String,
    namespace: Arc<Namespace>,
    state: Arc<ConnectionState>,
) {
    match address.as_deref().and_then(links::parse_address) {
        Some(Address::Node(node)) => reply_loop(sender, node, state).await,
        Some(Address::Receive {
            hub,
            consumer_group,
            partition,
        }) => {
            let hub_state = match authorized_hub(&namespace, &state, &hub) {
                Ok(h) => h,
                Err((condition, text)) => {
                    return links::refuse_sender(sender, condition, text).await;
                }
            };
            if !hub_state.has_consumer_group(&consumer_group) {
                let text = format!(
                    "The messaging entity '{hub}/ConsumerGroups/{consumer_group}' could not be found."
                );
                return links::refuse_sender(sender, AmqpError::NotFound, text).await;
            }
            let Some(partition_state) = hub_state.partition(&partition).cloned() else {
                let text = format!("The partition '{partition}' of '{hub}' does not exist.");
                return links::refuse_sender(sender, AmqpError::NotFound, text).await;
            };
            let start = match super::filter::parse(filter.as_deref()) {
                Ok(start) => start,
                Err(e) => {
                    return links::refuse_sender(sender, AmqpError::InvalidField, e.to_string())
                        .await;
                }
            };
            let lease = match partition_state.open_receiver(&consumer_group, owner_level, &name) {
                Ok(lease) => lease,
                Err(e) => {
                    return links::refuse_sender(sender, LinkError::Stolen, e.to_string()).await;
                }
            };
            let next = match links::start_sequence(&partition_state, start) {
                Ok(n) => n,
                Err(e) => {
                    return links::refuse_sender(sender, AmqpError::InternalError, e.to_string())
                        .await;
                }
            };
            tracing::debug!(
                hub = %hub_state.name,
                consumer_group = %consumer_group,
                partition = %partition_state.id,
                ?owner_level,
                from_sequence = next,
                "receiver attached"
            );
            links::deliver(sender, partition_state, next, lease).await
        }
        _ => {
            let text = format!("cannot receive from {address:?}");
            links::refuse_sender(sender, AmqpError::NotFound, text).await
        }
    }
}

/// Serves requests to `$cbs` or `$management` arriving on one link.
async fn requests_loop(
    mut receiver: Receiver,
    node: String,
    namespace: Arc<Namespace>,
    state: Arc<ConnectionState>,
) {
    loop {
        let delivery = match receiver.recv::<Body<Value>>().await {
            Ok(d) => d,
            Err(fe2o3_amqp::link::RecvError::MessageDecode(e)) => {
                tracing::info!(error = ?e, node = %node, "undecodable request");
                continue;
            }
            Err(_) => break,
        };
        let now = chrono::Utc::now().timestamp();
        let request = delivery.message();
        let handled = match node.as_str() {
            "$cbs" => requests::put_token(request, &namespace, now),
            _ => requests::management(request, &namespace, now, |hub| state.authorized(hub)),
        };
        if let Some(grant) = handled.grant {
            state.grants.lock().expect("grants lock").push(grant);
        }
        let reply_to = request
            .properties
            .as_ref()
            .and_then(|p| p.reply_to.clone())
            .unwrap_or_else(|| node.clone());
        if receiver.accept(&delivery).await.is_err() {
            break;
        }
        send_reply(&state, &reply_to, &node, handled.reply).await;
    }
    let _ = receiver.close().await;
}

/// Finds the reply link (the client may attach it a moment after sending) and queues the reply.
async fn send_reply(state: &ConnectionState, reply_to: &str, node: &str, reply: AmqpMessage) {
    for _ in 0..500 {
        let route = {
            let replies = state.replies.lock().expect("replies lock");
            replies.get(reply_to).or_else(|| replies.get(node)).cloned()
        };
        if let Some(route) = route {
            let _ = route.send(reply);
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tracing::info!(reply_to = %reply_to, "no reply link for a request; reply dropped");
}

async fn reply_loop(mut sender: Sender, node: String, state: Arc<ConnectionState>) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    {
        let mut replies = state.replies.lock().expect("replies lock");
        if let Some(address) = reply_address(&sender) {
            replies.insert(address, tx.clone());
        }
        replies.insert(node.clone(), tx);
    }
    loop {
        tokio::select! {
            reply = rx.recv() => {
                let Some(reply) = reply else { break };
                let sendable = Sendable::builder().message(reply).settled(true).build();
                if sender.send_batchable(sendable).await.is_err() {
                    break;
                }
            }
            _ = sender.on_detach() => break,
        }
    }
    let _ = sender.close().await;
}
