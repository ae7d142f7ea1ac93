//! The consumer groups of one hub, with the requests that wait on them: `groups` decides,
//! this module parks a JoinGroup or SyncGroup that must wait and answers it when a later request
//! or the clock (`tick`, every quarter second) completes it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use tokio::sync::oneshot;

use super::groups::{Effect, Group, JoinOutcome, JoinRequest, Reply, SyncOutcome};

/// The most groups one client (a key and scope: `sasl::Authenticated::principal`) may have
/// opened that the coordinator holds at once; a join that would open another is refused
/// (`INVALID_GROUP_ID` says no more can be made, and nothing is held for it), so one client
/// cannot fill the hub for everyone. Groups with no member are forgotten at the next tick.
pub const MAX_GROUPS_PER_CLIENT: usize = 1000;
/// The most groups the coordinator holds at once, over every client.
pub const MAX_GROUPS: usize = 10 * MAX_GROUPS_PER_CLIENT;

/// Requests waiting for their answer, by (group, member id).
type Parked<T> = HashMap<(String, String), oneshot::Sender<T>>;

#[derive(Default)]
struct State {
    groups: HashMap<String, Group>,
    /// The client that opened each group held, and how many each client opened.
    opened_by: HashMap<String, String>,
    opened: HashMap<String, usize>,
    /// Groups forgotten once idle, with their last generation, oldest first (at most
    /// [`MAX_GROUPS`]): the explorer still shows them `Empty`, as Kafka describes a group whose
    /// members all left, rather than as never seen since the hub started.
    forgotten: std::collections::VecDeque<(String, i32)>,
    joins: Parked<JoinOutcome>,
    syncs: Parked<SyncOutcome>,
}

pub struct Coordinator {
    state: Mutex<State>,
    started: Instant,
}

/// A group's state for the explorer.
#[derive(Debug, Clone, serde::Serialize)]
pub struct GroupView {
    pub state: String,
    pub generation: i32,
    pub protocol: Option<String>,
    pub members: Vec<String>,
}

/// A group as DescribeGroups gives it.
#[derive(Debug, Clone)]
pub struct GroupDescription {
    /// Kafka's names: `Empty`, `PreparingRebalance`, `CompletingRebalance`, `Stable`.
    pub state: String,
    pub protocol_type: String,
    pub protocol: String,
    pub members: Vec<super::groups::DescribedMember>,
    /// The hubs (lowercased) its members subscribe to.
    pub subscribed: Vec<String>,
}

impl GroupDescription {
    /// A consumer group without members: one forgotten once idle, or one with commits only.
    pub fn empty() -> Self {
        GroupDescription {
            state: "Empty".into(),
            protocol_type: "consumer".into(),
            protocol: String::new(),
            members: Vec::new(),
            subscribed: Vec::new(),
        }
    }
}

impl Default for Coordinator {
    fn default() -> Self {
        Coordinator {
            state: Mutex::new(State::default()),
            started: Instant::now(),
        }
    }
}

