//! What a client learns before and while it authenticates: the API versions served, the SASL
//! handshake and exchange, Metadata (before SASL: a refusal that says why), and the checks
//! every other API makes of the client's access.

use super::*;

/// The API versions the endpoint serves: what current clients (librdkafka 2, kafka-python,
/// the Java client 3) negotiate, below the versions that name topics by id.
pub(super) const SUPPORTED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 9),
    (ApiKey::Fetch, 4, 12),
    (ApiKey::ListOffsets, 1, 7),
    (ApiKey::Metadata, 0, 12),
    (ApiKey::OffsetCommit, 2, 8),
    (ApiKey::OffsetFetch, 1, 8),
    (ApiKey::FindCoordinator, 0, 4),
    (ApiKey::JoinGroup, 0, 9),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 5),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::DescribeGroups, 0, 5),
    (ApiKey::ListGroups, 0, 5),
    (ApiKey::SaslHandshake, 1, 1),
    (ApiKey::ApiVersions, 0, 3),
    (ApiKey::SaslAuthenticate, 0, 2),
    (ApiKey::InitProducerId, 0, 4),
];

pub(super) fn supported(key: ApiKey) -> Option<(i16, i16)> {
    SUPPORTED
        .iter()
        .find(|(k, _, _)| *k == key)
        .map(|(_, min, max)| (*min, *max))
}

/// A client that skipped SASL asked for metadata: every topic it named is answered with
/// `SASL_AUTHENTICATION_FAILED`, so that the client reports why it cannot produce or consume
/// (librdkafka: "Broker: SASL Authentication failed"); the open timeout closes the connection.
pub(super) fn unauthenticated(r: &MetadataRequest, version: i16) -> Outcome {
    let topics = r
        .topics
        .iter()
        .flatten()
        .map(|t| {
            metadata_response::MetadataResponseTopic::default()
                .with_name(t.name.clone())
                .with_error_code(ResponseError::SaslAuthenticationFailed.code())
        })
        .collect();
    tracing::warn!("Kafka metadata refused: {SASL_REQUIRED}");
    respond(&MetadataResponse::default().with_topics(topics), version)
}

