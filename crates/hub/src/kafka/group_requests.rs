//! The consumer-group APIs: FindCoordinator, JoinGroup (a group tied to the hubs it consumes),
//! SyncGroup, LeaveGroup (over `coordinator`), and OffsetCommit / OffsetFetch (over
//! `offsets`).

use super::*;

impl Kafka {
    pub(super) fn find_coordinator(
        session: &Session,
        r: FindCoordinatorRequest,
        version: i16,
    ) -> Outcome {
        let host = text(&session.local.ip().to_string());
        let port = session.local.port() as i32;
        // Groups only (key type 0): transactions are not served.
        let (code, message) = if r.key_type == 0 {
            (0, None)
        } else {
            (
                ResponseError::CoordinatorNotAvailable.code(),
                Some(text("transactions are not supported by this hub")),
            )
        };
        let mut response = FindCoordinatorResponse::default();
        if version < 4 {
            response = response
                .with_error_code(code)
                .with_error_message(if version >= 1 { message.clone() } else { None })
                .with_node_id(BrokerId(NODE_ID))
                .with_host(host.clone())
                .with_port(port);
        } else {
            response.coordinators = r
                .coordinator_keys
                .iter()
                .map(|key| {
                    find_coordinator_response::Coordinator::default()
                        .with_key(key.clone())
                        .with_node_id(BrokerId(NODE_ID))
                        .with_host(host.clone())
                        .with_port(port)
                        .with_error_code(code)
                        .with_error_message(message.clone())
                })
                .collect();
        }
        respond(&response, version)
    }
    pub(super) async fn join_group(
        &self,
        session: &Session,
        r: JoinGroupRequest,
        version: i16,
    ) -> Outcome {
        // A group is tied to the hubs it consumes: its members' subscriptions and its commits.
        // A client joins only when it may Listen on all of them, so that a client scoped to
        // one hub cannot take another hub's partitions from the group consuming it.
        let refused = |code: i16| {
            let response = JoinGroupResponse::default()
                .with_error_code(code)
                .with_generation_id(-1)
                .with_protocol_name((version < 7).then(|| text("")))
                .with_member_id(r.member_id.clone());
            respond(&response, version)
        };
        let subscribed =
            match subscribed_hubs(&r.protocol_type, r.protocols.iter().map(|p| &p.metadata)) {
                Ok(hubs) => hubs,
                Err(code) => return refused(code),
            };
        let access = Self::access(session);
        // The commits here; the live members' subscriptions in the group itself (`groups`).
        let mut allowed = access.rights.allows(Right::Listen);
        for hub in subscribed
            .iter()
            .chain(&self.offsets.hubs_of(&r.group_id.0))
        {
            allowed &= access.allows(hub, Right::Listen);
        }
        if !allowed {
            return refused(ResponseError::GroupAuthorizationFailed.code());
        }
        let scope = access.hub.clone();
        let request = JoinRequest {
            member_id: r.member_id.to_string(),
            client_id: if session.client_id.is_empty() {
                "consumer".into()
            } else {
                session.client_id.clone()
            },
            session_timeout_ms: r.session_timeout_ms.max(0) as u64,
            rebalance_timeout_ms: if version >= 1 {
                r.rebalance_timeout_ms.max(0) as u64
            } else {
                r.session_timeout_ms.max(0) as u64
            },
            protocol_type: r.protocol_type.to_string(),
            protocols: r
                .protocols
                .into_iter()
                .map(|p| (p.name.to_string(), p.metadata))
                .collect(),
            require_known_member_id: version >= 4,
            scope,
            // `subscribed_hubs` lowercased them.
            subscribed,
        };
        let response = match self
            .coordinator
            .join(&r.group_id.0, &session.principal, request)
            .await
        {
            JoinOutcome::Joined(j) => JoinGroupResponse::default()
                .with_generation_id(j.generation)
                .with_protocol_type((version >= 7).then(|| text(&j.protocol_type)))
                .with_protocol_name(Some(text(&j.protocol)))
                .with_leader(text(&j.leader))
                .with_member_id(text(&j.member_id))
                .with_members(
                    j.members
                        .into_iter()
                        .map(|(id, metadata)| {
                            join_group_response::JoinGroupResponseMember::default()
                                .with_member_id(text(&id))
                                .with_metadata(metadata)
                        })
                        .collect(),
                ),
            JoinOutcome::Failed { code, member_id } => JoinGroupResponse::default()
                .with_error_code(code)
                .with_generation_id(-1)
                .with_protocol_name((version < 7).then(|| text("")))
                .with_member_id(text(&member_id)),
        };
        respond(&response, version)
    }
    pub(super) async fn sync_group(&self, r: SyncGroupRequest, version: i16) -> Outcome {
        let assignments = r
            .assignments
            .into_iter()
            .map(|a| (a.member_id.to_string(), a.assignment))
            .collect();
        let response = match self
            .coordinator
            .sync(&r.group_id.0, &r.member_id, r.generation_id, assignments)
            .await
        {
            SyncOutcome::Assigned {
                protocol_type,
                protocol,
                assignment,
            } => SyncGroupResponse::default()
                .with_protocol_type((version >= 5).then(|| text(&protocol_type)))
                .with_protocol_name((version >= 5).then(|| text(&protocol)))
                .with_assignment(assignment),
            SyncOutcome::Failed(code) => SyncGroupResponse::default().with_error_code(code),
        };
        respond(&response, version)
    }
    pub(super) fn leave_group(&self, r: LeaveGroupRequest, version: i16) -> Outcome {
        let group = r.group_id.0.to_string();
        if version < 3 {
            let code = self.coordinator.leave(&group, &r.member_id);
            return respond(
                &LeaveGroupResponse::default().with_error_code(code),
                version,
            );
        }
        let members = r
            .members
            .into_iter()
            .map(|m| {
                leave_group_response::MemberResponse::default()
                    .with_error_code(self.coordinator.leave(&group, &m.member_id))
                    .with_member_id(m.member_id)
                    .with_group_instance_id(m.group_instance_id)
            })
            .collect();
        respond(
            &LeaveGroupResponse::default().with_members(members),
            version,
        )
    }
    pub(super) fn offset_commit(
        &self,
        session: &Session,
        r: OffsetCommitRequest,
        version: i16,
    ) -> Outcome {
        let group = r.group_id.0.to_string();
        let allowed =
            self.coordinator
                .may_commit(&group, &r.member_id, r.generation_id_or_member_epoch);
        let mut commits = Vec::new();
        let topics: Vec<_> = r
            .topics
            .into_iter()
            .map(|topic| {
                let name = topic.name.0.to_string();
                let hub = self.topic(session, &name, Some(Right::Listen));
                let partitions = topic
                    .partitions
                    .into_iter()
                    .map(|p| {
                        let code = match &hub {
                            Err(code) => *code,
                            Ok(_) if allowed != 0 => allowed,
                            Ok(hub)
                                if p.partition_index < 0
                                    || p.partition_index as usize >= hub.partitions.len() =>
                            {
                                ResponseError::UnknownTopicOrPartition.code()
                            }
                            Ok(_)
                                if p.committed_metadata
                                    .as_ref()
                                    .is_some_and(|m| m.len() > offsets::MAX_METADATA_BYTES) =>
                            {
                                ResponseError::OffsetMetadataTooLarge.code()
                            }
                            Ok(hub) => {
                                commits.push((
                                    hub.name.clone(),
                                    p.partition_index,
                                    offsets::Committed {
                                        offset: p.committed_offset,
                                        metadata: p.committed_metadata.map(|m| m.to_string()),
                                    },
                                ));
                                0
                            }
                        };
                        offset_commit_response::OffsetCommitResponsePartition::default()
                            .with_partition_index(p.partition_index)
                            .with_error_code(code)
                    })
                    .collect();
                offset_commit_response::OffsetCommitResponseTopic::default()
                    .with_name(TopicName(text(&name)))
                    .with_partitions(partitions)
            })
            .collect();
        let mut topics = topics;
        if !commits.is_empty()
            && let Err(e) = self.offsets.commit(&group, &session.principal, commits)
        {
            let code = match &e {
                offsets::CommitError::TooManyGroups => {
                    tracing::warn!(group, "Kafka offsets refused: {e}");
                    ResponseError::PolicyViolation.code()
                }
                offsets::CommitError::Io(_) => {
                    tracing::error!(group, "Kafka offsets not written: {e}");
                    ResponseError::KafkaStorageError.code()
                }
            };
            for t in &mut topics {
                for p in &mut t.partitions {
                    if p.error_code == 0 {
                        p.error_code = code;
                    }
                }
            }
        }
        respond(
            &OffsetCommitResponse::default().with_topics(topics),
            version,
        )
    }
    /// Committed positions for `topics` (every topic the group committed for when `None`):
    /// per topic, (partition, error code, offset or -1, metadata).
    pub(super) fn committed(
        &self,
        session: &Session,
        group: &str,
        topics: Option<Vec<(String, Vec<i32>)>>,
    ) -> Vec<(String, Vec<Position>)> {
        let topics = topics.unwrap_or_else(|| {
            self.offsets
                .all()
                .remove(group)
                .unwrap_or_default()
                .into_iter()
                .map(|(hub, parts)| (hub, parts.into_keys().collect()))
                .collect()
        });
        topics
            .into_iter()
            .map(|(name, partitions)| {
                let hub = self.topic(session, &name, Some(Right::Listen));
                let positions = partitions
                    .into_iter()
                    .map(|p| match &hub {
                        Err(code) => (p, *code, -1, None),
                        Ok(hub) => match self.offsets.committed(group, &hub.name, p) {
                            Some(c) => (p, 0, c.offset, c.metadata),
                            None => (p, 0, -1, None),
                        },
                    })
                    .collect();
                (name, positions)
            })
            .collect()
    }
    pub(super) fn offset_fetch(
        &self,
        session: &Session,
        r: OffsetFetchRequest,
        version: i16,
    ) -> Outcome {
        // OffsetFetch has two shapes of the same answer: one group (up to v7), several (v8).
        macro_rules! partitions {
            ($ty:ty, $positions:expr) => {
                $positions
                    .into_iter()
                    .map(|(p, code, offset, metadata): Position| {
                        <$ty>::default()
                            .with_partition_index(p)
                            .with_committed_offset(offset)
                            .with_committed_leader_epoch(-1)
                            .with_metadata(metadata.map(|m| text(&m)))
                            .with_error_code(code)
                    })
                    .collect()
            };
        }
        let named = |topics: Vec<(TopicName, Vec<i32>)>| {
            topics
                .into_iter()
                .map(|(name, parts)| (name.0.to_string(), parts))
                .collect::<Vec<_>>()
        };
        if version >= 8 {
            let groups = r
                .groups
                .into_iter()
                .map(|g| {
                    let topics = g.topics.map(|ts| {
                        named(
                            ts.into_iter()
                                .map(|t| (t.name, t.partition_indexes))
                                .collect(),
                        )
                    });
                    let topics = self
                        .committed(session, &g.group_id.0, topics)
                        .into_iter()
                        .map(|(name, positions)| {
                            offset_fetch_response::OffsetFetchResponseTopics::default()
                                .with_name(TopicName(text(&name)))
                                .with_partitions(partitions!(
                                    offset_fetch_response::OffsetFetchResponsePartitions,
                                    positions
                                ))
                        })
                        .collect();
                    offset_fetch_response::OffsetFetchResponseGroup::default()
                        .with_group_id(g.group_id)
                        .with_topics(topics)
                })
                .collect();
            return respond(&OffsetFetchResponse::default().with_groups(groups), version);
        }
        let topics = r.topics.map(|ts| {
            named(
                ts.into_iter()
                    .map(|t| (t.name, t.partition_indexes))
                    .collect(),
            )
        });
        let topics = self
            .committed(session, &r.group_id.0, topics)
            .into_iter()
            .map(|(name, positions)| {
                offset_fetch_response::OffsetFetchResponseTopic::default()
                    .with_name(TopicName(text(&name)))
                    .with_partitions(partitions!(
                        offset_fetch_response::OffsetFetchResponsePartition,
                        positions
                    ))
            })
            .collect();
        respond(&OffsetFetchResponse::default().with_topics(topics), version)
    }
}

