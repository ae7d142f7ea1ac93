//! Kafka consumer groups (the classic protocol: JoinGroup, SyncGroup, Heartbeat, LeaveGroup), as
//! a pure state machine: every call takes the time, nothing here waits or does I/O. A request
//! that must wait (a join until every member has rejoined, a follower's sync until the leader has
//! sent the assignments) gets `Reply::Wait`, and is answered later by an `Effect` that a later
//! call or `tick` returns; `kafka::coordinator` turns those into responses.
//!
//! One group's life: the first join opens a rebalance; it completes once every known member has
//! (re)joined, or at the rebalance deadline without the ones that did not; the leader (the first
//! member, kept while it stays) gets every member's subscription and sends the assignments in its
//! sync; heartbeats keep members in and tell them when to rejoin; a member not heard from within
//! its session timeout is removed, which opens a rebalance for the others.

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;
use kafka_protocol::error::ResponseError;

/// A Kafka error code (`ResponseError::code()`); 0 is success.
pub type Code = i16;

const NONE: Code = 0;

/// How long a member id handed out with `MEMBER_ID_REQUIRED` waits for the join that uses it.
const PENDING_ID_MS: u64 = 60_000;
/// The most members a group holds (Kafka's `group.max.size`), and member ids waiting for their
/// join: what a client can make a group hold.
pub const MAX_MEMBERS: usize = 1000;
/// The longest group id or member id a group takes (Kafka sets none; member ids of 1 MiB were
/// held for every join): longer ones are refused with `INVALID_GROUP_ID` / `INVALID_REQUEST`.
pub const MAX_ID_BYTES: usize = 255;
/// The most bytes of protocol metadata (subscriptions) one member's join may make the group
/// hold; a consumer's subscription is a few dozen bytes per topic.
pub const MAX_MEMBER_METADATA_BYTES: usize = 64 * 1024;
/// The most bytes of assignments one sync may make the group hold.
pub const MAX_ASSIGNMENT_BYTES: usize = 1024 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
}

/// A join as the client sent it.
#[derive(Debug, Clone)]
pub struct JoinRequest {
    /// Empty for a first join.
    pub member_id: String,
    pub client_id: String,
    pub session_timeout_ms: u64,
    pub rebalance_timeout_ms: u64,
    pub protocol_type: String,
    /// (protocol name, the member's metadata for it), in the member's order of preference.
    pub protocols: Vec<(String, Bytes)>,
    /// JoinGroup v4 and later: a first join gets a member id and `MEMBER_ID_REQUIRED`, and joins
    /// again with it.
    pub require_known_member_id: bool,
    /// What the member's credentials reach: the one hub (lowercased) of a scoped connection
    /// string or token, or `None` for every hub.
    pub scope: Option<String>,
    /// The hubs (lowercased) its subscription names.
    pub subscribed: Vec<String>,
}

/// Whether credentials reaching `scope` reach every one of `hubs`.
fn reaches(scope: &Option<String>, hubs: &[String]) -> bool {
    scope
        .as_deref()
        .is_none_or(|only| hubs.iter().all(|hub| hub == only))
}

/// A completed join, as one member's response carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Joined {
    pub generation: i32,
    pub protocol_type: String,
    pub protocol: String,
    pub leader: String,
    pub member_id: String,
    /// Every member's id and metadata for the chosen protocol: for the leader only.
    pub members: Vec<(String, Bytes)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JoinOutcome {
    Joined(Joined),
    /// An error, with the member id to report (the new one for `MEMBER_ID_REQUIRED`).
    Failed {
        code: Code,
        member_id: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SyncOutcome {
    /// The member's assignment (empty when the leader gave it none).
    Assigned {
        protocol_type: String,
        protocol: String,
        assignment: Bytes,
    },
    Failed(Code),
}

/// One member, as DescribeGroups (and so the admin clients) show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribedMember {
    pub member_id: String,
    pub client_id: String,
    /// Its metadata for the group's protocol (a consumer's subscription).
    pub metadata: Bytes,
    /// What the leader assigned it.
    pub assignment: Bytes,
}

/// An answer now, or later through an `Effect`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply<T> {
    Now(T),
    Wait,
}

/// An answer to a request that waited.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    Join {
        member_id: String,
        outcome: JoinOutcome,
    },
    Sync {
        member_id: String,
        outcome: SyncOutcome,
    },
}

