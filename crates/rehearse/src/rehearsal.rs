//! A rehearsal: the app run as a [`LocalApp`] while a seeded plan of faults is carried out, then
//! the audit of its outputs. The run: inputs sent at a steady pace (so that there are many
//! small invocations for the faults to land between), each fault fired when the count of events
//! handed to the function reaches its point, until the function has answered every input (its
//! outputs carried out) and no fault is still under way; then
//! the instances stop as Azure stops them, and every event the `eventHub` outputs sent and every
//! blob the `blob` outputs wrote is matched to the inputs.
//!
//! Time runs compressed: ownership expires after [`OWNERSHIP_EXPIRY`] and instances balance
//! every second (host.json's `partitionOwnershipExpirationInterval` and
//! `loadBalancingUpdateInterval` in the rehearsal's copy), so partitions move within seconds.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use serde::Serialize;
use serde_json::Value;

use crate::audit::{self, Duplicated, Effect, FiredFault, Input, Missing, Semantics, Unmatched};
use crate::local_app::{LocalApp, LocalAppError, PARTITIONS, Timings, copy_tree};
use crate::plan::{self, Fault, FaultKind, OWNERSHIP_EXPIRY, Scheduled};
use crate::stage::{CheckpointPastEnd, Sent, Stage};
use hubhost_functions::function_app::{DEFAULT_FUNCTION_TIMEOUT, FunctionApp};
use hubhost_host::emulate::faults::{FaultSwitch, GivenUp};
use hubhost_host::emulate::{AppSettings, resolve_trigger};

type KeyOf = Arc<dyn Fn(&[u8]) -> Option<String> + Send + Sync>;
type EffectKeyOf = Arc<dyn Fn(&str, &[u8]) -> Option<String> + Send + Sync>;
type Expects = Arc<dyn Fn(&[u8]) -> bool + Send + Sync>;

/// The least time between two faults.
const FAULT_GAP: Duration = Duration::from_millis(400);

/// The owner id of the instance a scale-out adds.
const SECOND_INSTANCE: &str = "rehearsal-2";
/// How long sending the inputs takes at least, so that the faults' points fall while events
/// flow (one event per partition per tick; ticks between 80 and 250 ms: at most 50 events a
/// second, which a debug build of a handler keeps up with one event per invocation).
const SENDING: Duration = Duration::from_secs(20);

/// A rehearsal to run: inputs, faults, and what the function promises.
///
/// ```no_run
/// # async fn example() -> Result<(), hubhost_rehearse::LocalAppError> {
/// use hubhost_rehearse::Rehearsal;
///
/// let report = Rehearsal::new(42)
///     .count(400)
///     .run(std::path::Path::new("function_app"), std::path::Path::new("target/debug/my-function"))
///     .await?;
/// assert!(report.passed, "{}", report.summary());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Rehearsal {
    seed: u64,
    kinds: Vec<FaultKind>,
    fault_count: usize,
    inputs: Vec<Vec<u8>>,
    semantics: Semantics,
    function: Option<String>,
    input_key: KeyOf,
    effect_key: EffectKeyOf,
    /// How effects are matched to inputs, in words for the report.
    key_rule: String,
    /// The JSON member [`Rehearsal::key`] named, which inputs made from samples get unique.
    key_member: Option<String>,
    /// Sample events and how many inputs to make of them ([`Rehearsal::inputs_like`]).
    samples: Option<(Vec<Vec<u8>>, usize)>,
    expects_effect: Expects,
    within: Duration,
    keep_storage: Option<std::path::PathBuf>,
    /// Only these faults of the seed's plan, by index (a shrunk plan); `None`: all.
    only_faults: Option<Vec<usize>>,
    /// Only the first this many inputs are sent (a shrunk run); the plan is still the seed's
    /// for all of them.
    first_inputs: Option<usize>,
}

/// What a rehearsal found; `hubhost rehearse` prints it as JSON.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub seed: u64,
    pub semantics: Semantics,
    pub function: String,
    pub inputs: usize,
    pub effects: usize,
    pub missing: Vec<Missing>,
    pub duplicated: Vec<Duplicated>,
    pub unmatched: Vec<Unmatched>,
    /// How effects were matched to inputs, in words.
    pub key_rule: String,
    /// Per output binding: its type, its effects and its duplicated inputs.
    pub outputs: Vec<OutputFindings>,
    pub faults: Vec<FiredFault>,
    /// The batches the host gave up after their failures, the function's retry policy spent (or
    /// none), and moved past: on Azure their events are never delivered again. A handler that
    /// died mid-invocation counts as a failed attempt here, as on Azure.
    pub lost_on_azure: Vec<GivenUp>,
    /// Answers that set outputs function.json does not declare (each kind once): on Azure the
    /// host drops those outputs without a sign. Any fails the rehearsal.
    pub undeclared_outputs: Vec<String>,
    /// Checkpoints of the trigger's consumer group past their partition's end when the run
    /// ended (the event hub was recreated): on Azure the trigger reads none of those
    /// partitions until they pass their checkpoint, then skips what came before.
    pub checkpoints_past_end: Vec<CheckpointPastEnd>,
    /// Whether every input was processed and checkpointed within the rehearsal's time.
    pub completed: bool,
    pub passed: bool,
    /// How long the run took: virtual seconds in a simulation, wall-clock seconds otherwise.
    pub seconds: f64,
    /// Whether the run was simulated (virtual time, in-process function, memory hub and store).
    pub simulated: bool,
    /// For a failing simulated seed that was shrunk: the fewest faults and inputs that still
    /// fail, and how to run just that.
    pub shrunk: Option<Shrunk>,
}

