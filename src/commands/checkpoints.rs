//! `hubhost checkpoints`: list, reset and migrate checkpoints and ownership in the host's blob
//! format (the work is `hubhost_checkpoints::maintenance`; this is the flags, the questions and the
//! printing).

use super::EventHubConnectionArgs;
use hubhost_checkpoints as checkpoint;

use clap::Subcommand;

/// Which checkpoint store and consumer group a `checkpoints` command works on.
#[derive(clap::Args)]
pub struct ScopeArgs {
    /// Storage: a connection string or a directory
    /// [default: HUBHOST_STORAGE, else the AzureWebJobsStorage setting, else ./hubhost-data].
    #[arg(long, env = "HUBHOST_STORAGE", hide_env_values = true)]
    pub storage: Option<String>,
    /// Blob container of the checkpoint store.
    #[arg(long, default_value = hubhost_checkpoints::DEFAULT_CONTAINER)]
    pub container: String,
    /// Fully qualified Event Hubs namespace, e.g. myns.servicebus.windows.net
    /// [default: the Endpoint of the EventHubConnection setting].
    #[arg(long)]
    pub namespace: Option<String>,
    /// Event hub name.
    #[arg(long, env = "EventHubName")]
    pub hub: String,
    #[arg(long, default_value = "$Default")]
    pub consumer_group: String,
    /// Machine-readable output (JSON on stdout).
    #[arg(long)]
    pub json: bool,
}

#[derive(Subcommand)]
pub enum CheckpointsCommand {
    /// Every partition's owner and checkpoint (current format, else legacy).
    List {
        #[command(flatten)]
        scope: ScopeArgs,
    },
    /// Move partitions' checkpoints to the start, the end or a time.
    ///
    /// `--to start` (the oldest retained event), `--to end` (only events sent from now on), or
    /// `--to <RFC 3339 time>` (events enqueued from then on).
    Reset {
        #[command(flatten)]
        scope: ScopeArgs,
        /// `start`, `end`, or an RFC 3339 enqueued time.
        #[arg(long)]
        to: String,
        /// For `end` and a time: the event hub is asked where each partition ends.
        #[command(flatten)]
        event_hub: EventHubConnectionArgs,
        /// Partitions to reset (comma-separated) [default: every partition the store knows].
        #[arg(long, value_delimiter = ',')]
        partitions: Vec<String>,
        /// Reset partitions 0..N-1 (for a hub whose partitions the store does not know yet).
        #[arg(long, conflicts_with = "partitions")]
        partition_count: Option<u32>,
        /// Do not ask for confirmation.
        #[arg(long)]
        yes: bool,
    },
    /// Write current-format checkpoints from legacy ones.
    ///
    /// Legacy checkpoints are the Event Hubs extension v3/v4's; the legacy blobs stay.
    Migrate {
        #[command(flatten)]
        scope: ScopeArgs,
        /// Show what would be written without writing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Claim one partition (for tests and repairs): prints whether the claim won.
    #[command(hide = true)]
    Claim {
        #[command(flatten)]
        scope: ScopeArgs,
        #[arg(long)]
        partition: String,
        #[arg(long)]
        owner: String,
        /// The ETag the claim presents; none claims a partition without an ownership blob.
        #[arg(long)]
        etag: Option<String>,
        /// Wait until this Unix time (milliseconds) before claiming, to line up racing claims.
        #[arg(long)]
        at_unix_ms: Option<i64>,
    },
}

fn open_scope(
    scope: &ScopeArgs,
) -> Result<(checkpoint::CheckpointStore, checkpoint::ConsumerGroupKey), String> {
    let env = |k: &str| std::env::var(k).ok();
    let location = hubhost_storage::settings::resolve_storage(scope.storage.as_deref(), env)
        .map_err(|e| e.to_string())?;
    let blobs = location.open().map_err(|e| e.to_string())?;
    let namespace = match &scope.namespace {
        Some(ns) => ns.clone(),
        None => hubhost_eventhubs::eventhub_namespace(env).ok_or(
            "name the Event Hubs namespace with --namespace (e.g. myns.servicebus.windows.net), \
             or set EventHubConnection (or EventHubConnection__fullyQualifiedNamespace)",
        )?,
    };
    let key = checkpoint::ConsumerGroupKey::new(namespace, &scope.hub, &scope.consumer_group)
        .map_err(|e| e.to_string())?;
    Ok((
        checkpoint::CheckpointStore::new(blobs, &scope.container),
        key,
    ))
}

fn print_json(value: &impl serde::Serialize) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).expect("serializable")
    );
}