#[derive(Debug, Clone)]
struct Member {
    client_id: String,
    session_timeout_ms: u64,
    rebalance_timeout_ms: u64,
    protocols: Vec<(String, Bytes)>,
    scope: Option<String>,
    subscribed: Vec<String>,
    last_heard_ms: u64,
    /// Its join waits for the rebalance to complete.
    joining: bool,
    /// Its sync waits for the leader's.
    syncing: bool,
}

/// One consumer group.
#[derive(Debug, Clone)]
pub struct Group {
    state: State,
    generation: i32,
    protocol_type: Option<String>,
    protocol: Option<String>,
    leader: Option<String>,
    members: BTreeMap<String, Member>,
    /// Member ids handed out with `MEMBER_ID_REQUIRED`, until when they may join.
    pending_ids: HashMap<String, u64>,
    rebalance_deadline_ms: u64,
    assignments: HashMap<String, Bytes>,
}

impl Default for Group {
    fn default() -> Self {
        Group {
            state: State::Empty,
            generation: 0,
            protocol_type: None,
            protocol: None,
            leader: None,
            members: BTreeMap::new(),
            pending_ids: HashMap::new(),
            rebalance_deadline_ms: 0,
            assignments: HashMap::new(),
        }
    }
}

fn code(error: ResponseError) -> Code {
    error.code()
}

impl Group {
    pub fn state(&self) -> State {
        self.state
    }

    pub fn generation(&self) -> i32 {
        self.generation
    }

    /// Member ids, in order.
    pub fn members(&self) -> Vec<String> {
        self.members.keys().cloned().collect()
    }

    pub fn has_members(&self) -> bool {
        !self.members.is_empty()
    }

    pub fn protocol(&self) -> Option<&str> {
        self.protocol.as_deref()
    }

    /// The protocol type its members joined with (`consumer` for consumer groups).
    pub fn protocol_type(&self) -> Option<&str> {
        self.protocol_type.as_deref()
    }

    /// The hubs (lowercased) its members' subscriptions name.
    pub fn subscribed_hubs(&self) -> Vec<String> {
        let mut hubs: Vec<String> = self
            .members
            .values()
            .flat_map(|m| m.subscribed.iter().cloned())
            .collect();
        hubs.sort();
        hubs.dedup();
        hubs
    }

    /// Each member as DescribeGroups gives it: its metadata for the group's protocol, and the
    /// assignment the leader gave it (empty before the first sync).
    pub fn described_members(&self) -> Vec<DescribedMember> {
        self.members
            .iter()
            .map(|(id, m)| DescribedMember {
                member_id: id.clone(),
                client_id: m.client_id.clone(),
                metadata: self
                    .protocol
                    .as_deref()
                    .and_then(|chosen| m.protocols.iter().find(|(name, _)| name == chosen))
                    .map(|(_, metadata)| metadata.clone())
                    .unwrap_or_default(),
                assignment: self.assignments.get(id).cloned().unwrap_or_default(),
            })
            .collect()
    }

    /// Whether the group holds nothing worth keeping: no member, no member id handed out, no
    /// rebalance under way. The coordinator forgets such a group (its commits are kept apart).
    pub fn is_idle(&self) -> bool {
        self.state == State::Empty && self.members.is_empty() && self.pending_ids.is_empty()
    }