/// A committed position as OffsetFetch reports it: partition, error code, offset (-1: none),
/// metadata.
pub(super) type Position = (i32, i16, i64, Option<String>);

/// The hubs a JoinGroup's consumer protocols subscribe to (lowercased), each protocol's
/// metadata being Kafka's `ConsumerProtocolSubscription`: a version, then the topics (an `i32`
/// count of `i16`-length strings) first in every version; what follows is not read. Read by
/// hand, not by the wire-format crate, whose decoder reserves memory for whatever count the
/// bytes declare (the fuzzer found a 12-byte subscription that asked for 52 GB). Another
/// protocol type names no hubs. Pure.
pub(super) fn subscribed_hubs<'a>(
    protocol_type: &str,
    metadata: impl IntoIterator<Item = &'a Bytes>,
) -> Result<Vec<String>, i16> {
    if protocol_type != "consumer" {
        return Ok(Vec::new());
    }
    let inconsistent = ResponseError::InconsistentGroupProtocol.code();
    let mut hubs = Vec::new();
    for bytes in metadata {
        let mut rest: &[u8] = bytes;
        let mut take = |n: usize| -> Result<&[u8], i16> {
            if rest.len() < n {
                return Err(inconsistent);
            }
            let (taken, left) = rest.split_at(n);
            rest = left;
            Ok(taken)
        };
        let version = i16::from_be_bytes(take(2)?.try_into().expect("2 bytes"));
        let count = i32::from_be_bytes(take(4)?.try_into().expect("4 bytes"));
        if version < 0 || count < -1 {
            return Err(inconsistent);
        }
        for _ in 0..count.max(0) {
            let len = i16::from_be_bytes(take(2)?.try_into().expect("2 bytes"));
            let name = take(usize::try_from(len).map_err(|_| inconsistent)?)?;
            let name = std::str::from_utf8(name).map_err(|_| inconsistent)?;
            hubs.push(name.to_ascii_lowercase());
        }
    }
    hubs.sort();
    hubs.dedup();
    Ok(hubs)
}