/// A failing seed reduced to what still fails: the faults of its plan kept (by index) and the
/// inputs sent.
#[derive(Debug, Clone, Serialize)]
pub struct Shrunk {
    /// Indices into the seed's plan of the faults kept.
    pub faults: Vec<usize>,
    /// Those faults.
    pub plan: Vec<Scheduled>,
    /// How many of the first inputs are sent.
    pub inputs: usize,
    /// The faults of the seed's whole plan, and its inputs, for comparison.
    pub from_faults: usize,
    pub from_inputs: usize,
    /// What the shrunk run found: missing and duplicated effects, inputs lost on Azure.
    pub missing: usize,
    pub duplicated: usize,
    pub lost_on_azure: usize,
    /// The same run from the test kit:
    /// `Rehearsal::new(seed)….only_faults(&[…]).first_inputs(n)`.
    pub replay: String,
}

/// What one output binding did in a rehearsal.
#[derive(Debug, Clone, Serialize)]
pub struct OutputFindings {
    pub binding: String,
    /// Its `type` in function.json.
    #[serde(rename = "type")]
    pub kind: String,
    pub effects: usize,
    /// Inputs with more than one effect through it.
    pub duplicated: usize,
    /// How a repeated write lands there, where that is not one more copy.
    pub note: Option<&'static str>,
}

impl Report {
    /// A few lines for a person: the verdict, the counts, the seed to run it again.
    pub fn summary(&self) -> String {
        let fired = self.faults.iter().filter(|f| f.at_ms.is_some()).count();
        let mut text = format!(
            "rehearsal of {} with seed {}: {} — {} inputs, {} effects, {} missing, {} duplicated, {} unmatched; {} of {} faults fired in {:.1} s{}{}",
            self.function,
            self.seed,
            if self.passed { "passed" } else { "FAILED" },
            self.inputs,
            self.effects,
            self.missing.len(),
            self.duplicated.len(),
            self.unmatched.len(),
            fired,
            self.faults.len(),
            self.seconds,
            if self.simulated {
                " (virtual time)"
            } else {
                ""
            },
            if self.completed {
                ""
            } else {
                " (not every input was processed in time)"
            }
        );
        for o in &self.outputs {
            text.push_str(&format!(
                "\n  output '{}' ({}): {} effects, {} duplicated{}",
                o.binding,
                o.kind,
                o.effects,
                o.duplicated,
                o.note.map(|n| format!(" ({n})")).unwrap_or_default()
            ));
        }
        for d in self.duplicated.iter().take(5) {
            text.push_str(&format!(
                "\n  duplicated: {} ×{} through '{}' after faults {:?}",
                d.key, d.count, d.output, d.faults_before
            ));
        }
        for undeclared in self.undeclared_outputs.iter().take(3) {
            text.push_str(&format!("\n  {undeclared}"));
        }
        for lost in self.lost_on_azure.iter().take(5) {
            text.push_str(&format!("\n  {}", lost.describe()));
        }
        for past in self.checkpoints_past_end.iter().take(5) {
            text.push_str(&format!("\n  {}", past.describe()));
        }
        let recreated = self
            .faults
            .iter()
            .any(|f| f.at_ms.is_some() && f.scheduled.fault == Fault::RecreateHub);
        if recreated && !self.missing.is_empty() {
            text.push_str("\n  the event hub was recreated and its checkpoints stayed: as on Azure, each new partition is read only after its old checkpoint, and the events before it are skipped (after recreating an event hub, delete its checkpoints, or `hubhost checkpoints reset --to start`)");
        }
        for m in self.missing.iter().take(5) {
            text.push_str(&format!(
                "\n  missing: {} (partition {}): sent {}; no effect names it by {}",
                m.key, m.partition, m.sent, self.key_rule
            ));
        }
        if !self.missing.is_empty() {
            text.push_str(&match self.unmatched.first() {
                Some(u) => format!(
                    "\n  {} effects name no input by {}, e.g. {} through '{}': {} (its key: {}){}",
                    self.unmatched.len(),
                    self.key_rule,
                    u.location,
                    u.output,
                    u.preview,
                    u.key.as_deref().unwrap_or("none"),
                    if u.key.is_none() {
                        "; carry the input's key into what the function writes, or match on a member the outputs do carry (Rehearsal::key, hubhost rehearse --key)"
                    } else {
                        ""
                    }
                ),
                None => "\n  no effect names another input either: the function gave nothing for the missing ones".into(),
            });
        }
        if let Some(shrunk) = &self.shrunk {
            text.push_str(&format!(
                "\n  shrunk to {} of {} faults and the first {} of {} inputs, which still fail ({} missing, {} duplicated, {} batches lost on Azure): {}",
                shrunk.faults.len(),
                shrunk.from_faults,
                shrunk.inputs,
                shrunk.from_inputs,
                shrunk.missing,
                shrunk.duplicated,
                shrunk.lost_on_azure,
                if shrunk.plan.is_empty() {
                    "no fault at all".to_string()
                } else {
                    shrunk
                        .plan
                        .iter()
                        .map(|s| format!("{} at event {}", fault_name(&s.fault), s.at_event))
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            ));
            text.push_str(&format!("\n  replay it: {}", shrunk.replay));
        }
        if !self.passed {
            text.push_str(&format!(
                "\n  run it again with the same seed: {}",
                self.seed
            ));
        }
        text
    }
}

impl Rehearsal {
    /// A rehearsal with `seed`, every default fault ([`FaultKind::DEFAULT`]) once, 200 inputs
    /// `{"id":"input-00001","n":1}`…, keys read by [`audit::default_key`], exactly once.
    pub fn new(seed: u64) -> Self {
        Rehearsal {
            seed,
            kinds: FaultKind::DEFAULT.to_vec(),
            fault_count: 0,
            inputs: generated_inputs(200),
            semantics: Semantics::ExactlyOnce,
            function: None,
            input_key: Arc::new(audit::default_key),
            effect_key: Arc::new(|_, body| audit::default_key(body)),
            key_rule: "the member `id`, else the whole text".into(),
            key_member: None,
            samples: None,
            expects_effect: Arc::new(|_| true),
            within: Duration::from_secs(180),
            keep_storage: None,
            only_faults: None,
            first_inputs: None,
        }
    }