pub async fn run(action: CheckpointsCommand) -> Result<(), String> {
    use checkpoint::maintenance::{self, ResetTo};
    let fmt_err = |e: checkpoint::CheckpointError| e.to_string();
    match action {
        CheckpointsCommand::List { scope } => {
            let (store, key) = open_scope(&scope)?;
            let rows = maintenance::status(&store, &key).await.map_err(fmt_err)?;
            if scope.json {
                print_json(&rows);
            } else {
                println!("{key} in {}", store.describe());
                if rows.is_empty() {
                    println!("no ownership or checkpoint yet");
                }
                let dash = || "-".to_string();
                for r in &rows {
                    println!(
                        "partition {:>3}  owner {:<38} offset {:>14}  seq {:>10}  at {:<20} {}{}",
                        r.partition_id,
                        r.owner_id.clone().unwrap_or_else(dash),
                        r.offset.clone().unwrap_or_else(dash),
                        r.sequence_number
                            .map(|s| s.to_string())
                            .unwrap_or_else(dash),
                        r.last_modified
                            .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
                            .unwrap_or_else(dash),
                        r.source.unwrap_or("no checkpoint"),
                        r.problem
                            .as_ref()
                            .map(|p| format!("\n    problem: {p}"))
                            .unwrap_or_default(),
                    );
                }
            }
            Ok(())
        }
        CheckpointsCommand::Reset {
            scope,
            to,
            event_hub,
            partitions,
            partition_count,
            yes,
        } => {
            let target_position = ResetTo::parse(&to).map_err(|e| e.to_string())?;
            // The end of each partition, for `end` and a time, from the event hub itself.
            let ends = match target_position.needs_partition_ends() {
                false => None,
                true => {
                    if !event_hub.is_given() {
                        return Err("--to end or a time asks the event hub where its partitions \
                                    end: give --connection or --fully-qualified-namespace, or set \
                                    EventHubConnection or EventHubConnection__fullyQualifiedNamespace"
                            .into());
                    }
                    let target = event_hub.target(&scope.hub)?;
                    let ends = target.partition_ends().await.map_err(|e| e.to_string())?;
                    Some((target, ends))
                }
            };
            let (store, key) = open_scope(&scope)?;
            let selection = if !partitions.is_empty() {
                maintenance::PartitionSelection::Named(partitions)
            } else if let Some(n) = partition_count {
                maintenance::PartitionSelection::Count(n)
            } else if let Some((_, ends)) = &ends {
                maintenance::PartitionSelection::Named(
                    ends.iter().map(|e| e.partition_id.clone()).collect(),
                )
            } else {
                maintenance::PartitionSelection::Known
            };
            let ids = maintenance::select_partitions(&store, &key, selection)
                .await
                .map_err(fmt_err)?;
            if ids.is_empty() {
                return Err(
                    "the store knows no partition of this consumer group: name them with \
                     --partitions or --partition-count"
                        .into(),
                );
            }
            let ownerships = store.list_ownership(&key).await.map_err(fmt_err)?;
            let active = maintenance::active_owners(
                &ownerships,
                &ids,
                chrono::Utc::now(),
                hubhost_checkpoints::FOREIGN_OWNERSHIP_EXPIRY,
            );
            if !active.is_empty() {
                eprintln!(
                    "warning: {} of these partitions are owned by a running consumer; stop it \
                     first, or its next checkpoint will overwrite the reset",
                    active.len()
                );
            }
            let described = target_position.describe();
            if !yes {
                confirm(&format!(
                    "Reset partitions {} of {key} to {described}?",
                    ids.join(",")
                ))?;
            }
            let written = match ends {
                None => maintenance::reset_to_start(&store, &key, &ids)
                    .await
                    .map_err(fmt_err)?,
                Some((target, ends)) => {
                    let mut checkpoints = Vec::new();
                    for id in &ids {
                        let end = ends.iter().find(|e| &e.partition_id == id).ok_or_else(|| {
                            format!("the event hub {} has no partition {id}", target.hub)
                        })?;
                        let last = (!end.is_empty)
                            .then_some((end.last_sequence_number, end.last_offset.as_str()));
                        checkpoints.push(
                            match maintenance::reset_step(id, last, target_position) {
                                maintenance::ResetStep::Write(checkpoint) => checkpoint,
                                maintenance::ResetStep::FindBefore(t) => {
                                    maintenance::checkpoint_before(
                                        &target,
                                        &key.consumer_group,
                                        end,
                                        t,
                                    )
                                    .await
                                    .map_err(|e| e.to_string())?
                                }
                            },
                        );
                    }
                    maintenance::write_checkpoints(&store, &key, &checkpoints)
                        .await
                        .map_err(fmt_err)?;
                    checkpoints
                }
            };
            if scope.json {
                print_json(
                    &written
                        .iter()
                        .map(|c| {
                            serde_json::json!({"partitionId": c.partition_id, "offset": c.offset, "sequenceNumber": c.sequence_number})
                        })
                        .collect::<Vec<_>>(),
                );
            } else {
                println!("reset {} partitions of {key} to {described}", written.len());
            }
            Ok(())
        }
        CheckpointsCommand::Migrate { scope, dry_run } => {
            let (store, key) = open_scope(&scope)?;
            store.ensure_container().await.map_err(fmt_err)?;
            let report = maintenance::migrate(&store, &key, dry_run)
                .await
                .map_err(fmt_err)?;
            if scope.json {
                print_json(&report);
            } else {
                for s in &report.steps {
                    println!(
                        "partition {:>3}  offset {:>14}  seq {:>10}  {}",
                        s.partition_id,
                        s.offset,
                        s.sequence_number,
                        if dry_run && s.action == "migrated" {
                            "would migrate"
                        } else {
                            s.action
                        }
                    );
                }
                for p in &report.problems {
                    println!("problem: {p}");
                }
                let migrated = report
                    .steps
                    .iter()
                    .filter(|s| s.action == "migrated")
                    .count();
                println!(
                    "{migrated} legacy checkpoints {}, {} kept (a current checkpoint exists), {} unreadable",
                    if dry_run { "to migrate" } else { "migrated" },
                    report.steps.len() - migrated,
                    report.problems.len()
                );
            }
            Ok(())
        }
        CheckpointsCommand::Claim {
            scope,
            partition,
            owner,
            etag,
            at_unix_ms,
        } => {
            let (store, key) = open_scope(&scope)?;
            store.ensure_container().await.map_err(fmt_err)?;
            if let Some(at) = at_unix_ms {
                let wait = at - chrono::Utc::now().timestamp_millis();
                if wait > 0 {
                    tokio::time::sleep(std::time::Duration::from_millis(wait as u64)).await;
                }
            }
            let claim = checkpoint::OwnershipClaim {
                partition_id: partition,
                owner_id: owner,
                etag: etag.map(hubhost_storage::ETag::new),
                vouched_expiry: None,
            };
            let won = store
                .claim_ownership(&key, std::slice::from_ref(&claim))
                .await
                .map_err(fmt_err)?;
            print_json(&serde_json::json!({
                "won": !won.is_empty(),
                "etag": won.first().map(|o| o.etag.to_string()),
            }));
            Ok(())
        }
    }
}

/// Asks on the terminal; refuses when nobody can answer (stdin is not a terminal).
fn confirm(question: &str) -> Result<(), String> {
    use std::io::{BufRead, IsTerminal, Write};
    if !std::io::stdin().is_terminal() {
        return Err(format!(
            "{question} Refusing without confirmation: pass --yes"
        ));
    }
    print!("{question} [y/N] ");
    std::io::stdout().flush().ok();
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .map_err(|e| e.to_string())?;
    if matches!(answer.trim(), "y" | "Y" | "yes") {
        Ok(())
    } else {
        Err("not confirmed; nothing changed".into())
    }
}