impl Kafka {
    pub(super) fn api_versions(&self, version: i16) -> Outcome {
        let (_, max) = supported(ApiKey::ApiVersions).expect("served");
        let keys = SUPPORTED
            .iter()
            .map(|(k, min, max)| {
                api_versions_response::ApiVersion::default()
                    .with_api_key(*k as i16)
                    .with_min_version(*min)
                    .with_max_version(*max)
            })
            .collect();
        if version > max {
            // Answered in version 0, as brokers do, so the client can pick one it shares.
            return respond(
                &ApiVersionsResponse::default()
                    .with_error_code(ResponseError::UnsupportedVersion.code())
                    .with_api_keys(keys),
                0,
            );
        }
        respond(&ApiVersionsResponse::default().with_api_keys(keys), version)
    }
    pub(super) fn sasl_handshake(
        session: &mut Session,
        r: SaslHandshakeRequest,
        version: i16,
    ) -> Outcome {
        let mechanisms = sasl::MECHANISMS.iter().map(|m| text(m)).collect();
        let response = SaslHandshakeResponse::default().with_mechanisms(mechanisms);
        if sasl::MECHANISMS.contains(&r.mechanism.as_str()) {
            session.mechanism = Some(r.mechanism.to_string());
            respond(&response, version)
        } else {
            let mut outcome = respond(
                &response.with_error_code(ResponseError::UnsupportedSaslMechanism.code()),
                version,
            );
            outcome.close = Some(format!(
                "SASL mechanism {:?} is not served (PLAIN and OAUTHBEARER are)",
                r.mechanism.chars().take(40).collect::<String>()
            ));
            outcome
        }
    }
    pub(super) fn sasl_authenticate(
        &self,
        session: &mut Session,
        r: SaslAuthenticateRequest,
        version: i16,
    ) -> Outcome {
        let result = match session.mechanism.as_deref() {
            Some(sasl::PLAIN) => sasl::plain(&r.auth_bytes, &self.namespace.keys, now_secs()),
            Some(sasl::OAUTHBEARER) => sasl::oauthbearer(
                &r.auth_bytes,
                self.namespace.trusted_issuer.as_ref(),
                now_secs(),
            ),
            _ => {
                let mut outcome = respond(
                    &SaslAuthenticateResponse::default()
                        .with_error_code(ResponseError::IllegalSaslState.code())
                        .with_error_message(Some(text("SaslAuthenticate before SaslHandshake"))),
                    version,
                );
                outcome.close = Some("SaslAuthenticate before SaslHandshake".into());
                return outcome;
            }
        };
        match result {
            Ok(client) => {
                tracing::debug!(client = %session.client_id, access = ?client.access, "Kafka client authenticated");
                // A credential that expires (a token) bounds the session: the client is told
                // its lifetime, and re-authenticates before it ends (`handle`).
                let lifetime_ms = client
                    .expires_at
                    .map_or(0, |at| (at - now_secs()).max(0) * 1000);
                session.access = Some(client.access);
                session.principal = client.principal;
                session.expires_at = client.expires_at;
                respond(
                    &SaslAuthenticateResponse::default()
                        .with_session_lifetime_ms(if version >= 1 { lifetime_ms } else { 0 }),
                    version,
                )
            }
            Err(error) => {
                let message = format!("Authentication failed: {error}");
                let mut outcome = respond(
                    &SaslAuthenticateResponse::default()
                        .with_error_code(ResponseError::SaslAuthenticationFailed.code())
                        .with_error_message(Some(text(&message))),
                    version,
                );
                outcome.close = Some(message);
                outcome
            }
        }
    }
    pub(super) fn access(session: &Session) -> &Access {
        session
            .access
            .as_ref()
            .expect("authenticated before any other request")
    }
    /// The hub for a topic, or the error a client gets for it: the client's credentials must
    /// cover the hub, with `right` when one is needed (Send to produce, Listen to consume).
    pub(super) fn topic(
        &self,
        session: &Session,
        name: &str,
        right: Option<Right>,
    ) -> Result<Arc<crate::Hub>, i16> {
        let hub = self
            .namespace
            .hub(name)
            .ok_or(ResponseError::UnknownTopicOrPartition.code())?;
        let access = Self::access(session);
        let allowed = match right {
            Some(right) => access.allows(&hub.name, right),
            None => access.covers(&hub.name),
        };
        if !allowed {
            return Err(ResponseError::TopicAuthorizationFailed.code());
        }
        Ok(hub)
    }
    pub(super) fn broker(session: &Session) -> metadata_response::MetadataResponseBroker {
        metadata_response::MetadataResponseBroker::default()
            .with_node_id(BrokerId(NODE_ID))
            .with_host(text(&session.local.ip().to_string()))
            .with_port(session.local.port() as i32)
    }
    pub(super) fn metadata(&self, session: &Session, r: MetadataRequest, version: i16) -> Outcome {
        let names: Vec<String> = match &r.topics {
            Some(topics) => topics
                .iter()
                .filter_map(|t| t.name.as_ref().map(|n| n.0.to_string()))
                .collect(),
            // All topics: the hubs this client may see.
            None => self
                .namespace
                .hubs()
                .into_iter()
                .filter(|h| Self::access(session).covers(&h.name))
                .map(|h| h.name.clone())
                .collect(),
        };
        let topics = names
            .into_iter()
            .map(|name| {
                let topic = metadata_response::MetadataResponseTopic::default()
                    .with_name(Some(TopicName(text(&name))));
                match self.topic(session, &name, None) {
                    Err(code) => topic.with_error_code(code),
                    Ok(hub) => topic.with_partitions(
                        (0..hub.partitions.len() as i32)
                            .map(|p| {
                                metadata_response::MetadataResponsePartition::default()
                                    .with_partition_index(p)
                                    .with_leader_id(BrokerId(NODE_ID))
                                    .with_replica_nodes(vec![BrokerId(NODE_ID)])
                                    .with_isr_nodes(vec![BrokerId(NODE_ID)])
                            })
                            .collect(),
                    ),
                }
            })
            .collect();
        respond(
            &MetadataResponse::default()
                .with_brokers(vec![Self::broker(session)])
                .with_cluster_id((version >= 2).then(|| text("hubhost")))
                .with_controller_id(BrokerId(if version >= 1 { NODE_ID } else { -1 }))
                .with_topics(topics),
            version,
        )
    }
}
