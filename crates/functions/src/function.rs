//! What a function is, to the server that runs it: an [`EventHubFunction`] takes one batch of
//! one partition and its [`FunctionContext`], and returns what the host reads back, or a
//! [`FunctionError`] saying what the host must do.

use crate::batch::TriggerBatch;
use crate::context::FunctionContext;
use crate::output::FunctionOutput;

/// Why a function did not process a batch, by what the host must do about it.
#[derive(Debug, thiserror::Error)]
pub enum FunctionError {
    /// The request itself is unusable (e.g. a name that cannot be stored): 400, and delivering
    /// it again would not help.
    #[error("{message}")]
    BadRequest {
        /// A stable, machine-readable code, e.g. `invalid_name`.
        code: &'static str,
        /// What is wrong, in words.
        message: String,
    },
    /// The batch could not be processed now (e.g. storage unreachable): 500, so that the host's
    /// retry policy delivers it again.
    #[error("{message}")]
    Failed {
        /// A stable, machine-readable code, e.g. `storage_unavailable`.
        code: &'static str,
        /// What went wrong, in words.
        message: String,
    },
}

impl FunctionError {
    /// The failure's machine-readable code (the `error` of the answer's JSON).
    pub fn code(&self) -> &'static str {
        match self {
            FunctionError::BadRequest { code, .. } | FunctionError::Failed { code, .. } => code,
        }
    }
}

/// An Event Hubs-triggered function: one batch of one partition in, an answer out.
///
/// The host sends a partition's batches one at a time, in order; batches of different
/// partitions arrive concurrently. A function is registered under its name and found by
/// `POST /{name}`:
///
/// ```
/// use hubhost_functions::prelude::*;
/// use hubhost_functions::function_app::{Cardinality, DataType, EventHubTrigger, FunctionSpec, Trigger};
///
/// struct Echo;
///
/// #[async_trait]
/// impl EventHubFunction for Echo {
///     async fn run(&self, batch: TriggerBatch, context: &FunctionContext) -> Result<FunctionOutput, FunctionError> {
///         context.log(format!("{} events from partition {}", batch.events.len(), context.partition().partition_id));
///         let mut output = FunctionOutput::default();
///         for event in &batch.events {
///             let text = event.text().map_err(|e| FunctionError::BadRequest {
///                 code: "not_text",
///                 message: e.to_string(),
///             })?;
///             output.send_event_text("copies", text);
///         }
///         Ok(output)
///     }
/// }
///
/// // Without an app folder, the function's declaration is given here.
/// let declaration = FunctionSpec {
///     name: "Echo".into(),
///     trigger: Trigger::EventHub(EventHubTrigger {
///         binding_name: "events".into(),
///         event_hub_name: "sensors".into(),
///         consumer_group: "$Default".into(),
///         cardinality: Cardinality::Many,
///         data_type: DataType::String,
///         connection: None,
///     }),
///     retry: None,
///     bindings: Vec::new(),
/// };
/// let server = FunctionServer::builder().event_hub_function(declaration, Echo).build(None)?;
/// assert_eq!(server.function_names(), ["Echo"]);
/// # Ok::<(), hubhost_functions::function_app::FunctionAppError>(())
/// ```
#[async_trait::async_trait]
pub trait EventHubFunction: Send + Sync + 'static {
    /// Processes `batch`. `context` says which invocation this is (its id, the partition, the
    /// host's retry context), takes log lines for the answer's `Logs`, and counts what the
    /// function declared, success or not.
    async fn run(
        &self,
        batch: TriggerBatch,
        context: &FunctionContext,
    ) -> Result<FunctionOutput, FunctionError>;
}