    /// After the run, copy the app's storage (checkpoints, `blob` outputs, what the handler
    /// wrote there itself) to `folder`, for a test to check the app's own state.
    pub fn keep_storage(mut self, folder: &Path) -> Self {
        self.keep_storage = Some(folder.to_path_buf());
        self
    }

    /// `n` generated inputs, `{"id":"input-00001","n":1}` and on.
    pub fn count(mut self, n: usize) -> Self {
        self.inputs = generated_inputs(n);
        self.samples = None;
        self
    }

    /// These bodies as the inputs.
    pub fn inputs(mut self, bodies: impl IntoIterator<Item = Vec<u8>>) -> Self {
        self.inputs = bodies.into_iter().collect();
        self.samples = None;
        self
    }

    /// `n` inputs made from the function's own sample events (e.g. `events.json`'s bodies), in
    /// turn, each a copy whose key member ([`key`](Self::key), else `id`) is its own:
    /// `{"deviceId":"d-1"}` gives `{"deviceId":"d-1-00001"}`, `{"deviceId":"d-1-00003"}`…; a
    /// sample without the member gets it. Samples that are not JSON objects cannot carry a key
    /// and are left out, unless no sample is one.
    ///
    /// ```
    /// use hubhost_rehearse::Rehearsal;
    ///
    /// let samples = vec![br#"{"deviceId":"d-1","t":21.5}"#.to_vec(), b"plain text".to_vec()];
    /// let rehearsal = Rehearsal::new(1).key("deviceId").inputs_like(samples, 3);
    /// assert_eq!(rehearsal.input_bodies()[2], br#"{"deviceId":"d-1-00003","t":21.5}"#);
    /// ```
    pub fn inputs_like(mut self, samples: impl IntoIterator<Item = Vec<u8>>, n: usize) -> Self {
        self.samples = Some((samples.into_iter().collect(), n));
        self.make_inputs_from_samples();
        self
    }

    /// The inputs' bodies, as they will be sent.
    pub fn input_bodies(&self) -> &[Vec<u8>] {
        &self.inputs
    }

    fn make_inputs_from_samples(&mut self) {
        let Some((samples, n)) = &self.samples else {
            return;
        };
        let member = self.key_member.as_deref().unwrap_or("id");
        let objects: Vec<serde_json::Map<String, Value>> = samples
            .iter()
            .filter_map(|body| match serde_json::from_slice(body) {
                Ok(Value::Object(object)) => Some(object),
                _ => None,
            })
            .collect();
        self.inputs = if objects.is_empty() {
            samples.iter().cycle().take(*n).cloned().collect()
        } else {
            (1..=*n)
                .map(|i| {
                    let mut object = objects[(i - 1) % objects.len()].clone();
                    let base = match object.get(member) {
                        Some(Value::String(text)) => text.clone(),
                        Some(Value::Number(number)) => number.to_string(),
                        _ => "input".into(),
                    };
                    object.insert(member.into(), Value::from(format!("{base}-{i:05}")));
                    serde_json::to_vec(&object).expect("JSON serializes")
                })
                .collect()
        };
    }

    /// The kinds of fault to draw from.
    pub fn faults(mut self, kinds: &[FaultKind]) -> Self {
        self.kinds = kinds.to_vec();
        self
    }

    /// At least `n` faults in all (the kinds in turn).
    pub fn fault_count(mut self, n: usize) -> Self {
        self.fault_count = n;
        self
    }

    pub fn semantics(mut self, semantics: Semantics) -> Self {
        self.semantics = semantics;
        self
    }

