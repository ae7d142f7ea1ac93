//! One emulated instance's triggers: a processor per Event Hubs function of the app, every one
//! delivering its batches to the same handler, as one Functions instance does.
//!
//! `emulate::run` starts one for its process; `hubhost demo` starts several in one process to
//! show a pool sharing the partitions. Both go through [`InstanceTriggers::start`], so there is
//! one wiring from function declarations to running processors.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use hubhost_checkpoints::{CheckpointStore, ConsumerGroupKey};
use hubhost_functions::function_app::Cardinality;
use hubhost_processor::source::{AmqpSource, EventHubs};
use hubhost_processor::{
    Consumer, EventProcessor, ProcessorError, ProcessorOptions, ProcessorStats,
};

use crate::emulate::dispatch::AttemptStats;
use crate::emulate::faults::FaultSwitch;
use crate::emulate::{EmulateError, FunctionDispatch, FunctionTarget, NoAnswerRule};
use crate::invoker::Invoker;

/// How an instance delivers batches beyond the function's own settings.
#[derive(Clone)]
pub struct Delivery {
    /// How long a stopping instance lets a batch under retry go on.
    pub drain: std::time::Duration,
    /// A rehearsal's switches, when one runs.
    pub faults: Option<Arc<FaultSwitch>>,
    /// host.json's `functionTimeout` (none: no limit).
    pub function_timeout: Option<std::time::Duration>,
    /// Told when an invocation outlived `function_timeout`: the host then restarts the handler.
    pub timed_out: Arc<tokio::sync::Notify>,
    /// What a delivery the handler gave no answer to counts as.
    pub no_answer: NoAnswerRule,
    /// A simulation's event hubs; `None`: the event hubs the triggers' connections name, over
    /// AMQP.
    pub hubs: Option<Arc<dyn EventHubs>>,
}

impl std::fmt::Debug for Delivery {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.debug_struct("Delivery")
            .field("drain", &self.drain)
            .field("function_timeout", &self.function_timeout)
            .field("no_answer", &self.no_answer)
            .field("simulated_hubs", &self.hubs.is_some())
            .finish_non_exhaustive()
    }
}

impl Default for Delivery {
    fn default() -> Self {
        Delivery {
            drain: crate::emulate::DRAIN,
            faults: None,
            function_timeout: None,
            timed_out: Arc::new(tokio::sync::Notify::new()),
            no_answer: NoAnswerRule::Redeliver,
            hubs: None,
        }
    }
}

/// The running processors of one instance (owner id).
pub struct InstanceTriggers {
    counts: TriggerCounts,
    processors: JoinSet<Result<(), ProcessorError>>,
}

/// What one instance's processors count, readable while they run (cheap to clone: the
/// counters are shared).
#[derive(Clone)]
pub struct TriggerCounts {
    owner: String,
    consumers: Vec<Arc<Consumer>>,
    /// Each consumer's function's invocation attempts, in the same order.
    attempts: Vec<Arc<AttemptStats>>,
}

impl InstanceTriggers {
    /// Starts one processor per function under `owner`, each stopping when `stop` is
    /// cancelled (after finishing its batches, checkpointing and relinquishing).
    pub fn start(
        functions: &[FunctionTarget],
        store: &CheckpointStore,
        options: &ProcessorOptions,
        invoker: &Invoker,
        owner: &str,
        stop: &CancellationToken,
        delivery: &Delivery,
    ) -> Result<Self, EmulateError> {
        let (consumers, attempts): (Vec<_>, Vec<_>) =
            consumers(functions, store, options, invoker, delivery)?
                .into_iter()
                .unzip();
        let mut processors = JoinSet::new();
        for (i, consumer) in consumers.iter().enumerate() {
            let owner = super::super::processor_owner(functions, i, owner);
            let processor = EventProcessor::new(consumer.clone(), owner);
            processors.spawn(processor.run(stop.child_token()));
        }
        Ok(InstanceTriggers {
            counts: TriggerCounts {
                owner: owner.to_string(),
                consumers,
                attempts,
            },
            processors,
        })
    }

    /// What the processors count; a handle that outlives this value.
    pub fn counts(&self) -> &TriggerCounts {
        &self.counts
    }

    /// Resolves when a processor ends before being told to stop — only a configuration
    /// error or a bug ends one early; never resolves otherwise.
    pub async fn failure(&mut self) -> EmulateError {
        loop {
            match self.processors.join_next().await.map(outcome) {
                Some(Err(e)) => return e,
                Some(Ok(())) => continue,
                None => std::future::pending().await,
            }
        }
    }

    /// Waits for every processor to stop (cancel the `stop` token first); the first error.
    pub async fn finish(mut self) -> Result<(), EmulateError> {
        let mut first = Ok(());
        while let Some(ended) = self.processors.join_next().await {
            let ended = outcome(ended);
            if first.is_ok() {
                first = ended;
            }
        }
        first
    }
}

