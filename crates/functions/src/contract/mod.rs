//! The Azure Functions host ⇄ custom handler contract for Event Hubs triggers.
//!
//! The host POSTs `{"Data": {...}, "Metadata": {...}}` to `/{FunctionName}` and expects
//! `{"Outputs":…,"Logs":[…],"ReturnValue":…}` back (docs/host-contract.md).
//! Its encoding is peculiar: a batch arrives as a JSON *string* holding a JSON array, numbers and
//! strings in Metadata arrive as JSON text inside strings, binary as base64.
//! - [`decode`] turns any shape the host sends (current, early v5 and legacy v3/v4 extensions,
//!   cardinality one/many, dataType string/binary/unset) into a typed [`crate::batch::TriggerBatch`];
//! - [`encode`] builds, byte for byte, the request the host would send for a batch — used by the
//!   demo, the tests, the benchmark and the emulated host;
//! - [`http_request`] and [`timer_request`] build the requests of HTTP- and timer-triggered
//!   functions, as the host builds them;
//! - [`response`] is the answer;
//! - [`json_text`] is the JSON-text-in-a-string encoding both directions share, in one pass.

pub mod decode;
pub mod encode;
pub mod http_request;
pub mod json_text;
pub mod newtonsoft;
pub mod response;
pub mod timer_request;

/// Why a request cannot be decoded. Each message names the offending part of the request.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ContractError {
    /// The body is not JSON (the parser's message).
    #[error("the request body is not valid JSON: {0}")]
    MalformedJson(String),
    /// The body has no `Data` object.
    #[error("the request has no \"Data\" object")]
    MissingData,
    /// `Data` lacks the trigger's binding name.
    #[error(
        "\"Data\" has no binding named '{expected}' (function {function} declares it in function.json); found: {found:?}"
    )]
    MissingBinding {
        /// The function the request is for.
        function: String,
        /// The trigger's binding name from function.json.
        expected: String,
        /// The keys `Data` has.
        found: Vec<String>,
    },
    /// The events are not in the shape cardinality and dataType promise.
    #[error("Data.{binding} is not what the trigger's function.json promises: {problem}")]
    BadData {
        /// The trigger's binding name.
        binding: String,
        /// What is wrong with it.
        problem: String,
    },
    /// A `binary` event is not base64.
    #[error("Data.{binding}[{index}] is not valid base64 (the trigger has dataType binary)")]
    InvalidBase64 {
        /// The trigger's binding name.
        binding: String,
        /// The event's index in the batch.
        index: usize,
    },
    /// A metadata array is not one entry per event.
    #[error(
        "the batch's metadata arrays disagree: Data.{binding} has {events} events but Metadata.{key} has {len}"
    )]
    LengthMismatch {
        /// The trigger's binding name.
        binding: String,
        /// The metadata key, e.g. `SystemPropertiesArray`.
        key: String,
        /// Events in `Data`.
        events: usize,
        /// Entries in the metadata array.
        len: usize,
    },
    /// A metadata value cannot be read.
    #[error("Metadata.{key} is malformed: {problem}")]
    BadMetadata {
        /// The metadata key.
        key: String,
        /// What is wrong with it.
        problem: String,
    },
    /// No partition context: the batch cannot be placed.
    #[error(
        "Metadata has no TriggerPartitionContext or PartitionContext with a PartitionId: cannot tell which partition the batch came from"
    )]
    MissingPartitionContext,
}

impl ContractError {
    /// A stable, machine-readable code for the JSON error body.
    pub fn code(&self) -> &'static str {
        match self {
            ContractError::MalformedJson(_) => "malformed_json",
            ContractError::MissingData => "missing_data",
            ContractError::MissingBinding { .. } => "missing_binding",
            ContractError::BadData { .. } => "bad_data",
            ContractError::InvalidBase64 { .. } => "invalid_base64",
            ContractError::LengthMismatch { .. } => "metadata_length_mismatch",
            ContractError::BadMetadata { .. } => "bad_metadata",
            ContractError::MissingPartitionContext => "missing_partition_context",
        }
    }
}