    /// The function whose trigger gets the inputs [default: the app's first Event Hubs function].
    pub fn function(mut self, name: &str) -> Self {
        self.function = Some(name.to_string());
        self
    }

    /// How an input's key is read from its body.
    pub fn input_key(
        mut self,
        key: impl Fn(&[u8]) -> Option<String> + Send + Sync + 'static,
    ) -> Self {
        self.input_key = Arc::new(key);
        self.key_rule = "the test's own key rule".into();
        self
    }

    /// How an effect names its input: from the output's name and the event's body or blob's
    /// content.
    pub fn effect_key(
        mut self,
        key: impl Fn(&str, &[u8]) -> Option<String> + Send + Sync + 'static,
    ) -> Self {
        self.effect_key = Arc::new(key);
        self.key_rule = "the test's own key rule".into();
        self
    }

    /// The JSON member that names an input, in the inputs and in what the outputs wrote
    /// (`hubhost rehearse --key`): an output must carry its input's member for the audit to
    /// match them [default: `id`, else the whole text].
    pub fn key(mut self, member: &str) -> Self {
        let (a, b) = (member.to_string(), member.to_string());
        self = self
            .input_key(move |body| audit::key_field(body, &a))
            .effect_key(move |_, body| audit::key_field(body, &b));
        self.key_rule = format!("the member `{member}`");
        self.key_member = Some(member.to_string());
        self.make_inputs_from_samples();
        self
    }

    /// Which inputs should have an effect [default: all].
    pub fn expects_effect(
        mut self,
        expects: impl Fn(&[u8]) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.expects_effect = Arc::new(expects);
        self
    }

    /// How long the run may take before what is unprocessed counts as missing [default: 180 s].
    pub fn within(mut self, within: Duration) -> Self {
        self.within = within;
        self
    }

    /// Only the faults of the seed's plan at these indices (what a shrunk plan keeps); the
    /// others are left out.
    pub fn only_faults(mut self, kept: &[usize]) -> Self {
        self.only_faults = Some(kept.to_vec());
        self
    }

    /// Only the first `n` inputs are sent; the plan stays the seed's for all of them (what a
    /// shrunk run keeps).
    pub fn first_inputs(mut self, n: usize) -> Self {
        self.first_inputs = Some(n);
        self
    }

    /// The seed this rehearsal runs.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The same rehearsal with another seed.
    pub fn with_seed(&self, seed: u64) -> Self {
        let mut other = self.clone();
        other.seed = seed;
        other
    }

    /// The faults this rehearsal will fire, for the outputs named (pure).
    pub fn plan(&self, outputs: &[String]) -> Vec<Scheduled> {
        let plan = plan::schedule(
            self.seed,
            &self.kinds,
            self.fault_count,
            self.inputs.len(),
            outputs,
        );
        match &self.only_faults {
            Some(kept) => plan
                .into_iter()
                .enumerate()
                .filter(|(i, _)| kept.contains(i))
                .map(|(_, s)| s)
                .collect(),
            None => plan,
        }
    }

    /// The inputs sent.
    fn sent_inputs(&self) -> &[Vec<u8>] {
        let n = self
            .first_inputs
            .unwrap_or(usize::MAX)
            .min(self.inputs.len());
        &self.inputs[..n]
    }

    /// Runs the app in `function_app` with `handler` as its custom handler under the plan, and
    /// audits its outputs.
    pub async fn run(&self, function_app: &Path, handler: &Path) -> Result<Report, LocalAppError> {
        if let Some(kind) = self.kinds.iter().find(|k| k.simulated_only()) {
            return Err(LocalAppError::Io(format!(
                "the fault {} is simulated only: the local hub neither adds partitions to a running event hub nor deletes one; rehearse it with Rehearsal::simulated (hubhost rehearse --simulate)",
                kind.name()
            )));
        }
        let mut local = LocalApp::start_with(function_app, handler, timings(function_app)).await?;
        let report = self.run_on_stage(&mut local).await;
        if let Some(folder) = &self.keep_storage {
            copy_tree(&local.storage_folder(), folder, None)?;
        }
        report
    }

    /// Runs the plan on `stage`'s app, stops its instances, and audits its outputs.
    pub(crate) async fn run_on_stage(
        &self,
        stage: &mut dyn Stage,
    ) -> Result<Report, LocalAppError> {
        let outcome = self.run_on(stage).await;
        stage.stop_instances().await?;
        let (mut run, started_wall) = outcome?;
        // Stopping instances drain the batches under way: what they answered counts too.
        run.completed = stage.answered_through(&run.function, &run.last_sequence);
        let effects = collect_effects(stage, &run.outputs, started_wall, &*self.effect_key).await?;
        let findings = audit::audit(&run.inputs, &effects, &run.faults);
        let lost_on_azure = stage.given_up();
        let mut undeclared_outputs = stage.undeclared_outputs();
        undeclared_outputs.sort();
        undeclared_outputs.dedup();
        let checkpoints_past_end = stage.checkpoints_past_end(&run.key).await?;
        let passed = run.completed
            && findings.passed(self.semantics)
            && lost_on_azure.is_empty()
            && undeclared_outputs.is_empty()
            && checkpoints_past_end.is_empty();
        let outputs = run
            .outputs
            .iter()
            .map(|o| OutputFindings {
                binding: o.name.clone(),
                kind: o.kind_name.clone(),
                effects: effects.iter().filter(|e| e.output == o.name).count(),
                duplicated: findings
                    .duplicated
                    .iter()
                    .filter(|d| d.output == o.name)
                    .count(),
                note: o.kind.note(),
            })
            .collect();
        Ok(Report {
            seed: self.seed,
            semantics: self.semantics,
            function: run.function,
            inputs: run.inputs.len(),
            effects: effects.len(),
            missing: findings.missing,
            duplicated: findings.duplicated,
            unmatched: findings.unmatched,
            key_rule: self.key_rule.clone(),
            outputs,
            faults: run.faults,
            lost_on_azure,
            undeclared_outputs,
            checkpoints_past_end,
            completed: run.completed,
            passed,
            seconds: run.seconds,
            simulated: hubhost_clock::is_simulated(),
            shrunk: None,
        })
    }

