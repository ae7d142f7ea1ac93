//! The AMQP side of `hubhost hub`: accepts TCP connections (SASL ANONYMOUS, as the SDKs use with
//! claims-based security), their sessions and links, and hands each link to what serves it —
//! `requests` for `$cbs`/`$management`, `links` for producers and consumers.
//!
//! A connection remembers the tokens put on its `$cbs` node; an entity link attaches only if one
//! of them (unexpired) covers the hub. Replies to `$cbs`/`$management` requests go out on the
//! reply link the client attached from that node, found by the request's `reply-to` address.
//!
//! What one client can hold is bounded (`ClientLimits`): connections (one over the limit is
//! closed before its protocol header), the time to a completed open, sessions per connection
//! (the `channel-max` announced), links per connection (one over is refused with
//! `amqp:resource-limit-exceeded`), the frame size and the bytes of unfinished deliveries
//! (checked with every frame by `inbound`, before fe2o3 decodes anything). The hub holds no unsettled delivery of
//! its own: it settles what a producer sends when it answers it and sends consumers settled
//! deliveries, so the only delivery state a client can pile up is one message being transferred
//! per link, up to `MAX_MESSAGE_BYTES` (fe2o3 detaches the link with
//! `amqp:link:message-size-exceeded` past it).

use std::collections::HashMap;
use std::sync::atomic::AtomicUsize;
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
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;

use super::AmqpMessage;
use super::config::ClientLimits;
use super::connections::Counted;
use super::connections::{Slot, Slots, Taken};
use super::inbound::FrameGuard;
use super::links::{self, Address};
use super::received;
use super::requests;
use super::sas::{self, Grant, Right};
use super::websocket;
use super::{MAX_MESSAGE_BYTES, Namespace};

/// The most tokens one connection keeps: a client puts one per entity it uses and renews it
/// before it expires; past this many, the oldest is forgotten (its entities need it put again).
/// Each token is a few hundred bytes kept until the connection ends.
pub(crate) const MAX_TOKENS_PER_CONNECTION: usize = 64;

/// What one client connection has proven, and where its replies go.
struct ConnectionState {
    grants: Mutex<Vec<Grant>>,
    /// Reply links by the address the client receives replies on (and by node name).
    replies: Mutex<HashMap<String, mpsc::UnboundedSender<AmqpMessage>>>,
    /// Links open on the connection, over all its sessions.
    link_counter: Arc<AtomicUsize>,
    /// The connection's place among the hub's (`crate::connections`): held for good once a
    /// valid token was put. Only the connection's own task holds it: its sessions' and links'
    /// tasks, which may outlive it briefly, must not keep the slot taken.
    slot: std::sync::Weak<Slot>,
}

impl ConnectionState {
    fn new(slot: &Arc<Slot>) -> Self {
        ConnectionState {
            grants: Mutex::new(Vec::new()),
            replies: Mutex::new(HashMap::new()),
            link_counter: Arc::new(AtomicUsize::new(0)),
            slot: Arc::downgrade(slot),
        }
    }

    /// Keeps a token the client put: expired ones go, and past
    /// [`MAX_TOKENS_PER_CONNECTION`] the oldest. The first one authenticates the connection.
    fn keep(&self, grant: Grant) {
        let now = chrono::Utc::now().timestamp();
        let mut grants = self.grants.lock().expect("grants lock");
        grants.retain(|g| g.expires_at > now);
        if grants.len() >= MAX_TOKENS_PER_CONNECTION {
            grants.remove(0);
        }
        grants.push(grant);
        if let Some(slot) = self.slot.upgrade() {
            slot.authenticated();
        }
    }

    fn has_authenticated(&self) -> bool {
        !self.grants.lock().expect("grants lock").is_empty()
    }

    /// Whether a token the client put covers `hub` with `right` (any right, for `None`).
    fn authorized(&self, hub: &str, right: Option<Right>) -> bool {
        let now = chrono::Utc::now().timestamp();
        self.grants.lock().expect("grants lock").iter().any(|g| {
            g.expires_at > now
                && sas::grants_hub(g, hub)
                && right.is_none_or(|r| g.rights.allows(r))
        })
    }
}

/// How a listener's connections carry AMQP.
#[derive(Clone)]
pub enum Transport {
    /// AMQP over TCP, as the official emulator serves it (5672).
    Tcp,
    /// AMQP over TLS, as Event Hubs serves it (5671).
    Tls(TlsAcceptor),
    /// AMQP over WebSockets (Event Hubs: `wss` on 443), with TLS (`wss`) or without (`ws`).
    WebSocket(Option<TlsAcceptor>),
}

