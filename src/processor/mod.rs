//! The event processor: how a pool of instances shares an event hub's partitions.
//!
//! `balancer` decides, as a pure function, which partitions this instance should own each
//! cycle; the I/O around it (the checkpoint store's claims, the partition pumps) builds on it.

pub mod balancer;
