//! hubhost: Azure Event Hubs consumers as an Azure Functions custom handler, with a local
//! emulation mode. See ARCHITECTURE.md for the map of the code.

pub mod app;
pub mod batch;
pub mod bench;
pub mod checkpoint;
pub mod child;
pub mod contract;
pub mod dashboard;
pub mod demo;
pub mod emulate;
pub mod eventhubs;
pub mod fleet;
pub mod function_app;
pub mod handler;
pub mod hub;
pub mod invoker;
pub mod metrics;
pub mod processor;
pub mod progress;
pub mod settings;
pub mod simulate;
pub mod storage;
