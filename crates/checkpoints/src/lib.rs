//! The checkpoint store: who owns which partition, and where each partition's reading stopped.
//!
//! This is the shared state that lets several instances split an event hub's partitions and
//! lets a new owner resume where the old one stopped. It lives in blobs, in the exact layout the
//! Functions host and the Azure SDKs use (see [`names`]), so a real deployment, the Python SDK and
//! hubhost read each other's state:
//!
//! - an **ownership** is a zero-byte blob whose metadata `ownerid` names the owner; its ETag is
//!   the version a claim must present, its last-modified time is the owner's heartbeat (an
//!   ownership not renewed within the expiry interval counts as abandoned);
//! - a **checkpoint** is a zero-byte blob with metadata `offset` and `sequencenumber`;
//! - a **legacy checkpoint** is the JSON lease blob of extension v3/v4 (`legacy`), read only.
//!
//! Claims are optimistic: an existing ownership is replaced only if its ETag is the one the
//! claimant saw (`If-Match`), a new one only if nobody created it first (`If-None-Match: *`), so
//! of several racing claimants exactly one wins. All of it goes through [`hubhost_storage::BlobStore`], so it
//! runs on every backend: Azure Blob Storage (or Azurite), a local directory, memory.
//!
//! - [`CheckpointStore`] (`store`) makes every request: list and claim ownership, read and
//!   advance checkpoints, read legacy ones;
//! - [`names`]: the blob names of each layout, and the names checked before they become blobs;
//! - [`legacy`]: the JSON lease blobs of extension v3/v4;
//! - [`position`]: where a partition's reading starts, from its checkpoints and the
//!   configured initial position — pure;
//! - [`maintenance`]: what `hubhost checkpoints list|reset|migrate` do, as functions that
//!   return reports;
//! - [`backlog`]: a consumer group's unprocessed events, counted as the scale controller
//!   counts them — pure.
//!
//! It knows blobs and Event Hubs positions (`hubhost-storage`, `hubhost-eventhubs`), and
//! nothing of balancing, pumps or functions: the page, the explorer and `hubhost checkpoints`
//! use it without the processor.

pub mod backlog;
pub mod legacy;
pub mod maintenance;
pub mod names;
pub mod position;
mod store;

pub use legacy::LegacyCheckpoint;
pub use names::ConsumerGroupKey;
pub use position::{InitialPosition, PositionSource, Start, StartPosition};
pub use store::{
    Checkpoint, CheckpointAdvance, CheckpointError, CheckpointStore, ClaimOutcome,
    DEFAULT_CONTAINER, FOREIGN_OWNERSHIP_EXPIRY, Listing, OwnershipClaim, PartitionOwnership,
    checkpoint_from_metadata,
};
