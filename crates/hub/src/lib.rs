//! `hubhost hub`: a local Event Hubs namespace that the official SDKs connect to unchanged, over
//! plain AMQP 1.0 on 127.0.0.1:5672, as the official (Docker-only) emulator does, and on request
//! over TLS (`tls`) and WebSockets (`websocket`), as Event Hubs does.
//!
//! The data flows: a connection (TCP, TLS or a WebSocket) → `server` (SASL, sessions, links) →
//! either `requests`
//! (`$cbs` put-token, `$management` reads) or `links` (a producer's link appends to a
//! `Partition`; a consumer's link reads from one) → `log` (segment files or memory). The
//! namespace's model — hubs, partitions, and which receivers hold a partition — is `namespace`;
//! this module starts the listeners over it. `local_identity` is a managed identity endpoint
//! whose tokens the hub accepts, for apps with identity-based connections.

pub mod admin;
pub mod config;
pub(crate) mod connections;
pub(crate) mod encoding;
pub mod entra;
pub mod filter;
#[doc(hidden)]
pub mod fuzzing;
pub(crate) mod inbound;
pub mod kafka;
pub(crate) mod links;
pub mod local_identity;
pub mod log;
pub(crate) mod namespace;
pub mod partition_key;
pub(crate) mod received;
pub(crate) mod requests;
pub mod sas;
pub(crate) mod server;
pub(crate) mod spans;
pub mod tls;
pub mod websocket;
pub(crate) mod wire;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use config::{ClientLimits, HubConfig, HubSpec, TlsSettings};
use log::LogError;
pub(crate) use namespace::AmqpMessage;
pub use namespace::{Detach, Hub, Namespace, Partition, ReceiverLease, ReceiverRefused, own_files};

/// The largest event (or batch) a send may carry, as on Event Hubs Standard.
pub const MAX_MESSAGE_BYTES: u64 = 1024 * 1024;