    async fn run_on(
        &self,
        local: &mut dyn Stage,
    ) -> Result<(Run, chrono::DateTime<chrono::Utc>), LocalAppError> {
        let (app, settings) = local.app()?;
        let spec = app
            .functions
            .iter()
            .filter(|f| f.event_hub_trigger().is_some() && app.disabled_by(&f.name).is_none())
            .find(|f| self.function.as_deref().is_none_or(|n| n == f.name))
            .ok_or_else(|| {
                LocalAppError::Io(match &self.function {
                    Some(name) => format!("the app has no Event Hubs function {name}"),
                    None => "the app has no Event Hubs function".into(),
                })
            })?;
        let (trigger, target) = resolve_trigger(spec, &settings)?
            .ok_or_else(|| LocalAppError::Io("no eventHubTrigger".into()))?;
        let key = hubhost_checkpoints::ConsumerGroupKey::new(
            target.namespace.clone(),
            target.hub.clone(),
            trigger.consumer_group.clone(),
        )
        .map_err(|e| LocalAppError::Io(e.to_string()))?;
        let outputs = resolve_outputs(spec, &settings)?;
        // A function without outputs has no effects to audit: it must process everything.
        let no_outputs = outputs.is_empty();
        let output_names: Vec<String> = outputs.iter().map(|o| o.name.clone()).collect();
        let plan = self.plan(&output_names);

        // Where each input goes is known once it is sent (partitions may be added meanwhile);
        // until then, round-robin over the partitions the hub starts with.
        let Sent {
            partitions: mut sent_to,
            mut last_sequence,
        } = Sent::round_robin(self.sent_inputs().len(), PARTITIONS);
        let started = Instant::now();
        let started_wall = hubhost_clock::now();
        // Paced for all the inputs, so that a shrunk run's first inputs come when they came.
        let ticks = self.inputs.len().div_ceil(PARTITIONS as usize).max(1) as u32;
        let tick = (SENDING / ticks).clamp(Duration::from_millis(80), Duration::from_millis(250));
        let mut sending = tokio::spawn(local.send_paced(
            &trigger.event_hub_name,
            self.sent_inputs().to_vec(),
            PARTITIONS as usize,
            tick,
        ));

        let mut sent = false;
        let mut handed_out = local.events_handed_out();
        let mut fired: Vec<FiredFault> = Vec::new();
        let mut geo = false;
        let mut busy_until = Instant::now();
        let mut last_fired = Instant::now() - FAULT_GAP;
        let deadline = started + self.within;
        let completed = loop {
            let count = *handed_out.borrow_and_update();

            // One fault at a time: a batch of a backlog moves the count by a hundred at once,
            // and the faults whose points it passes fire a gap apart, not in one storm.
            while let Some(next) = plan
                .get(fired.len())
                .filter(|s| s.at_event <= count && last_fired.elapsed() >= FAULT_GAP)
            {
                last_fired = Instant::now();
                let instance = fire(local, next, &trigger.event_hub_name, &mut geo).await?;
                let at_ms = started.elapsed().as_millis() as u64;
                tracing::warn!(target: "hubhost::rehearse", at_event = next.at_event, at_ms, fault = ?next.fault, instance = ?instance, "fault");
                if let Some(d) = next.fault.duration() {
                    busy_until = busy_until.max(Instant::now() + d + Duration::from_secs(2));
                }
                fired.push(FiredFault {
                    scheduled: next.clone(),
                    at_ms: Some(at_ms),
                    instance,
                });
            }
            if !sent && sending.is_finished() {
                let where_sent = (&mut sending)
                    .await
                    .map_err(|e| LocalAppError::EventHub(e.to_string()))??;
                (sent_to, last_sequence) = (where_sent.partitions, where_sent.last_sequence);
                sent = true;
            }
            if sent
                && Instant::now() >= busy_until
                && local.answered_through(&spec.name, &last_sequence)
            {
                break true;
            }
            if Instant::now() > deadline {
                break false;
            }
            tokio::select! {
                biased;
                _ = handed_out.changed() => {}
                _ = tokio::time::sleep(Duration::from_millis(200)) => {}
            }
        };
        if !sent {
            sending.abort();
        }
        let inputs: Vec<Input> = self
            .sent_inputs()
            .iter()
            .zip(&sent_to)
            .enumerate()
            .map(|(i, (body, partition))| Input {
                key: (self.input_key)(body).unwrap_or_else(|| format!("input #{i}")),
                partition: partition.to_string(),
                sent: audit::preview(body),
                expects_effect: !no_outputs && (self.expects_effect)(body),
            })
            .collect();
        // Faults never reached: the run ended before their point.
        for unfired in plan.iter().skip(fired.len()) {
            fired.push(FiredFault {
                scheduled: unfired.clone(),
                at_ms: None,
                instance: None,
            });
        }
        Ok((
            Run {
                key,
                last_sequence,
                function: spec.name.clone(),
                inputs,
                outputs,
                faults: fired,
                completed,
                seconds: started.elapsed().as_secs_f64(),
            },
            started_wall,
        ))
    }
}

/// A fault's name as `--faults` spells its kind.
pub(crate) fn fault_name(fault: &Fault) -> &'static str {
    match fault {
        Fault::KillHandler => "kill-handler",
        Fault::InstanceJoins => "instance-joins",
        Fault::InstanceLeaves => "instance-leaves",
        Fault::Freeze { .. } => "freeze",
        Fault::OutputFails { .. } => "output-failure",
        Fault::Detach { .. } => "detach",
        Fault::StoreDown { .. } => "store-outage",
        Fault::GeoOffsets => "geo-offsets",
        Fault::AddPartitions { .. } => "add-partitions",
        Fault::RecreateHub => "recreate-hub",
    }
}