impl Transport {
    fn name(&self) -> &'static str {
        match self {
            Transport::Tcp => "amqp",
            Transport::Tls(_) => "amqps",
            Transport::WebSocket(None) => "ws",
            Transport::WebSocket(Some(_)) => "wss",
        }
    }
}

/// Accepts connections on `listener`, each in a slot of the hub's: `--max-connections` bounds
/// every listener's connections together (`crate::connections`).
pub async fn serve(
    listener: TcpListener,
    transport: Transport,
    namespace: Arc<Namespace>,
    limits: ClientLimits,
    slots: Arc<Slots>,
) {
    loop {
        let (stream, peer) = crate::connections::accept(&listener, transport.name(), &slots).await;
        let Some((slot, taken)) = slots.take() else {
            // Before the protocol header there is no AMQP way to say why: the socket is closed.
            tracing::warn!(
                %peer,
                limit = limits.max_connections,
                "connection refused: the hub has as many authenticated connections as --max-connections allows"
            );
            drop(stream);
            continue;
        };
        if taken == Taken::FromUnauthenticated {
            tracing::info!(%peer, "the hub is full: its oldest unauthenticated connection makes way for this one");
        }
        let _ = stream.set_nodelay(true);
        let namespace = namespace.clone();
        let transport = transport.clone();
        let slot = Arc::new(slot);
        tokio::spawn(async move {
            tracing::debug!(%peer, transport = transport.name(), "connection");
            // TLS, the WebSocket upgrade, the AMQP open and the first token all count against
            // one open timeout.
            let deadline = tokio::time::Instant::now() + limits.open_timeout;
            let evicted = slot.evicted();
            let amqp = Amqp {
                namespace,
                limits,
                deadline,
                slot,
            };
            let serving = async {
                match transport {
                    Transport::Tcp => amqp.serve(stream).await,
                    Transport::Tls(tls) => {
                        if let Some(stream) = amqp.opened("TLS handshake", tls.accept(stream)).await
                        {
                            amqp.serve(stream).await
                        }
                    }
                    Transport::WebSocket(None) => {
                        let upgrade = websocket::accept(
                            stream,
                            limits.max_frame_bytes as usize,
                            amqp.slot.meter(),
                        );
                        if let Some(stream) = amqp.opened("WebSocket upgrade", upgrade).await {
                            amqp.serve(stream).await
                        }
                    }
                    Transport::WebSocket(Some(tls)) => {
                        if let Some(stream) = amqp.opened("TLS handshake", tls.accept(stream)).await
                        {
                            let upgrade = websocket::accept(
                                stream,
                                limits.max_frame_bytes as usize,
                                amqp.slot.meter(),
                            );
                            if let Some(stream) = amqp.opened("WebSocket upgrade", upgrade).await {
                                amqp.serve(stream).await
                            }
                        }
                    }
                }
            };
            tokio::select! {
                () = serving => tracing::debug!(%peer, "connection closed"),
                () = evicted => tracing::info!(%peer, "connection closed: not authenticated, and a newer connection took its slot"),
            }
        });
    }
}

/// What serving one connection needs, whatever carries it.
struct Amqp {
    namespace: Arc<Namespace>,
    limits: ClientLimits,
    /// When the AMQP open must be complete, and the first token put.
    deadline: tokio::time::Instant,
    slot: Arc<Slot>,
}

impl Amqp {
    /// The outcome of a step before AMQP (TLS, the WebSocket upgrade), or `None` when it
    /// failed or did not finish before the deadline (said in the log).
    async fn opened<T, E: std::fmt::Display>(
        &self,
        step: &str,
        step_done: impl std::future::Future<Output = Result<T, E>>,
    ) -> Option<T> {
        match tokio::time::timeout_at(self.deadline, step_done).await {
            Ok(Ok(stream)) => Some(stream),
            Ok(Err(e)) => {
                tracing::info!(error = %e, "connection refused: {step} failed");
                None
            }
            Err(_) => {
                tracing::info!(
                    timeout = ?self.limits.open_timeout,
                    "connection closed: no {step} within the open timeout"
                );
                None
            }
        }
    }

