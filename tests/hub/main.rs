//! `hubhost hub` with clients it did not write: the official SDKs as peers over AMQP
//! (`sdk_peers`), the other ways clients reach Event Hubs — TLS, WebSockets, last-enqueued
//! properties (`transports`), Kafka clients on its Kafka endpoint (`kafka`), and a raw-frame
//! AMQP client that breaks every rule while a well-behaved producer keeps sending
//! (`amqp_abuse`). Every hub is a `hubhost hub` process of its own on free ports.
//!
//! `hostile_clients` stays a test binary of its own: it bounds well-behaved clients' latency
//! and the hub's memory while attacks run, which tests of the same binary beside it would
//! disturb (`scripts/test.sh` runs it in the "timed" lane, at a higher priority than the tests
//! that build).

mod amqp_abuse;
mod kafka;
mod sdk_peers;
mod transports;