impl Coordinator {
    fn now(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// A join by a member of client `principal` (the one that opens a group counts it).
    pub async fn join(&self, group: &str, principal: &str, request: JoinRequest) -> JoinOutcome {
        let refused = |error: kafka_protocol::error::ResponseError| JoinOutcome::Failed {
            code: error.code(),
            member_id: String::new(),
        };
        if group.is_empty() || group.len() > super::groups::MAX_ID_BYTES {
            return refused(kafka_protocol::error::ResponseError::InvalidGroupId);
        }
        // A member id carries the client id (as Kafka's do), cut to a length a log can show.
        let client: String = request.client_id.chars().take(64).collect();
        let fresh = format!("{client}-{}", uuid::Uuid::new_v4());
        let member = if request.member_id.is_empty() {
            fresh.clone()
        } else {
            request.member_id.clone()
        };
        let waiting = {
            let mut state = self.state.lock().expect("groups lock");
            let now = self.now();
            if !state.groups.contains_key(group) {
                let by_client = state.opened.get(principal).copied().unwrap_or(0);
                if by_client >= MAX_GROUPS_PER_CLIENT || state.groups.len() >= MAX_GROUPS {
                    tracing::warn!(
                        groups = state.groups.len(),
                        by_client,
                        "a Kafka join for a new group was refused: the hub holds as many as it may ({MAX_GROUPS_PER_CLIENT} a client, {MAX_GROUPS} in all)"
                    );
                    return refused(kafka_protocol::error::ResponseError::InvalidGroupId);
                }
                state
                    .opened_by
                    .insert(group.to_string(), principal.to_string());
                *state.opened.entry(principal.to_string()).or_default() += 1;
            }
            let (reply, effects) = state
                .groups
                .entry(group.to_string())
                .or_default()
                .join(request, fresh, now);
            // Parked under the id the group knows the member by.
            let key = (group.to_string(), member);
            match settle(&mut state, group, reply, effects, |s| &mut s.joins, key) {
                Ok(outcome) => return outcome,
                Err(waiting) => waiting,
            }
        };
        waiting.await.unwrap_or(JoinOutcome::Failed {
            code: kafka_protocol::error::ResponseError::RebalanceInProgress.code(),
            member_id: String::new(),
        })
    }

    pub async fn sync(
        &self,
        group: &str,
        member_id: &str,
        generation: i32,
        assignments: Vec<(String, bytes::Bytes)>,
    ) -> SyncOutcome {
        let waiting = {
            let mut state = self.state.lock().expect("groups lock");
            let now = self.now();
            let Some(g) = state.groups.get_mut(group) else {
                return SyncOutcome::Failed(
                    kafka_protocol::error::ResponseError::UnknownMemberId.code(),
                );
            };
            let (reply, effects) = g.sync(member_id, generation, assignments, now);
            let key = (group.to_string(), member_id.to_string());
            match settle(&mut state, group, reply, effects, |s| &mut s.syncs, key) {
                Ok(outcome) => return outcome,
                Err(waiting) => waiting,
            }
        };
        waiting.await.unwrap_or(SyncOutcome::Failed(
            kafka_protocol::error::ResponseError::RebalanceInProgress.code(),
        ))
    }

    pub fn heartbeat(&self, group: &str, member_id: &str, generation: i32) -> i16 {
        let mut state = self.state.lock().expect("groups lock");
        let now = self.now();
        match state.groups.get_mut(group) {
            Some(g) => g.heartbeat(member_id, generation, now),
            None => kafka_protocol::error::ResponseError::UnknownMemberId.code(),
        }
    }

    pub fn leave(&self, group: &str, member_id: &str) -> i16 {
        let mut state = self.state.lock().expect("groups lock");
        let now = self.now();
        let Some(g) = state.groups.get_mut(group) else {
            return kafka_protocol::error::ResponseError::UnknownMemberId.code();
        };
        let (code, effects) = g.leave(member_id, now);
        deliver(&mut state, group, effects);
        code
    }

    pub fn may_commit(&self, group: &str, member_id: &str, generation: i32) -> i16 {
        let mut state = self.state.lock().expect("groups lock");
        let now = self.now();
        match state.groups.get_mut(group) {
            Some(g) => g.may_commit(member_id, generation, now),
            None => Group::default().may_commit(member_id, generation, now),
        }
    }

    /// Expires silent members and overdue rebalances in every group.
    pub fn tick(&self) {
        let mut state = self.state.lock().expect("groups lock");
        let now = self.now();
        let names: Vec<String> = state.groups.keys().cloned().collect();
        for name in names {
            let effects = state.groups.get_mut(&name).expect("group").tick(now);
            deliver(&mut state, &name, effects);
        }
        let idle: Vec<(String, i32)> = state
            .groups
            .iter()
            .filter(|(_, g)| g.is_idle())
            .map(|(name, g)| (name.clone(), g.generation()))
            .collect();
        for (name, generation) in idle {
            state.groups.remove(&name);
            if let Some(principal) = state.opened_by.remove(&name)
                && let Some(count) = state.opened.get_mut(&principal)
            {
                *count -= 1;
                if *count == 0 {
                    state.opened.remove(&principal);
                }
            }
            state.forgotten.retain(|(n, _)| *n != name);
            state.forgotten.push_back((name, generation));
            if state.forgotten.len() > MAX_GROUPS {
                state.forgotten.pop_front();
            }
        }
    }

    /// Whether `group` has members now (its offsets do not expire meanwhile).
    pub fn has_members(&self, group: &str) -> bool {
        let state = self.state.lock().expect("groups lock");
        state.groups.get(group).is_some_and(Group::has_members)
    }

    /// A group as DescribeGroups gives it, when the coordinator knows it: its state, protocol
    /// type, protocol and members (a group forgotten once idle is `Empty`, with none).
    pub fn describe(&self, group: &str) -> Option<GroupDescription> {
        let state = self.state.lock().expect("groups lock");
        if let Some(g) = state.groups.get(group) {
            return Some(GroupDescription {
                state: format!("{:?}", g.state()),
                protocol_type: g.protocol_type().unwrap_or("consumer").to_string(),
                protocol: g.protocol().unwrap_or_default().to_string(),
                members: g.described_members(),
                subscribed: g.subscribed_hubs(),
            });
        }
        state
            .forgotten
            .iter()
            .any(|(name, _)| name == group)
            .then(GroupDescription::empty)
    }

    pub fn views(&self) -> Vec<(String, GroupView)> {
        let state = self.state.lock().expect("groups lock");
        let mut views: Vec<(String, GroupView)> = state
            .groups
            .iter()
            .map(|(name, g)| {
                (
                    name.clone(),
                    GroupView {
                        state: format!("{:?}", g.state()),
                        generation: g.generation(),
                        protocol: g.protocol().map(str::to_string),
                        members: g.members(),
                    },
                )
            })
            .collect();
        for (name, generation) in &state.forgotten {
            if !state.groups.contains_key(name) {
                views.push((
                    name.clone(),
                    GroupView {
                        state: "Empty".into(),
                        generation: *generation,
                        protocol: None,
                        members: Vec::new(),
                    },
                ));
            }
        }
        views.sort_by(|a, b| a.0.cmp(&b.0));
        views
    }
}

/// A join's or sync's reply: the answer now (`Ok`), or a receiver parked in `parked` under `key`
/// (`Err`); either way the effects of the call are delivered to the requests they answer.
fn settle<T>(
    state: &mut State,
    group: &str,
    reply: Reply<T>,
    effects: Vec<Effect>,
    parked: fn(&mut State) -> &mut Parked<T>,
    key: (String, String),
) -> Result<T, oneshot::Receiver<T>> {
    let settled = match reply {
        Reply::Now(outcome) => Ok(outcome),
        Reply::Wait => {
            let (send, receive) = oneshot::channel();
            parked(state).insert(key, send);
            Err(receive)
        }
    };
    deliver(state, group, effects);
    settled
}

fn deliver(state: &mut State, group: &str, effects: Vec<Effect>) {
    for effect in effects {
        match effect {
            Effect::Join { member_id, outcome } => {
                if let Some(send) = state.joins.remove(&(group.to_string(), member_id)) {
                    let _ = send.send(outcome);
                }
            }
            Effect::Sync { member_id, outcome } => {
                if let Some(send) = state.syncs.remove(&(group.to_string(), member_id)) {
                    let _ = send.send(outcome);
                }
            }
        }
    }
}
