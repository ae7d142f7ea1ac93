//! Events through the emulated Functions host to handlers and their outputs, with real
//! processes: `hubhost serve` as the host sees it (`handler`), at-least-once without double
//! counting (`idempotence`), the examples end to end (`examples`), a user's app from a plain
//! test (`local_app`), rehearsals under Azure's faults (`rehearsal`) and traces from producer
//! to outputs (`traces`).
//!
//! The pools (`pool`) and the scale controller (`scale`) stay test binaries of their own: they
//! time balancing, takeovers and drains with many processes, one pool at a time (in
//! `scripts/test.sh`'s "timed" lane).

mod examples;
mod handler;
mod idempotence;
mod local_app;
mod rehearsal;
mod traces;