/// Runs the hub until Ctrl-C: opens the logs, listens, and enforces retention every minute.
pub async fn run(config: HubConfig) -> Result<(), HubError> {
    serve(config, print_connection, async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await
}

/// Where a running hub listens.
#[derive(Debug, Clone)]
pub struct Listening {
    pub amqp: SocketAddr,
    /// AMQP over TLS, when configured.
    pub amqps: Option<SocketAddr>,
    /// AMQP over WebSockets (`wss` when TLS is configured, else `ws`), when configured.
    pub websocket: Option<SocketAddr>,
    /// The Kafka endpoint (SASL_PLAINTEXT), when configured.
    pub kafka: Option<SocketAddr>,
    /// The certificate authority clients trust, when the hub made its certificate.
    pub ca_file: Option<PathBuf>,
    /// The admin endpoint (always on loopback), when configured.
    pub admin: Option<SocketAddr>,
    /// The token its requests need, when it is configured.
    pub admin_token: Option<String>,
    /// Where that token is written for the CLI (a hub with a data directory).
    pub admin_token_file: Option<PathBuf>,
    /// The local managed identity endpoint's token URL (`IDENTITY_ENDPOINT`), when configured.
    pub identity_endpoint: Option<String>,
}

/// What `hubhost hub` prints once it listens: where, and the connection string to use.
fn print_connection(config: &HubConfig, namespace: &Arc<Namespace>, local: Listening) {
    println!(
        "hubhost hub listening on amqp://{} (storage: {})",
        local.amqp,
        config
            .data_dir
            .as_ref()
            .map(|d| d.display().to_string())
            .unwrap_or_else(|| "memory".into())
    );
    println!(
        "connection string: Endpoint=sb://{}:{};SharedAccessKeyName={};SharedAccessKey=<key>;UseDevelopmentEmulator=true;",
        local.amqp.ip(),
        local.amqp.port(),
        namespace
            .keys
            .first()
            .map(|k| k.name.as_str())
            .unwrap_or("-")
    );
    if let Some(amqps) = local.amqps {
        println!("hubhost hub listening on amqps://{amqps}");
    }
    if let Some(websocket) = local.websocket {
        let scheme = if config.tls.is_some() { "wss" } else { "ws" };
        println!(
            "hubhost hub listening on {scheme}://{websocket}{}",
            websocket::PATH
        );
    }
    if let Some(kafka) = local.kafka {
        println!(
            "hubhost hub listening on Kafka {kafka} (SASL_PLAINTEXT, PLAIN: user $ConnectionString, password the connection string)"
        );
    }
    if let Some(ca) = &local.ca_file {
        println!(
            "certificate authority to trust: {} (Python: connection_verify=; OpenSSL: SSL_CERT_FILE=; Node: NODE_EXTRA_CA_CERTS=)",
            ca.display()
        );
    }
    if let Some(admin) = local.admin {
        // The token is a secret of the user's: it goes to their terminal (an in-memory hub has
        // no file to put it in), never to the log.
        match (&local.admin_token_file, &local.admin_token) {
            (Some(file), _) => println!("admin: http://{admin} (its token in {})", file.display()),
            (None, Some(token)) => println!("admin: http://{admin} (token: {token})"),
            (None, None) => println!("admin: http://{admin}"),
        }
    }
    if let (Some(endpoint), Some(identity)) = (&local.identity_endpoint, &config.local_identity) {
        // Like an in-memory hub's admin token: the user's terminal, never the log.
        println!(
            "managed identity: IDENTITY_ENDPOINT={endpoint} IDENTITY_HEADER={}",
            identity.header_secret()
        );
    }
}

/// What to say when the hub listens beyond loopback with the official emulator's key, which
/// anyone can read in the emulator's documentation. Pure.
pub fn public_key_warning(config: &HubConfig) -> Option<String> {
    let beyond_loopback = [Some(config.listen), config.kafka, config.websocket]
        .into_iter()
        .flatten()
        .chain(config.tls.as_ref().map(|t| t.listen))
        .find(|address| !address.ip().is_loopback())?;
    let public = config.keys.iter().find(|k| k.key == sas::EMULATOR_KEY)?;
    Some(format!(
        "the hub listens on {beyond_loopback} with the official emulator's publicly known key ({}): anyone who can reach this machine may send, read and manage its event hubs; give it a key of your own with --key name=key",
        public.name
    ))
}

/// Runs the hub until `shutdown` resolves; `on_listening` is told where it listens.
pub async fn serve(
    config: HubConfig,
    on_listening: impl FnOnce(&HubConfig, &Arc<Namespace>, Listening),
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), HubError> {
    if let Some(warning) = public_key_warning(&config) {
        tracing::warn!("{warning}");
    }
    // A socket per client and a file per open segment: as many descriptors as allowed.
    let open_files = connections::raise_open_files_limit();
    tracing::debug!(?open_files, "open files limit");
    let namespace = Arc::new(Namespace::open(&config)?);
    let listen = |address: SocketAddr, what: &str| {
        let failed = |source| HubError::Listen {
            address: format!("{address}{what}"),
            source,
        };
        let listener = wire::listen(address).map_err(failed)?;
        let local = listener.local_addr().map_err(failed)?;
        Ok::<_, HubError>((listener, local))
    };
    let (listener, local) = listen(config.listen, "")?;
    let mut listeners = vec![(listener, server::Transport::Tcp)];
    let (tls, ca_file) = match &config.tls {
        Some(settings) => {
            let identity = tls::Identity::load(&settings.certificate)?;
            (
                Some((identity.acceptor()?, settings.listen)),
                identity.ca_file,
            )
        }
        None => (None, None),
    };
    let amqps = match &tls {
        Some((acceptor, address)) => {
            let (listener, local) = listen(*address, " (amqps)")?;
            listeners.push((listener, server::Transport::Tls(acceptor.clone())));
            Some(local)
        }
        None => None,
    };
    let websocket = match config.websocket {
        Some(address) => {
            let (listener, local) = listen(address, " (websocket)")?;
            let tls = tls.as_ref().map(|(acceptor, _)| acceptor.clone());
            listeners.push((listener, server::Transport::WebSocket(tls)));
            Some(local)
        }
        None => None,
    };
    let kafka = match config.kafka {
        Some(address) => {
            let (listener, local) = listen(address, " (kafka)")?;
            let endpoint = kafka::Kafka::open(namespace.clone(), config.kafka_offsets_retention)
                .map_err(HubError::KafkaOffsets)?;
            Some((listener, local, endpoint))
        }
        None => None,
    };
    let admin_token = config.admin_token.clone().unwrap_or_else(admin::new_token);
    let admin = match config.admin_port {
        Some(port) => {
            // The token is on disk before the port is bound: a client that sees the port open
            // (the kernel accepts into the backlog from `bind`) finds the token it needs.
            let token_file = match &config.data_dir {
                Some(dir) => {
                    Some(admin::write_token(dir, &admin_token).map_err(HubError::AdminToken)?)
                }
                None => None,
            };
            let (admin_listener, admin_local) =
                admin::listen(port)
                    .await
                    .map_err(|source| HubError::Listen {
                        address: format!("127.0.0.1:{port} (admin)"),
                        source,
                    })?;
            Some((
                tokio::spawn(admin::serve(
                    admin_listener,
                    admin::AdminState::new(
                        namespace.clone(),
                        kafka.as_ref().map(|(_, _, endpoint)| endpoint.clone()),
                        &admin_token,
                    ),
                )),
                admin_local,
                token_file,
            ))
        }
        None => None,
    };
    let identity = match &config.local_identity {
        Some(identity) => {
            let port = config.identity_port.unwrap_or(0);
            let (listener, local) =
                admin::listen(port)
                    .await
                    .map_err(|source| HubError::Listen {
                        address: format!("127.0.0.1:{port} (managed identity)"),
                        source,
                    })?;
            let routes = identity.clone().router();
            Some((
                tokio::spawn(admin::serve_routes(
                    listener,
                    routes,
                    "managed identity",
                    |_, _| {},
                )),
                format!("http://{local}{}", local_identity::TOKEN_PATH),
            ))
        }
        None => None,
    };
    for hub in namespace.hubs() {
        tracing::info!(
            hub = %hub.name,
            partitions = hub.partitions.len(),
            consumer_groups = ?hub.consumer_groups(),
            "hub ready"
        );
    }
    on_listening(
        &config,
        &namespace,
        Listening {
            amqp: local,
            amqps,
            websocket,
            kafka: kafka.as_ref().map(|(_, local, _)| *local),
            ca_file,
            admin: admin.as_ref().map(|(_, a, _)| *a),
            admin_token: admin.as_ref().map(|_| admin_token.clone()),
            admin_token_file: admin.as_ref().and_then(|(_, _, file)| file.clone()),
            identity_endpoint: identity.as_ref().map(|(_, url)| url.clone()),
        },
    );
    let retention = {
        let namespace = namespace.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(60));
            loop {
                tick.tick().await;
                match namespace.enforce_retention() {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(events = n, "retention deleted old segments"),
                    Err(e) => tracing::warn!(error = %e, "retention failed"),
                }
            }
        })
    };
    // Every listener's connections share the slots: --max-connections bounds them together.
    let slots = connections::Slots::new(
        config.limits.max_connections,
        config.limits.max_unauthenticated_bytes,
    );
    let mut serving = tokio::task::JoinSet::new();
    for (listener, transport) in listeners {
        serving.spawn(server::serve(
            listener,
            transport,
            namespace.clone(),
            config.limits,
            slots.clone(),
        ));
    }
    if let Some((listener, _, endpoint)) = kafka {
        serving.spawn(kafka::serve(
            listener,
            endpoint,
            config.limits,
            slots.clone(),
        ));
    }
    tokio::select! {
        // The listeners serve until the hub stops; one ends only by a panic, passed on.
        Some(Err(panic)) = serving.join_next() => std::panic::resume_unwind(panic.into_panic()),
        _ = shutdown => tracing::info!("stopping"),
    }
    retention.abort();
    if let Some((task, _, _)) = admin {
        task.abort();
    }
    Ok(())
}