    /// Serves AMQP on `stream`, whatever carries it: the open (by the deadline), then its
    /// sessions.
    async fn serve<S>(&self, stream: S)
    where
        S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        let Amqp {
            namespace,
            limits,
            deadline,
            slot,
        } = self;
        let (limits, deadline) = (*limits, *deadline);
        // Python's AMQP stack decodes performatives as complete lists: a frame whose trailing null
        // fields are left out (legal AMQP, and fe2o3's default) fails there. Setting the last field,
        // `properties`, makes every performative we open carry all its fields.
        let acceptor = ConnectionAcceptor::builder()
            .container_id("hubhost")
            .max_frame_size(limits.max_frame_bytes)
            .session_max(limits.max_sessions_per_connection)
            .properties(product_properties())
            .sasl_acceptor(SaslAnonymousMechanism::new())
            .build();
        let guard = FrameGuard::new(limits.max_frame_bytes as usize, limits.max_unfinished_bytes);
        let opening = acceptor.accept(super::wire::WireStream::new(
            stream,
            guard,
            Some(slot.meter()),
        ));
        let mut connection = match tokio::time::timeout_at(deadline, opening).await {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => {
                tracing::info!(error = %e, "AMQP connection refused");
                return;
            }
            Err(_) => {
                tracing::info!(
                    timeout = ?limits.open_timeout,
                    "connection closed: no AMQP open within the open timeout"
                );
                return;
            }
        };
        let state = Arc::new(ConnectionState::new(slot));
        // Python's AMQP stack compares against the session's handle-max without a default for it, so
        // it must be on the wire (the AMQP default, u32::MAX, would be left out).
        let sessions = SessionAcceptor::builder()
            .handle_max(u32::MAX - 1)
            .properties(product_properties())
            .build();
        // A connection that put no valid token by the deadline is closed: until then it holds
        // a slot without having proven a key.
        let unauthenticated = {
            let state = state.clone();
            async move {
                tokio::time::sleep_until(deadline).await;
                if state.has_authenticated() {
                    std::future::pending::<()>().await;
                }
            }
        };
        tokio::pin!(unauthenticated);
        loop {
            let incoming = tokio::select! {
                incoming = connection.next_incoming_session() => incoming,
                () = &mut unauthenticated => {
                    tracing::info!(
                        timeout = ?limits.open_timeout,
                        "connection closed: no valid token put within the open timeout"
                    );
                    break;
                }
            };
            let Some(incoming) = incoming else {
                break;
            };
            match sessions
                .accept_incoming_session(incoming, &mut connection)
                .await
            {
                Ok(session) => {
                    tokio::spawn(session_loop(
                        session,
                        namespace.clone(),
                        state.clone(),
                        limits,
                    ));
                }
                Err(e) => {
                    tracing::info!(error = %e, "session refused");
                    break;
                }
            }
        }
        let _ = connection.close().await;
    }
}