/// Carries out `plan` on one instance's switches as the count of events it hands out reaches
/// each point, 400 ms apart, logging each (`hubhost emulate --faults`); faults that need
/// a second instance or the hub are skipped with a warning. Ends when the plan is done.
pub async fn drive_instance(
    switch: Arc<FaultSwitch>,
    mut handed_out: tokio::sync::watch::Receiver<u64>,
    plan: Vec<Scheduled>,
) {
    let started = Instant::now();
    let mut last_fired = Instant::now() - FAULT_GAP;
    for scheduled in plan {
        while *handed_out.borrow_and_update() < scheduled.at_event
            || last_fired.elapsed() < FAULT_GAP
        {
            tokio::select! {
                changed = handed_out.changed() => if changed.is_err() { return },
                _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            }
        }
        last_fired = Instant::now();
        let at_ms = started.elapsed().as_millis() as u64;
        match &scheduled.fault {
            Fault::KillHandler => switch.kill_handler(),
            Fault::Freeze { millis } => switch.freeze_for(Duration::from_millis(*millis)),
            Fault::OutputFails { output, millis } => {
                switch.fail_output_for(output, Duration::from_millis(*millis))
            }
            Fault::StoreDown { millis } => switch.store_down_for(Duration::from_millis(*millis)),
            Fault::GeoOffsets => switch.set_geo_offsets(true),
            other => {
                tracing::warn!(target: "hubhost::rehearse", fault = ?other, "skipped: one instance cannot do it (hubhost rehearse can)");
                continue;
            }
        }
        tracing::warn!(target: "hubhost::rehearse", at_event = scheduled.at_event, at_ms, fault = ?scheduled.fault, "fault");
    }
}

/// What a run leaves for the audit.
struct Run {
    /// The trigger's consumer group.
    key: hubhost_checkpoints::ConsumerGroupKey,
    last_sequence: Vec<i64>,
    function: String,
    inputs: Vec<Input>,
    outputs: Vec<OutputPlace>,
    faults: Vec<FiredFault>,
    completed: bool,
    seconds: f64,
}

/// Where an output binding's effects are found.
struct OutputPlace {
    name: String,
    /// Its `type` in function.json.
    kind_name: String,
    kind: OutputKind,
}

enum OutputKind {
    EventHub(String),
    Blob(String),
    /// Kept in the rehearsal's outbox (queue, table, cosmosDB, …: the rehearsal's storage is
    /// a folder), each line one item the binding was handed.
    Outbox {
        function: String,
        writes: Writes,
    },
}

/// How the service behind an outbox binding holds a repeated write of one item.
#[derive(Clone, Copy)]
enum Writes {
    /// One more copy (a queue message, a Service Bus message, …).
    Append,
    /// A Cosmos DB document: the output upserts by `id`, a repeat replaces it.
    UpsertById,
    /// A table entity: inserted (a repeat is a 409 Conflict on Azure, which fails the
    /// invocation), or with `"odata.etag": "*"` upserted by its keys.
    TableEntity,
}

impl OutputKind {
    fn note(&self) -> Option<&'static str> {
        match self {
            OutputKind::Outbox {
                writes: Writes::UpsertById,
                ..
            } => Some("cosmosDB upserts by id: a repeated document replaces itself"),
            OutputKind::Outbox {
                writes: Writes::TableEntity,
                ..
            } => Some(
                "an entity written twice is an insert the Tables extension makes twice: on Azure the second fails with 409 Conflict and fails its invocation; \"odata.etag\": \"*\" upserts instead",
            ),
            _ => None,
        }
    }
}