    /// A join. `fresh_id` is the member id to hand out if the request has none.
    pub fn join(
        &mut self,
        request: JoinRequest,
        fresh_id: String,
        now: u64,
    ) -> (Reply<JoinOutcome>, Vec<Effect>) {
        let failed = |code, member_id: &str| {
            (
                Reply::Now(JoinOutcome::Failed {
                    code,
                    member_id: member_id.to_string(),
                }),
                Vec::new(),
            )
        };
        let metadata_bytes: usize = request
            .protocols
            .iter()
            .map(|(name, metadata)| name.len() + metadata.len())
            .sum();
        if request.member_id.len() > MAX_ID_BYTES
            || request.protocol_type.len() > MAX_ID_BYTES
            || metadata_bytes > MAX_MEMBER_METADATA_BYTES
        {
            return failed(code(ResponseError::InvalidRequest), "");
        }
        if request.protocol_type.is_empty() || request.protocols.is_empty() {
            return failed(
                code(ResponseError::InconsistentGroupProtocol),
                &request.member_id,
            );
        }
        if let Some(existing) = &self.protocol_type
            && !self.members.is_empty()
            && *existing != request.protocol_type
        {
            return failed(
                code(ResponseError::InconsistentGroupProtocol),
                &request.member_id,
            );
        }
        // Every other member must support one of this member's protocols.
        let supported = |name: &str| {
            self.members
                .iter()
                .filter(|(id, _)| **id != request.member_id)
                .all(|(_, m)| m.protocols.iter().any(|(p, _)| p == name))
        };
        if !request.protocols.iter().any(|(p, _)| supported(p)) {
            return failed(
                code(ResponseError::InconsistentGroupProtocol),
                &request.member_id,
            );
        }
        // A group is tied to the hubs its members consume, from its first member on: every
        // member's credentials must reach every hub any member subscribes to, so that a client
        // scoped to one hub neither leads a group consuming another (and sees, and assigns, its
        // partitions) nor joins one.
        let tied = self
            .members
            .iter()
            .filter(|(id, _)| **id != request.member_id)
            .all(|(_, m)| {
                reaches(&request.scope, &m.subscribed) && reaches(&m.scope, &request.subscribed)
            });
        if !tied {
            return failed(
                code(ResponseError::GroupAuthorizationFailed),
                &request.member_id,
            );
        }
        let full = self.members.len() + self.pending_ids.len() >= MAX_MEMBERS;
        if full && !self.members.contains_key(&request.member_id) {
            let pending = self.pending_ids.contains_key(&request.member_id);
            if !pending || self.members.len() >= MAX_MEMBERS {
                return failed(code(ResponseError::GroupMaxSizeReached), &request.member_id);
            }
        }
        let member_id = if request.member_id.is_empty() {
            if request.require_known_member_id {
                self.pending_ids
                    .insert(fresh_id.clone(), now + PENDING_ID_MS);
                return failed(code(ResponseError::MemberIdRequired), &fresh_id);
            }
            fresh_id
        } else {
            let known = self.members.contains_key(&request.member_id)
                || self.pending_ids.remove(&request.member_id).is_some();
            if !known {
                return failed(code(ResponseError::UnknownMemberId), &request.member_id);
            }
            request.member_id.clone()
        };
        let changed = match self.members.get(&member_id) {
            Some(m) => m.protocols != request.protocols,
            None => true,
        };
        self.members.insert(
            member_id.clone(),
            Member {
                client_id: request.client_id,
                session_timeout_ms: request.session_timeout_ms,
                rebalance_timeout_ms: request.rebalance_timeout_ms,
                protocols: request.protocols,
                scope: request.scope,
                subscribed: request.subscribed,
                last_heard_ms: now,
                joining: true,
                syncing: false,
            },
        );
        self.protocol_type = Some(request.protocol_type);
        let mut effects = Vec::new();
        match self.state {
            State::PreparingRebalance => {}
            State::Stable if !changed && self.leader.as_deref() != Some(member_id.as_str()) => {
                // A follower rejoining with what it had: it gets the current generation again.
                let member = self.members.get_mut(&member_id).expect("just inserted");
                member.joining = false;
                return (
                    Reply::Now(JoinOutcome::Joined(self.joined(&member_id))),
                    effects,
                );
            }
            _ => effects.extend(self.prepare_rebalance(now)),
        }
        effects.extend(self.try_complete_join());
        // The joining member's own answer, if the rebalance completed now, is among the effects.
        match take_join(&mut effects, &member_id) {
            Some(outcome) => (Reply::Now(outcome), effects),
            None => (Reply::Wait, effects),
        }
    }