/// The group-describing APIs the admin clients use (`kafka-consumer-groups.sh --list` and
/// `--describe`, `Admin::listGroups`, `Admin::describeConsumerGroups`): ListGroups and
/// DescribeGroups. A client sees a group only when its credentials reach every hub the group
/// subscribes to or committed for, so a client scoped to one hub learns nothing of the groups
/// of another.
impl Kafka {
    fn group_visible(&self, session: &Session, group: &str, subscribed: &[String]) -> bool {
        let access = Self::access(session);
        let mut hubs = self.offsets.hubs_of(group);
        hubs.extend(subscribed.iter().cloned());
        if hubs.is_empty() {
            return access.hub.is_none();
        }
        hubs.iter().all(|hub| access.covers(hub))
    }

    pub(super) fn describe_groups(
        &self,
        session: &Session,
        r: DescribeGroupsRequest,
        version: i16,
    ) -> Outcome {
        let groups = r
            .groups
            .iter()
            .map(|id| {
                let described = describe_groups_response::DescribedGroup::default()
                    .with_group_id(id.clone())
                    // Not asked for, or not computed: Kafka's "unknown" value.
                    .with_authorized_operations(i32::MIN);
                let known = self.coordinator.describe(&id.0).or_else(|| {
                    // A group with commits but no member since the hub started: Empty.
                    (!self.offsets.hubs_of(&id.0).is_empty())
                        .then(coordinator::GroupDescription::empty)
                });
                let Some(group) = known else {
                    // Kafka's answer for a group it does not know: Dead, no error.
                    return described.with_group_state(text("Dead"));
                };
                if !self.group_visible(session, &id.0, &group.subscribed) {
                    return described
                        .with_error_code(ResponseError::GroupAuthorizationFailed.code());
                }
                described
                    .with_group_state(text(&group.state))
                    .with_protocol_type(text(&group.protocol_type))
                    .with_protocol_data(text(&group.protocol))
                    .with_members(
                        group
                            .members
                            .into_iter()
                            .map(|m| {
                                describe_groups_response::DescribedGroupMember::default()
                                    .with_member_id(text(&m.member_id))
                                    .with_client_id(text(&m.client_id))
                                    .with_client_host(text(&format!("/{}", session.local.ip())))
                                    .with_member_metadata(m.metadata)
                                    .with_member_assignment(m.assignment)
                            })
                            .collect(),
                    )
            })
            .collect();
        respond(
            &DescribeGroupsResponse::default().with_groups(groups),
            version,
        )
    }