fn resolve_outputs(
    spec: &hubhost_functions::function_app::FunctionSpec,
    settings: &AppSettings,
) -> Result<Vec<OutputPlace>, LocalAppError> {
    let mut places = Vec::new();
    for binding in spec.outputs() {
        let kind = if binding.is("eventHub") {
            let hub = binding.event_hub_name().unwrap_or_default();
            OutputKind::EventHub(settings.expand(hub)?)
        } else if binding.is("blob") {
            let path = settings.expand(binding.setting("path").unwrap_or_default())?;
            OutputKind::Blob(path.split('/').next().unwrap_or_default().to_string())
        } else if binding.is("http") {
            continue;
        } else {
            let writes = if binding.is("cosmosDB") {
                Writes::UpsertById
            } else if binding.is("table") {
                Writes::TableEntity
            } else {
                Writes::Append
            };
            OutputKind::Outbox {
                function: spec.name.clone(),
                writes,
            }
        };
        places.push(OutputPlace {
            name: binding.name.clone(),
            kind_name: binding.kind.clone(),
            kind,
        });
    }
    Ok(places)
}

/// Carries out one fault; the instance it was done to, where that matters.
async fn fire(
    local: &mut dyn Stage,
    scheduled: &Scheduled,
    trigger_hub: &str,
    geo: &mut bool,
) -> Result<Option<String>, LocalAppError> {
    let ids = local.instance_ids();
    let all = |f: &dyn Fn(&hubhost_host::emulate::faults::FaultSwitch)| {
        for id in &ids {
            if let Some(switch) = local.faults_of(id) {
                f(&switch);
            }
        }
    };
    Ok(match &scheduled.fault {
        Fault::KillHandler => {
            let id = ids[scheduled.at_event as usize % ids.len()].clone();
            if let Some(switch) = local.faults_of(&id) {
                switch.kill_handler();
            }
            Some(id)
        }
        Fault::InstanceJoins => {
            if !ids.iter().any(|i| i == SECOND_INSTANCE) {
                local.start_instance(SECOND_INSTANCE).await?;
                if let Some(switch) = local.faults_of(SECOND_INSTANCE) {
                    switch.set_geo_offsets(*geo);
                }
            }
            Some(SECOND_INSTANCE.into())
        }
        Fault::InstanceLeaves => {
            if ids.iter().any(|i| i == SECOND_INSTANCE) {
                local.stop_instance(SECOND_INSTANCE).await?;
            }
            Some(SECOND_INSTANCE.into())
        }
        Fault::Freeze { millis } => {
            // The first instance: the one that owned partitions before the second joined.
            let id = ids[0].clone();
            if let Some(switch) = local.faults_of(&id) {
                switch.freeze_for(Duration::from_millis(*millis));
            }
            Some(id)
        }
        Fault::OutputFails { output, millis } => {
            all(&|s| s.fail_output_for(output, Duration::from_millis(*millis)));
            None
        }
        Fault::Detach { server_busy } => {
            local.detach(trigger_hub, *server_busy);
            None
        }
        Fault::StoreDown { millis } => {
            all(&|s| s.store_down_for(Duration::from_millis(*millis)));
            None
        }
        Fault::GeoOffsets => {
            *geo = true;
            all(&|s| s.set_geo_offsets(true));
            None
        }
        Fault::AddPartitions { added } => {
            local.add_partitions(trigger_hub, *added)?;
            None
        }
        Fault::RecreateHub => {
            local.recreate_hub(trigger_hub)?;
            None
        }
    })
}

/// Every event the `eventHub` outputs sent, every blob the `blob` outputs wrote, and every item
/// the other outputs were handed (from the outbox), as the services behind them hold them.
async fn collect_effects(
    local: &dyn Stage,
    outputs: &[OutputPlace],
    started: chrono::DateTime<chrono::Utc>,
    key_of: &(dyn Fn(&str, &[u8]) -> Option<String> + Send + Sync),
) -> Result<Vec<Effect>, LocalAppError> {
    let mut effects = Vec::new();
    for output in outputs {
        match &output.kind {
            OutputKind::EventHub(hub) => {
                for (partition, event) in local.held_events(hub).await? {
                    let body = base64::Engine::decode(
                        &base64::engine::general_purpose::STANDARD,
                        &event.body_base64,
                    )
                    .unwrap_or_default();
                    effects.push(Effect {
                        output: output.name.clone(),
                        key: key_of(&output.name, &body),
                        at_ms: event
                            .enqueued_time
                            .map(|t| (t - started).num_milliseconds().max(0) as u64),
                        location: format!("{hub}/{partition}#{}", event.sequence_number),
                        preview: audit::preview(&body),
                    });
                }
            }
            OutputKind::Blob(container) => {
                for (name, content) in local.held_blobs(container).await? {
                    effects.push(Effect {
                        output: output.name.clone(),
                        key: key_of(&output.name, &content),
                        at_ms: None,
                        location: format!("{container}/{name}"),
                        preview: audit::preview(&content),
                    });
                }
            }
            OutputKind::Outbox { function, writes } => {
                let lines = local.kept(function, &output.name)?;
                // The identities a store holds once, whatever the copies: the last one is it.
                let mut held: BTreeMap<String, usize> = BTreeMap::new();
                let mut kept: Vec<Option<Effect>> = Vec::new();
                for (index, line) in lines.iter().enumerate() {
                    let body = outbox_body(line);
                    let effect = Effect {
                        output: output.name.clone(),
                        key: key_of(&output.name, &body),
                        at_ms: line["keptAt"]
                            .as_str()
                            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                            .map(|t| {
                                (t.with_timezone(&chrono::Utc) - started)
                                    .num_milliseconds()
                                    .max(0) as u64
                            }),
                        location: format!("outbox/{function}/{}.jsonl:{}", output.name, index + 1),
                        preview: audit::preview(&body),
                    };
                    match identity(*writes, &line["value"]) {
                        Some(id) => {
                            if let Some(earlier) = held.insert(id, kept.len()) {
                                kept[earlier] = None;
                            }
                            kept.push(Some(effect));
                        }
                        None => kept.push(Some(effect)),
                    }
                }
                effects.extend(kept.into_iter().flatten());
            }
        }
    }
    Ok(effects)
}