async fn session_loop(
    mut session: ListenerSessionHandle,
    namespace: Arc<Namespace>,
    state: Arc<ConnectionState>,
    limits: ClientLimits,
) {
    // Like the service, settle in the first mode only: a receiver's disposition settles the
    // delivery (Python's producer asks for `second` and waits for a settled disposition).
    let acceptor = |max_message_size: u64| {
        LinkAcceptor::builder()
            .supported_receiver_settle_modes(SupportedReceiverSettleModes::First)
            .fallback_receiver_settle_mode(ReceiverSettleMode::First)
            .max_message_size(max_message_size)
            .properties(product_properties())
    };
    // What a client sends is held to the service's limit. What it receives is not: the three
    // stamps take an event sent at the limit past it, and a limit there would end the link at
    // that event every time the consumer came back — its partition stuck for good. So the hub
    // sets none on the links it sends on, and passes over the one a receiver states (Python's
    // says 1 MiB, and neither SDK checks what arrives), as the service delivers such events.
    let links_clients_send_on = acceptor(MAX_MESSAGE_BYTES).build();
    // Receivers may ask for the partition's newest event with each delivery.
    let links_clients_receive_on = acceptor(0)
        .add_offered_capabilities(received::RUNTIME_METRIC)
        .build();
    while let Some(mut attach) = session.next_incoming_attach().await {
        let address = link_address(&attach);
        let owner_level = owner_level(&attach);
        let filter = selector(&attach);
        let track_last_enqueued = desires(&attach, received::RUNTIME_METRIC);
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
        let counted = Counted::take(&state.link_counter, limits.max_links_per_connection);
        let namespace = namespace.clone();
        let state = state.clone();
        tokio::spawn(async move {
            let Some(_counted) = counted else {
                let text = format!(
                    "The connection has {} links open, the most this hub allows (--max-links).",
                    limits.max_links_per_connection
                );
                return match endpoint {
                    LinkEndpoint::Receiver(receiver) => {
                        links::refuse_receiver(receiver, AmqpError::ResourceLimitExceeded, text)
                            .await
                    }
                    LinkEndpoint::Sender(sender) => {
                        links::refuse_sender(sender, AmqpError::ResourceLimitExceeded, text).await
                    }
                };
            };
            match endpoint {
                LinkEndpoint::Receiver(receiver) => {
                    client_sends(receiver, address, namespace, state).await
                }
                LinkEndpoint::Sender(sender) => {
                    let receiver = ReceiverLink {
                        address,
                        owner_level,
                        filter,
                        name,
                        track_last_enqueued,
                    };
                    client_receives(sender, receiver, namespace, state).await
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

/// The hub an entity link names, if it exists and the connection holds a token for it with
/// `right` (Send to send to it, Listen to receive from it).
fn authorized_hub(
    namespace: &Namespace,
    state: &ConnectionState,
    hub: &str,
    right: Right,
) -> Result<Arc<super::Hub>, (AmqpError, String)> {
    let Some(found) = namespace.hub(hub) else {
        let text = format!("The messaging entity '{hub}' could not be found.");
        return Err((AmqpError::NotFound, text));
    };
    if !state.authorized(&found.name, None) {
        let text = format!("Unauthorized access to '{hub}': put a token for it on $cbs first");
        return Err((AmqpError::UnauthorizedAccess, text));
    }
    if !state.authorized(&found.name, Some(right)) {
        let text = format!(
            "Unauthorized access. '{right:?}' claim(s) are required to perform this operation on '{hub}'."
        );
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
            let hub_state = match authorized_hub(&namespace, &state, &hub, Right::Send) {
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
            links::ingest(receiver, hub_state, partition_state, namespace.traces).await
        }
        _ => {
            let text = format!("cannot send to {address:?}");
            links::refuse_receiver(receiver, AmqpError::NotFound, text).await
        }
    }
}

/// What a client asked for when it attached a link to receive on.
struct ReceiverLink {
    address: Option<String>,
    owner_level: Option<i64>,
    /// The start position (a selector filter), when given.
    filter: Option<String>,
    name: String,
    /// The receiver desires the runtime metric: the partition's newest event with each delivery.
    track_last_enqueued: bool,
}

/// Whether a link's attach desires `capability`.
fn desires(attach: &Attach, capability: &str) -> bool {
    attach
        .desired_capabilities
        .as_ref()
        .is_some_and(|c| c.0.iter().any(|s| s.as_str() == capability))
}

/// A link on which the client receives: replies from `$cbs`/`$management`, or a partition's events.
async fn client_receives(
    sender: Sender,
    link: ReceiverLink,
    namespace: Arc<Namespace>,
    state: Arc<ConnectionState>,
) {
    let ReceiverLink {
        address,
        owner_level,
        filter,
        name,
        track_last_enqueued,
    } = link;
    match address.as_deref().and_then(links::parse_address) {
        Some(Address::Node(node)) => reply_loop(sender, node, state).await,
        Some(Address::Receive {
            hub,
            consumer_group,
            partition,
        }) => {
            let hub_state = match authorized_hub(&namespace, &state, &hub, Right::Listen) {
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
            let traced = namespace
                .traces
                .then(|| (hub_state.name.clone(), consumer_group.clone()));
            links::deliver(
                sender,
                partition_state,
                next,
                lease,
                track_last_enqueued,
                traced,
            )
            .await
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
                tracing::info!(error = %e.source, node = %node, "undecodable request");
                let text = format!("the request is not an AMQP message: {}", e.source);
                let error =
                    fe2o3_amqp::types::definitions::Error::new(AmqpError::DecodeError, text, None);
                if receiver.reject(e.info, error).await.is_err() {
                    break;
                }
                continue;
            }
            Err(_) => break,
        };
        let now = chrono::Utc::now().timestamp();
        let request = delivery.message();
        let handled = match node.as_str() {
            "$cbs" => requests::put_token(request, &namespace, now),
            _ => requests::management(request, &namespace, now, |hub| state.authorized(hub, None)),
        };
        if let Some(grant) = handled.grant {
            state.keep(grant);
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
