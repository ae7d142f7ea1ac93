//! The three ways of forwarding, rehearsed in a simulation: virtual time, the function called
//! in-process, the emulated host's own code around it. A seed gives the same report and the
//! same trace, byte for byte; a failing one shrinks to the faults that still fail it.
//!
//! Here as a user writes it: `cargo test` in the function's own project, nothing running.
//! `HUBHOST_SIMULATED_SEEDS` sets how many seeds the many-seed tests run (200 by default;
//! the README's long form runs 1,000).

use std::path::{Path, PathBuf};

use forward_events::{ByOffset, ForwardOnce, Naive, server};
use hubhost_functions::once::Once;
use hubhost_rehearse::{Fault, FaultKind, Rehearsal, SimulatedHandler};

fn app() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("function_app")
}

/// 300 inputs and 10 faults, every default kind.
fn rehearsal(seed: u64) -> Rehearsal {
    Rehearsal::new(seed).count(300).fault_count(10).key("id")
}

/// The `ForwardOnce` server of an instance, with the instance's own claims, as
/// `WEBSITE_INSTANCE_ID` names it on Azure.
fn forward_once(h: &SimulatedHandler) -> hubhost_functions::server::FunctionServer {
    server(
        ForwardOnce {
            once: Once::for_instance(h.store.clone(), h.instance),
        },
        h.app_folder,
    )
    .unwrap()
}

fn seeds() -> u64 {
    std::env::var("HUBHOST_SIMULATED_SEEDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(200)
}

#[test]
fn the_naive_forwarder_duplicates_the_same_way_every_time_and_shrinks_to_fewer_faults() {
    let simulation = rehearsal(7)
        .simulated(&app(), |h| server(Naive, h.app_folder).unwrap())
        .unwrap();
    // Two runs at once, on two threads: neither the other nor the machine's timing moves them.
    let (first, second) = std::thread::scope(|s| {
        let a = s.spawn(|| simulation.trace().unwrap());
        let b = s.spawn(|| simulation.trace().unwrap());
        (a.join().unwrap(), b.join().unwrap())
    });
    let json = |r: &hubhost_rehearse::Report| serde_json::to_string_pretty(r).unwrap();
    assert_eq!(json(&first.0), json(&second.0));
    if first.1 != second.1 {
        let diff = first.1.lines().zip(second.1.lines()).find(|(a, b)| a != b);
        panic!("the traces differ: {diff:?}");
    }
    let (report, trace) = first;
    assert!(report.simulated && !report.passed, "{}", report.summary());
    assert!(!report.duplicated.is_empty(), "{}", report.summary());
    assert!(report.missing.is_empty(), "{}", report.summary());
    // The trace says what happened, at virtual times: deliveries, ownership, faults.
    for said in ["batch processed", "ownership changing", "pump starting"] {
        assert!(trace.contains(said), "no {said:?} in the trace");
    }
    assert!(
        trace
            .lines()
            .all(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit()))
    );

    let shrunk = simulation
        .shrink(&report)
        .unwrap()
        .expect("a failing seed shrinks");
    assert!(shrunk.faults.len() < report.faults.len(), "{shrunk:?}");
    assert!(shrunk.duplicated > 0, "{shrunk:?}");
    assert!(shrunk.inputs <= report.inputs, "{shrunk:?}");
    // The shrunk plan, replayed as it says, fails the same way.
    let replay = rehearsal(7)
        .only_faults(&shrunk.faults)
        .first_inputs(shrunk.inputs)
        .simulated(&app(), |h| server(Naive, h.app_folder).unwrap())
        .unwrap()
        .run()
        .unwrap();
    assert!(!replay.passed);
    assert_eq!(
        replay.duplicated.len(),
        shrunk.duplicated,
        "{}",
        replay.summary()
    );
    assert!(
        shrunk
            .replay
            .contains(&format!("only_faults(&{:?})", shrunk.faults))
    );
}

#[test]
fn forwarding_once_passes_every_seed_exactly_once() {
    let simulation = rehearsal(0).simulated(&app(), forward_once).unwrap();
    let seeds = simulation.seeds(0..seeds()).unwrap();
    eprintln!("{}", seeds.summary());
    assert!(seeds.failing.is_empty(), "{}", seeds.summary());
}

#[test]
fn numeric_offsets_break_on_geo_replicated_offsets_in_the_simulation_too() {
    let report = rehearsal(3)
        .faults(&[FaultKind::GeoOffsets])
        .simulated(&app(), |h| server(ByOffset, h.app_folder).unwrap())
        .unwrap()
        .run()
        .unwrap();
    assert!(!report.passed, "{}", report.summary());
    assert!(!report.missing.is_empty() || !report.lost_on_azure.is_empty());
}