impl TriggerCounts {
    /// The owner id the instance claims partitions under.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// One consumer per function, with its counters.
    pub fn consumers(&self) -> &[Arc<Consumer>] {
        &self.consumers
    }

    /// Each function's invocation attempts.
    pub fn attempts(&self) -> &[Arc<AttemptStats>] {
        &self.attempts
    }

    /// Events `function`'s processor has delivered and seen answered.
    pub fn processed(&self, function: &str) -> u64 {
        self.of(function)
            .map(|c| c.stats.events.load(Ordering::Relaxed))
            .sum()
    }

    /// Per partition, the last sequence number `function`'s processor handed to the function
    /// (the partitions this instance has read since it started, owned now or not).
    pub fn positions(&self, function: &str) -> std::collections::BTreeMap<String, i64> {
        let mut positions = std::collections::BTreeMap::new();
        for consumer in self.of(function) {
            let progress = consumer.stats.progress.lock().expect("progress lock");
            for (partition, &sequence_number) in progress.iter() {
                let at = positions
                    .entry(partition.clone())
                    .or_insert(sequence_number);
                *at = (*at).max(sequence_number);
            }
        }
        positions
    }

    /// Partitions `function`'s processor is pumping now.
    pub fn partitions_owned(&self, function: &str) -> u64 {
        self.of(function)
            .map(|c| c.stats.pumps_running.load(Ordering::Relaxed))
            .sum()
    }

    /// One progress line: per consumer group, partitions, events and batches, and each
    /// partition whose batch is being retried, with its last error.
    pub fn progress_line(&self) -> String {
        let mut parts: Vec<String> = self
            .consumers
            .iter()
            .map(|c| {
                format!(
                    "{}: {} partitions, {} events, {} batches ({} failed)",
                    c.consumer_group(),
                    c.stats.pumps_running.load(Ordering::Relaxed),
                    c.stats.events.load(Ordering::Relaxed),
                    c.stats.batches.load(Ordering::Relaxed),
                    c.stats.failed_batches.load(Ordering::Relaxed),
                )
            })
            .collect();
        for attempts in &self.attempts {
            for (partition, retrying) in attempts.retrying() {
                parts.push(format!(
                    "{} retrying partition {partition} for {} s (attempt {}): {}",
                    attempts.function,
                    retrying.since.elapsed().as_secs(),
                    retrying.attempts + 1,
                    retrying.last_error.chars().take(120).collect::<String>()
                ));
            }
        }
        parts.join(" | ")
    }

    fn of(&self, function: &str) -> impl Iterator<Item = &Arc<Consumer>> {
        self.consumers
            .iter()
            .filter(move |c| c.function == function)
    }
}

/// How a processor's task ended: its own result, or its panic.
fn outcome(
    joined: Result<Result<(), ProcessorError>, tokio::task::JoinError>,
) -> Result<(), EmulateError> {
    match joined {
        Ok(result) => result.map_err(EmulateError::from),
        Err(panic) => Err(EmulateError::ProcessorPanicked(panic.to_string())),
    }
}

/// A function's consumer, and its invocation attempts.
type ConsumerAndAttempts = (Arc<Consumer>, Arc<AttemptStats>);

/// One processor's consumer per function, all calling the handler at `invoker`, each with its
/// function's attempts.
fn consumers(
    functions: &[FunctionTarget],
    store: &CheckpointStore,
    options: &ProcessorOptions,
    invoker: &Invoker,
    delivery: &Delivery,
) -> Result<Vec<ConsumerAndAttempts>, EmulateError> {
    functions
        .iter()
        .map(|f| {
            let key = ConsumerGroupKey::new(
                f.target.namespace.clone(),
                f.target.hub.clone(),
                f.trigger.consumer_group.clone(),
            )?;
            let attempts = Arc::new(AttemptStats::new(&f.spec.name));
            let consumer = Arc::new(Consumer {
                function: f.spec.name.clone(),
                connection: f.trigger.connection.clone().unwrap_or_default(),
                target: f.target.clone(),
                key,
                store: store.clone(),
                options: options.clone(),
                single_event: f.trigger.cardinality == Cardinality::One,
                handler: Arc::new(FunctionDispatch {
                    invoker: invoker.clone(),
                    function: f.spec.name.clone(),
                    trigger: f.trigger.clone(),
                    retry: f.spec.retry.clone(),
                    inputs: f.inputs.clone(),
                    outputs: f.outputs.clone(),
                    faults: delivery.faults.clone(),
                    drain: delivery.drain,
                    function_timeout: delivery.function_timeout,
                    timed_out: delivery.timed_out.clone(),
                    no_answer: delivery.no_answer,
                    attempts: attempts.clone(),
                }),
                stats: Arc::new(ProcessorStats::default()),
                events: match &delivery.hubs {
                    Some(hubs) => hubs.source(&f.target),
                    None => Arc::new(AmqpSource::new(f.target.clone())),
                },
            });
            Ok((consumer, attempts))
        })
        .collect()
}