    /// A sync: the leader's carries every member's assignment.
    pub fn sync(
        &mut self,
        member_id: &str,
        generation: i32,
        assignments: Vec<(String, Bytes)>,
        now: u64,
    ) -> (Reply<SyncOutcome>, Vec<Effect>) {
        let assignment_bytes: usize = assignments.iter().map(|(id, a)| id.len() + a.len()).sum();
        if assignment_bytes > MAX_ASSIGNMENT_BYTES {
            return (
                Reply::Now(SyncOutcome::Failed(code(ResponseError::InvalidRequest))),
                Vec::new(),
            );
        }
        let Some(member) = self.members.get_mut(member_id) else {
            return (
                Reply::Now(SyncOutcome::Failed(code(ResponseError::UnknownMemberId))),
                Vec::new(),
            );
        };
        member.last_heard_ms = now;
        if generation != self.generation {
            return (
                Reply::Now(SyncOutcome::Failed(code(ResponseError::IllegalGeneration))),
                Vec::new(),
            );
        }
        match self.state {
            State::PreparingRebalance | State::Empty => (
                Reply::Now(SyncOutcome::Failed(code(
                    ResponseError::RebalanceInProgress,
                ))),
                Vec::new(),
            ),
            State::Stable => (Reply::Now(self.assigned(member_id)), Vec::new()),
            State::CompletingRebalance => {
                if self.leader.as_deref() == Some(member_id) {
                    self.assignments = assignments.into_iter().collect();
                    self.state = State::Stable;
                    let mut effects = Vec::new();
                    let waiting: Vec<String> = self
                        .members
                        .iter()
                        .filter(|(id, m)| m.syncing && id.as_str() != member_id)
                        .map(|(id, _)| id.clone())
                        .collect();
                    for id in waiting {
                        self.members.get_mut(&id).expect("member").syncing = false;
                        effects.push(Effect::Sync {
                            outcome: self.assigned(&id),
                            member_id: id,
                        });
                    }
                    (Reply::Now(self.assigned(member_id)), effects)
                } else {
                    member.syncing = true;
                    (Reply::Wait, Vec::new())
                }
            }
        }
    }

    /// A heartbeat: 0, or the error telling the member what to do.
    pub fn heartbeat(&mut self, member_id: &str, generation: i32, now: u64) -> Code {
        let Some(member) = self.members.get_mut(member_id) else {
            return code(ResponseError::UnknownMemberId);
        };
        member.last_heard_ms = now;
        match self.state {
            State::PreparingRebalance => code(ResponseError::RebalanceInProgress),
            _ if generation != self.generation => code(ResponseError::IllegalGeneration),
            _ => NONE,
        }
    }

    /// A member leaves; the others rebalance.
    pub fn leave(&mut self, member_id: &str, now: u64) -> (Code, Vec<Effect>) {
        if self.members.remove(member_id).is_none() {
            return (code(ResponseError::UnknownMemberId), Vec::new());
        }
        (NONE, self.after_removal(now))
    }

    /// Whether a commit from this member at this generation may land: a member of the current
    /// generation, or (generation -1, no member id) a consumer that assigns itself partitions
    /// while no group uses the id. As in Kafka's coordinator, a member may still commit while
    /// the group prepares a rebalance (it holds its partitions until it rejoins, and hears of
    /// the rebalance from its next heartbeat), but not between the joins and the assignment;
    /// and a commit counts as a sign of life.
    pub fn may_commit(&mut self, member_id: &str, generation: i32, now: u64) -> Code {
        if generation < 0 && member_id.is_empty() {
            return if self.members.is_empty() {
                NONE
            } else {
                code(ResponseError::UnknownMemberId)
            };
        }
        let Some(member) = self.members.get_mut(member_id) else {
            return code(ResponseError::UnknownMemberId);
        };
        if generation != self.generation {
            return code(ResponseError::IllegalGeneration);
        }
        member.last_heard_ms = now;
        if self.state == State::CompletingRebalance {
            return code(ResponseError::RebalanceInProgress);
        }
        NONE
    }

    /// Time passing: members not heard from within their session timeout are removed, and a
    /// rebalance past its deadline completes without the members that did not rejoin.
    pub fn tick(&mut self, now: u64) -> Vec<Effect> {
        self.pending_ids.retain(|_, until| *until > now);
        let expired: Vec<String> = self
            .members
            .iter()
            .filter(|(_, m)| !m.joining && m.last_heard_ms + m.session_timeout_ms < now)
            .map(|(id, _)| id.clone())
            .collect();
        let mut effects = Vec::new();
        if !expired.is_empty() {
            for id in &expired {
                self.members.remove(id);
            }
            effects.extend(self.after_removal(now));
        }
        if self.state == State::PreparingRebalance && now >= self.rebalance_deadline_ms {
            self.members.retain(|_, m| m.joining);
            effects.extend(self.try_complete_join());
        }
        effects
    }

    fn after_removal(&mut self, now: u64) -> Vec<Effect> {
        let mut effects = Vec::new();
        if self.state != State::PreparingRebalance {
            effects.extend(self.prepare_rebalance(now));
        }
        effects.extend(self.try_complete_join());
        effects
    }