/// An outbox line's item as bytes: a string's text, other JSON as its text, `bytes` decoded.
fn outbox_body(line: &Value) -> Vec<u8> {
    match (&line["value"], line["bytes"].as_str()) {
        (_, Some(b64)) => base64::Engine::decode(&base64::engine::general_purpose::STANDARD, b64)
            .unwrap_or_default(),
        (Value::String(text), None) => text.clone().into_bytes(),
        (value, None) => value.to_string().into_bytes(),
    }
}

/// The identity under which the service holds an item once (a repeat replaces it), if it does.
fn identity(writes: Writes, value: &Value) -> Option<String> {
    // A string holding a JSON object is that object to the service.
    let parsed;
    let value = match value {
        Value::String(text) => {
            parsed = serde_json::from_str::<Value>(text).ok()?;
            &parsed
        }
        other => other,
    };
    let member = |name: &str| {
        value
            .as_object()?
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
    };
    match writes {
        Writes::Append => None,
        Writes::UpsertById => value.get("id").map(|id| format!("id {id}")),
        Writes::TableEntity if value.get("odata.etag").and_then(Value::as_str) == Some("*") => {
            Some(format!(
                "{:?}/{:?}",
                member("PartitionKey"),
                member("RowKey")
            ))
        }
        Writes::TableEntity => None,
    }
}

/// How a rehearsal's instances run beyond the app's own files: ownership that moves within
/// seconds, small batches, and the function timeout as the drain.
pub(crate) fn timings(function_app: &Path) -> Timings {
    Timings {
        host_json_event_hubs: vec![
            ("loadBalancingUpdateInterval", "00:00:01".into()),
            (
                "partitionOwnershipExpirationInterval",
                format!("00:00:{:02}", OWNERSHIP_EXPIRY.as_secs()).into(),
            ),
            // Batches go as soon as there are events: many small invocations for the faults
            // to fall between, whatever the app's own minimum.
            ("minEventBatchSize", 1.into()),
        ],
        foreign_ownership_expiry: Some(OWNERSHIP_EXPIRY),
        drain: Some(function_timeout(function_app)),
    }
}

/// host.json's `functionTimeout` (30 minutes when unset or unlimited): how long the
/// platform's drain mode lets an execution under way finish when it removes an instance.
fn function_timeout(function_app: &Path) -> Duration {
    FunctionApp::load(function_app)
        .ok()
        .and_then(|app| app.function_timeout().ok())
        .map_or(DEFAULT_FUNCTION_TIMEOUT, |t| {
            t.unwrap_or(DEFAULT_FUNCTION_TIMEOUT)
        })
}

fn generated_inputs(n: usize) -> Vec<Vec<u8>> {
    (1..=n)
        .map(|i| format!(r#"{{"id":"input-{i:05}","n":{i}}}"#).into_bytes())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Scheduled;

    #[tokio::test]
    async fn one_instance_is_driven_by_its_plan_as_events_are_handed_out() {
        let handed_out = Arc::new(tokio::sync::watch::channel(0u64).0);
        let switch = FaultSwitch::new(handed_out.clone(), Default::default(), Default::default());
        let plan = vec![
            Scheduled {
                at_event: 5,
                fault: Fault::OutputFails {
                    output: "out".into(),
                    millis: 60_000,
                },
            },
            Scheduled {
                at_event: 6,
                fault: Fault::Detach { server_busy: true },
            },
            Scheduled {
                at_event: 10,
                fault: Fault::KillHandler,
            },
        ];
        let driver = tokio::spawn(drive_instance(switch.clone(), handed_out.subscribe(), plan));
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!switch.output_failing("out"), "not before its point");
        switch.invocation_starts(5).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(switch.output_failing("out"));
        switch.invocation_starts(5).await;
        tokio::time::timeout(Duration::from_secs(5), switch.kill_requested())
            .await
            .expect("the handler is killed at event 10");
        tokio::time::timeout(Duration::from_secs(5), driver)
            .await
            .expect("the plan ends")
            .unwrap();
    }
}