#[derive(Debug, thiserror::Error)]
pub enum HubError {
    #[error(transparent)]
    Log(#[from] LogError),
    #[error(
        "cannot listen on {address}: {source} (is another hub, the official emulator or a Kafka broker running? choose other ports with --port, --kafka-port, --tls-port, --websocket-port, or --no-kafka)"
    )]
    Listen {
        address: String,
        source: std::io::Error,
    },
    #[error("what the data directory remembers of added hubs cannot be read: {0}")]
    Additions(String),
    #[error("TLS: {0}")]
    Tls(#[from] tls::TlsError),
    #[error("the Kafka endpoint's committed offsets cannot be opened: {0}")]
    KafkaOffsets(std::io::Error),
    #[error("the admin token cannot be written to the data directory: {0}")]
    AdminToken(std::io::Error),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::namespace::tests::config;

    #[test]
    fn listening_beyond_loopback_with_the_public_key_is_warned_of() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = config(dir.path(), &["sensors:2"]);
        assert_eq!(public_key_warning(&config), None);
        config.listen = "0.0.0.0:5672".parse().unwrap();
        let warning = public_key_warning(&config).unwrap();
        assert!(
            warning.contains("0.0.0.0:5672") && warning.contains("--key"),
            "{warning}"
        );
        assert!(
            !warning.contains(sas::EMULATOR_KEY),
            "the key itself is not repeated"
        );
        config.keys = vec![sas::SharedAccessKey {
            name: "mine".into(),
            key: "a key of my own".into(),
            rights: sas::Rights::ALL,
        }];
        assert_eq!(public_key_warning(&config), None);
    }
}