    /// Opens a rebalance: members waiting in a sync are told to rejoin.
    fn prepare_rebalance(&mut self, now: u64) -> Vec<Effect> {
        self.state = State::PreparingRebalance;
        let longest = self
            .members
            .values()
            .map(|m| m.rebalance_timeout_ms)
            .max()
            .unwrap_or(0);
        self.rebalance_deadline_ms = now + longest;
        self.assignments.clear();
        let mut effects = Vec::new();
        for (id, member) in self.members.iter_mut() {
            if member.syncing {
                member.syncing = false;
                effects.push(Effect::Sync {
                    member_id: id.clone(),
                    outcome: SyncOutcome::Failed(code(ResponseError::RebalanceInProgress)),
                });
            }
        }
        effects
    }

    /// Completes the rebalance once every member has rejoined: a new generation, a protocol
    /// every member supports, the leader kept if it stayed.
    fn try_complete_join(&mut self) -> Vec<Effect> {
        if self.state != State::PreparingRebalance || self.members.values().any(|m| !m.joining) {
            return Vec::new();
        }
        self.generation += 1;
        if self.members.is_empty() {
            self.state = State::Empty;
            self.leader = None;
            self.protocol = None;
            return Vec::new();
        }
        if !self
            .leader
            .as_ref()
            .is_some_and(|l| self.members.contains_key(l))
        {
            self.leader = self.members.keys().next().cloned();
        }
        let leader = self.leader.clone().expect("a member leads");
        // The leader's most preferred protocol that every member supports (checked at join).
        self.protocol = self.members[&leader]
            .protocols
            .iter()
            .map(|(p, _)| p.clone())
            .find(|p| {
                self.members
                    .values()
                    .all(|m| m.protocols.iter().any(|(q, _)| q == p))
            });
        self.state = State::CompletingRebalance;
        let ids: Vec<String> = self.members.keys().cloned().collect();
        let mut effects = Vec::new();
        for id in ids {
            self.members.get_mut(&id).expect("member").joining = false;
            effects.push(Effect::Join {
                outcome: JoinOutcome::Joined(self.joined(&id)),
                member_id: id,
            });
        }
        effects
    }

    fn joined(&self, member_id: &str) -> Joined {
        let protocol = self.protocol.clone().unwrap_or_default();
        let leader = self.leader.clone().unwrap_or_default();
        let members = if leader == member_id {
            self.members
                .iter()
                .map(|(id, m)| {
                    let metadata = m
                        .protocols
                        .iter()
                        .find(|(p, _)| *p == protocol)
                        .map(|(_, meta)| meta.clone())
                        .unwrap_or_default();
                    (id.clone(), metadata)
                })
                .collect()
        } else {
            Vec::new()
        };
        Joined {
            generation: self.generation,
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            protocol,
            leader,
            member_id: member_id.to_string(),
            members,
        }
    }

    fn assigned(&self, member_id: &str) -> SyncOutcome {
        SyncOutcome::Assigned {
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            protocol: self.protocol.clone().unwrap_or_default(),
            assignment: self.assignments.get(member_id).cloned().unwrap_or_default(),
        }
    }
}