    pub(super) fn list_groups(
        &self,
        session: &Session,
        r: ListGroupsRequest,
        version: i16,
    ) -> Outcome {
        let mut names: Vec<String> = self.offsets.all().into_keys().collect();
        names.extend(self.coordinator.views().into_iter().map(|(name, _)| name));
        names.sort();
        names.dedup();
        let wanted = |filter: &[StrBytes], value: &str| {
            filter.is_empty() || filter.iter().any(|f| f.eq_ignore_ascii_case(value))
        };
        let groups = names
            .into_iter()
            .filter_map(|name| {
                // A group with commits only (the names come from the commits and the
                // coordinator): Empty.
                let group = self
                    .coordinator
                    .describe(&name)
                    .unwrap_or_else(coordinator::GroupDescription::empty);
                if !self.group_visible(session, &name, &group.subscribed) {
                    return None;
                }
                let (state, protocol_type) = (group.state.as_str(), group.protocol_type.as_str());
                // Every group here is a classic one (KIP-848's groups are not served).
                if !wanted(&r.states_filter, state) || !wanted(&r.types_filter, "classic") {
                    return None;
                }
                Some(
                    list_groups_response::ListedGroup::default()
                        .with_group_id(GroupId(text(&name)))
                        .with_protocol_type(text(protocol_type))
                        .with_group_state(text(state))
                        .with_group_type(text("classic")),
                )
            })
            .collect();
        respond(&ListGroupsResponse::default().with_groups(groups), version)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_join_names_the_hubs_its_consumer_protocols_subscribe_to() {
        let subscription = |version: i16, topics: &[&str]| {
            let mut buf = BytesMut::new();
            buf.put_i16(version);
            ConsumerProtocolSubscription::default()
                .with_topics(
                    topics
                        .iter()
                        .map(|t| StrBytes::from(t.to_string()))
                        .collect(),
                )
                .encode(&mut buf, version)
                .unwrap();
            buf.freeze()
        };
        let range = subscription(1, &["Sensors", "alarms"]);
        let roundrobin = subscription(3, &["sensors"]);
        assert_eq!(
            subscribed_hubs("consumer", [&range, &roundrobin]),
            Ok(vec!["alarms".to_string(), "sensors".to_string()])
        );
        assert_eq!(subscribed_hubs("connect", [&range]), Ok(vec![]));
        // What the fuzzer found: a count of 1.6 billion topics in 12 bytes.
        let declares_too_many = Bytes::from_static(b"subscription");
        assert_eq!(
            subscribed_hubs("consumer", [&declares_too_many]),
            Err(ResponseError::InconsistentGroupProtocol.code())
        );
        let garbage = Bytes::from_static(&[0, 1, 0xff, 0xff, 0xff]);
        assert_eq!(
            subscribed_hubs("consumer", [&garbage]),
            Err(ResponseError::InconsistentGroupProtocol.code())
        );
    }
}
