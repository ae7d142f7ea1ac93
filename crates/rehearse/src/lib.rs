//! Your function app as Azure runs it, and what Azure will do to it.
//!
//! - [`LocalApp`]: the app under the emulated Functions host, on an [`InProcessHub`], with your
//!   handler executable as the custom handler — from an integration test, nothing to install;
//! - [`Rehearsal`]: the same run with faults on demand — the handler killed mid-batch, an
//!   instance joining and leaving, an owner frozen past its ownership, an output binding
//!   failing, the hub detaching its receive links, the checkpoint store down, geo-replicated
//!   offsets — seeded ([`plan`]), then an audit ([`audit`]) of what the outputs did with each
//!   input: missing and duplicated effects, each with the faults before it. `hubhost rehearse`
//!   is the same from the command line.

pub mod audit;
mod in_process_hub;
mod local_app;
pub mod plan;
mod rehearsal;
pub mod simulation;
mod stage;

pub use audit::{Effect, Findings, Input, Semantics};
pub use hubhost_host::emulate::invoke::{EventsFileError, read_event_bodies};
pub use in_process_hub::{InProcessHub, KEY};
pub use local_app::{LocalApp, LocalAppError, PARTITIONS};
pub use plan::{Fault, FaultKind};
pub use rehearsal::{Rehearsal, Report, Shrunk, drive_instance};
pub use simulation::{Seeds, SimulatedHandler, Simulation};
pub use stage::CheckpointPastEnd;