fn take_join(effects: &mut Vec<Effect>, member_id: &str) -> Option<JoinOutcome> {
    let at = effects
        .iter()
        .position(|e| matches!(e, Effect::Join { member_id: m, .. } if m == member_id))?;
    match effects.remove(at) {
        Effect::Join { outcome, .. } => Some(outcome),
        Effect::Sync { .. } => unreachable!("found a join"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(member_id: &str) -> JoinRequest {
        JoinRequest {
            member_id: member_id.into(),
            client_id: "test".into(),
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 30_000,
            protocol_type: "consumer".into(),
            protocols: vec![("range".into(), Bytes::from_static(b"sub"))],
            require_known_member_id: false,
            scope: None,
            subscribed: vec!["sensors".into()],
        }
    }

    fn scoped(member_id: &str, scope: Option<&str>, subscribed: &[&str]) -> JoinRequest {
        JoinRequest {
            scope: scope.map(str::to_string),
            subscribed: subscribed.iter().map(|h| h.to_string()).collect(),
            ..request(member_id)
        }
    }

    fn refused_with(reply: &Reply<JoinOutcome>, error: ResponseError) -> bool {
        matches!(reply, Reply::Now(JoinOutcome::Failed { code, .. }) if *code == error.code())
    }

    #[test]
    fn a_group_is_tied_to_its_members_hubs_from_its_first_member() {
        // A client scoped to alarms opens the group first: nobody may bring sensors into it,
        // so it never leads (or sees) a sensors consumer.
        let mut group = Group::default();
        joined(
            group
                .join(scoped("", Some("alarms"), &["alarms"]), "a".into(), 0)
                .0,
        );
        let (reply, _) = group.join(scoped("", None, &["sensors"]), "v".into(), 1);
        assert!(refused_with(
            &reply,
            ResponseError::GroupAuthorizationFailed
        ));
        // A namespace-wide member consuming alarms is welcome.
        let (reply, _) = group.join(scoped("", None, &["alarms"]), "w".into(), 2);
        assert!(!refused_with(
            &reply,
            ResponseError::GroupAuthorizationFailed
        ));

        // The other way round: a group consuming sensors takes no member scoped to alarms.
        let mut group = Group::default();
        joined(group.join(scoped("", None, &["sensors"]), "v".into(), 0).0);
        let (reply, _) = group.join(scoped("", Some("alarms"), &["alarms"]), "a".into(), 1);
        assert!(refused_with(
            &reply,
            ResponseError::GroupAuthorizationFailed
        ));
        // Once its members are gone, the group is free again.
        group.leave("v", 2);
        let (reply, _) = group.join(scoped("", Some("alarms"), &["alarms"]), "a".into(), 3);
        assert!(!refused_with(
            &reply,
            ResponseError::GroupAuthorizationFailed
        ));
    }

    fn joined(reply: Reply<JoinOutcome>) -> Joined {
        match reply {
            Reply::Now(JoinOutcome::Joined(j)) => j,
            other => panic!("not joined: {other:?}"),
        }
    }

    #[test]
    fn what_a_member_may_make_a_group_hold_is_bounded() {
        let refused = |reply: Reply<JoinOutcome>| matches!(reply, Reply::Now(JoinOutcome::Failed { code, .. }) if code == ResponseError::InvalidRequest.code());
        let mut group = Group::default();
        let long_id = "m".repeat(MAX_ID_BYTES + 1);
        assert!(refused(group.join(request(&long_id), "a".into(), 0).0));
        let mut large = request("");
        large.protocols = vec![(
            "range".into(),
            Bytes::from(vec![0u8; MAX_MEMBER_METADATA_BYTES + 1]),
        )];
        assert!(refused(group.join(large, "a".into(), 0).0));
        assert!(group.is_idle(), "nothing is held for a refused join");

        joined(group.join(request(""), "a".into(), 0).0);
        let huge = vec![("a".into(), Bytes::from(vec![0u8; MAX_ASSIGNMENT_BYTES + 1]))];
        assert!(matches!(
            group.sync("a", 1, huge, 1).0,
            Reply::Now(SyncOutcome::Failed(code)) if code == ResponseError::InvalidRequest.code()
        ));
        assert!(!group.is_idle());
        assert_eq!(group.leave("a", 2).0, NONE);
        group.tick(3);
        assert!(
            group.is_idle(),
            "a group its last member left holds nothing"
        );
    }

    #[test]
    fn a_first_member_joins_leads_and_syncs_alone() {
        let mut group = Group::default();
        let (reply, effects) = group.join(request(""), "a".into(), 0);
        let j = joined(reply);
        assert!(effects.is_empty());
        assert_eq!(
            (j.generation, j.leader.as_str(), j.member_id.as_str()),
            (1, "a", "a")
        );
        assert_eq!(j.members.len(), 1);
        let (reply, _) = group.sync("a", 1, vec![("a".into(), Bytes::from_static(b"p0-15"))], 1);
        assert!(
            matches!(reply, Reply::Now(SyncOutcome::Assigned { assignment, .. }) if assignment == "p0-15")
        );
        assert_eq!(group.state(), State::Stable);
        assert_eq!(group.heartbeat("a", 1, 2), NONE);
    }

    #[test]
    fn v4_joins_get_a_member_id_first() {
        let mut group = Group::default();
        let mut first = request("");
        first.require_known_member_id = true;
        let (reply, _) = group.join(first, "m-1".into(), 0);
        assert_eq!(
            reply,
            Reply::Now(JoinOutcome::Failed {
                code: ResponseError::MemberIdRequired.code(),
                member_id: "m-1".into()
            })
        );
        assert_eq!(
            joined(group.join(request("m-1"), "unused".into(), 1).0).member_id,
            "m-1"
        );
        // An id the group never handed out is refused.
        let (reply, _) = group.join(request("forged"), "x".into(), 2);
        assert!(
            matches!(reply, Reply::Now(JoinOutcome::Failed { code, .. }) if code == ResponseError::UnknownMemberId.code())
        );
    }

    /// Two members: the second join opens a rebalance; the first learns it from its heartbeat,
    /// rejoins, and both get generation 2 with the first still leading; the follower's sync waits
    /// for the leader's.
    #[test]
    fn a_second_member_rebalances_the_group() {
        let mut group = Group::default();
        joined(group.join(request(""), "a".into(), 0).0);
        group.sync("a", 1, vec![], 0);
        let (reply, effects) = group.join(request(""), "b".into(), 100);
        assert_eq!(reply, Reply::Wait);
        assert!(effects.is_empty());
        assert_eq!(
            group.heartbeat("a", 1, 200),
            ResponseError::RebalanceInProgress.code()
        );
        let (reply, effects) = group.join(request("a"), "unused".into(), 300);
        let leader = joined(reply);
        assert_eq!((leader.generation, leader.leader.as_str()), (2, "a"));
        assert_eq!(leader.members.len(), 2);
        let follower = match &effects[..] {
            [
                Effect::Join {
                    member_id,
                    outcome: JoinOutcome::Joined(j),
                },
            ] if member_id == "b" => j.clone(),
            other => panic!("{other:?}"),
        };
        assert!(follower.members.is_empty());
        assert_eq!(group.sync("b", 2, vec![], 400).0, Reply::Wait);
        let assignments = vec![
            ("a".to_string(), Bytes::from_static(b"0-7")),
            ("b".to_string(), Bytes::from_static(b"8-15")),
        ];
        let (reply, effects) = group.sync("a", 2, assignments, 500);
        assert!(
            matches!(reply, Reply::Now(SyncOutcome::Assigned { assignment, .. }) if assignment == "0-7")
        );
        assert!(
            matches!(&effects[..], [Effect::Sync { member_id, outcome: SyncOutcome::Assigned { assignment, .. } }] if member_id == "b" && assignment == "8-15")
        );
        assert_eq!(group.may_commit("b", 2, 600), NONE);
        assert_eq!(
            group.may_commit("b", 1, 600),
            ResponseError::IllegalGeneration.code()
        );
    }

    /// As in Kafka's coordinator: a member commits while the group prepares a rebalance (it
    /// still holds its partitions), is told to wait between the joins and the assignment, and
    /// commits at the new generation once assigned. A member that only commits stays alive.
    #[test]
    fn a_member_commits_while_a_rebalance_is_prepared_but_not_before_its_assignment() {
        let mut group = Group::default();
        joined(group.join(request(""), "a".into(), 0).0);
        group.sync("a", 1, vec![], 5);
        assert_eq!(group.state(), State::Stable);
        for t in (1_000..=30_000).step_by(1_000) {
            assert_eq!(group.may_commit("a", 1, t), NONE);
            assert!(group.tick(t).is_empty(), "commits keep a alive at {t}");
        }
        group.join(request(""), "b".into(), 30_010);
        assert_eq!(group.state(), State::PreparingRebalance);
        assert_eq!(group.may_commit("a", 1, 30_020), NONE);
        group.join(request("a"), "-".into(), 30_030);
        assert_eq!(group.state(), State::CompletingRebalance);
        assert_eq!(
            group.may_commit("a", 1, 30_040),
            ResponseError::IllegalGeneration.code()
        );
        assert_eq!(
            group.may_commit("a", 2, 30_040),
            ResponseError::RebalanceInProgress.code()
        );
        group.sync("b", 2, vec![], 30_050);
        group.sync("a", 2, vec![], 30_050);
        assert_eq!(group.state(), State::Stable);
        assert_eq!(group.may_commit("b", 2, 30_060), NONE);
    }

    /// A member that stops heartbeating is removed after its session timeout; the survivor is
    /// told to rejoin and gets the next generation alone.
    #[test]
    fn a_silent_member_expires_and_the_group_rebalances() {
        let mut group = Group::default();
        joined(group.join(request(""), "a".into(), 0).0);
        group.join(request(""), "b".into(), 10);
        group.join(request("a"), "-".into(), 20);
        group.sync("b", 2, vec![], 30);
        group.sync("a", 2, vec![], 30);
        assert_eq!(group.state(), State::Stable);
        // b heartbeats; a goes silent (kill -9).
        for t in (1_000..=10_000).step_by(1_000) {
            assert_eq!(group.heartbeat("b", 2, t), NONE);
            assert!(group.tick(t).is_empty());
        }
        group.heartbeat("b", 2, 10_030);
        let effects = group.tick(10_031);
        assert!(effects.is_empty());
        assert_eq!(group.members(), vec!["b".to_string()]);
        assert_eq!(
            group.heartbeat("b", 2, 10_100),
            ResponseError::RebalanceInProgress.code()
        );
        let j = joined(group.join(request("b"), "-".into(), 10_200).0);
        assert_eq!((j.generation, j.leader.as_str()), (3, "b"));
    }

    /// A rebalance past its deadline completes without the member that never rejoined.
    #[test]
    fn a_rebalance_completes_at_its_deadline_without_absent_members() {
        let mut group = Group::default();
        joined(group.join(request(""), "a".into(), 0).0);
        group.sync("a", 1, vec![], 0);
        assert_eq!(group.join(request(""), "b".into(), 1_000).0, Reply::Wait);
        // a heartbeats once more, then never rejoins; the deadline is 1 s + 30 s.
        group.heartbeat("a", 1, 2_000);
        group.heartbeat("a", 1, 25_000);
        assert!(group.tick(30_999).is_empty());
        let effects = group.tick(31_000);
        let j = match &effects[..] {
            [
                Effect::Join {
                    outcome: JoinOutcome::Joined(j),
                    ..
                },
            ] => j.clone(),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            (j.generation, j.leader.as_str(), j.members.len()),
            (2, "b", 1)
        );
    }

    /// Leaving: the follower waiting in its sync is told to rejoin; the last member leaving empties
    /// the group.
    #[test]
    fn leaving_rebalances_and_the_last_one_empties_the_group() {
        let mut group = Group::default();
        joined(group.join(request(""), "a".into(), 0).0);
        group.join(request(""), "b".into(), 1);
        group.join(request("a"), "-".into(), 2);
        assert_eq!(group.sync("b", 2, vec![], 3).0, Reply::Wait);
        let (code, effects) = group.leave("a", 4);
        assert_eq!(code, NONE);
        assert!(
            matches!(&effects[..], [Effect::Sync { member_id, outcome: SyncOutcome::Failed(c) }] if member_id == "b" && *c == ResponseError::RebalanceInProgress.code())
        );
        let j = joined(group.join(request("b"), "-".into(), 5).0);
        assert_eq!(j.generation, 3);
        assert_eq!(group.leave("b", 6).0, NONE);
        assert_eq!(group.state(), State::Empty);
        assert_eq!(group.may_commit("", -1, 6), NONE);
        assert_eq!(group.leave("b", 7).0, ResponseError::UnknownMemberId.code());
    }

    #[test]
    fn a_group_holds_at_most_max_members() {
        let mut group = Group::default();
        for i in 0..MAX_MEMBERS {
            group.join(request(""), format!("m{i}"), 0);
        }
        let (reply, _) = group.join(request(""), "one-more".into(), 1);
        assert!(
            matches!(reply, Reply::Now(JoinOutcome::Failed { code, .. }) if code == ResponseError::GroupMaxSizeReached.code())
        );
        // A member already in may still rejoin.
        assert_ne!(group.join(request("m3"), "-".into(), 2).0, reply);
    }

    #[test]
    fn members_must_share_a_protocol_type_and_a_protocol() {
        let mut group = Group::default();
        joined(group.join(request(""), "a".into(), 0).0);
        let mut other = request("");
        other.protocols = vec![("roundrobin".into(), Bytes::new())];
        let (reply, _) = group.join(other, "b".into(), 1);
        assert!(
            matches!(reply, Reply::Now(JoinOutcome::Failed { code, .. }) if code == ResponseError::InconsistentGroupProtocol.code())
        );
        let mut connect = request("");
        connect.protocol_type = "connect".into();
        let (reply, _) = group.join(connect, "c".into(), 2);
        assert!(
            matches!(reply, Reply::Now(JoinOutcome::Failed { code, .. }) if code == ResponseError::InconsistentGroupProtocol.code())
        );
    }
}