/// A handler killed mid-invocation is a failed attempt, as on Azure: with `maxRetryCount: 0`
/// its batch is checkpointed past and its inputs are lost, and the simulation says which.
#[test]
fn a_killed_handler_with_no_retries_left_loses_its_batch_as_on_azure() {
    let dir = tempfile::tempdir().unwrap();
    copy(&app(), dir.path());
    let file = dir.path().join("Forward/function.json");
    let mut function: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    function["retry"] = serde_json::json!({"strategy": "fixedDelay", "maxRetryCount": 0,
        "delayInterval": "00:00:01"});
    std::fs::write(&file, function.to_string()).unwrap();
    let report = rehearsal(21)
        .count(160)
        .faults(&[FaultKind::KillHandler])
        .fault_count(3)
        .simulated(dir.path(), forward_once)
        .unwrap()
        .run()
        .unwrap();
    assert!(report.completed && !report.passed, "{}", report.summary());
    assert_eq!(report.lost_on_azure.len(), 3, "{}", report.summary());
    for given_up in &report.lost_on_azure {
        assert_eq!((given_up.attempts, given_up.max_retry_count), (1, Some(0)));
    }
    assert!(
        report
            .summary()
            .contains(" after 1 failed attempt; policy maxRetryCount 0 (Forward, partition "),
        "{}",
        report.summary()
    );
    // The function did its work before the kill (its Once marks were written): what the
    // host lost is the answer, so the batch's outputs are missing.
    let lost: usize = report.lost_on_azure.iter().map(|g| g.events).sum();
    assert_eq!(report.missing.len(), lost, "{}", report.summary());
}

fn copy(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// Partitions added while the function runs (Premium and Dedicated event hubs): the emulated
/// host lists the partitions again as the host's processor does, takes the new ones from their
/// start, and forwarding once stays exactly once.
#[test]
fn partitions_added_while_running_are_read_from_their_start_exactly_once() {
    let simulation = rehearsal(0)
        .faults(&[
            FaultKind::AddPartitions,
            FaultKind::KillHandler,
            FaultKind::ScaleOut,
        ])
        .fault_count(4)
        .simulated(&app(), forward_once)
        .unwrap();
    let (report, trace) = simulation.trace().unwrap();
    assert!(report.passed && report.completed, "{}", report.summary());
    assert!(
        report
            .faults
            .iter()
            .any(|f| f.at_ms.is_some() && matches!(f.scheduled.fault, Fault::AddPartitions { .. })),
        "{}",
        report.summary()
    );
    assert!(
        trace.contains("the event hub's partitions changed"),
        "the instances never saw the new partitions"
    );
    let seeds = simulation.seeds(0..seeds() / 4).unwrap();
    assert!(seeds.failing.is_empty(), "{}", seeds.summary());
}

/// The event hub deleted and created again under its name: the checkpoints stay ahead of the
/// new, empty partitions. As on Azure, the trigger cannot read a partition until it passes its
/// checkpoint, and then skips what came before: the rehearsal reports the inputs missing and
/// the checkpoints past their end, with the command that moves them back.
#[test]
fn a_recreated_event_hub_is_read_only_past_the_old_checkpoints_as_on_azure() {
    let simulation = rehearsal(5)
        .faults(&[FaultKind::RecreateHub])
        .simulated(&app(), forward_once)
        .unwrap();
    let report = simulation.run().unwrap();
    let summary = report.summary();
    assert!(!report.passed, "{summary}");
    assert!(!report.missing.is_empty(), "{summary}");
    assert!(
        report
            .faults
            .iter()
            .any(|f| f.at_ms.is_some() && f.scheduled.fault == Fault::RecreateHub),
        "{summary}"
    );
    if !report.checkpoints_past_end.is_empty() {
        assert!(
            summary.contains("hubhost checkpoints reset --to start"),
            "{summary}"
        );
    }
    // The same seed, the same losses.
    let again = simulation.run().unwrap();
    assert_eq!(
        serde_json::to_string(&again).unwrap(),
        serde_json::to_string(&report).unwrap()
    );
}

/// Forwards each event through `forwarded_typo`, a name its function.json does not declare.
struct Misnamed;

#[hubhost_functions::prelude::async_trait]
impl hubhost_functions::prelude::EventHubFunction for Misnamed {
    async fn run(
        &self,
        batch: hubhost_functions::prelude::TriggerBatch,
        _: &hubhost_functions::prelude::FunctionContext,
    ) -> Result<hubhost_functions::prelude::FunctionOutput, hubhost_functions::prelude::FunctionError>
    {
        let mut output = hubhost_functions::prelude::FunctionOutput::default();
        for event in &batch.events {
            output.send_event_text("forwarded_typo", String::from_utf8_lossy(&event.body));
        }
        Ok(output)
    }
}

#[test]
fn an_output_function_json_does_not_declare_fails_the_rehearsal_naming_the_declared_ones() {
    let report = rehearsal(3)
        .faults(&[])
        .simulated(&app(), |h| server(Misnamed, h.app_folder).unwrap())
        .unwrap()
        .run()
        .unwrap();
    assert!(!report.passed, "{}", report.summary());
    let [said] = &report.undeclared_outputs[..] else {
        panic!("{:?}", report.undeclared_outputs)
    };
    assert!(
        said.contains(r#""forwarded_typo""#) && said.contains("(declared: forwarded)"),
        "{said}"
    );
    assert!(
        report.summary().contains(said.as_str()),
        "{}",
        report.summary()
    );
}
