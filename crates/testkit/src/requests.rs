//! Host requests built as the Functions host builds them, to call a handler without a host.

use chrono::Utc;
use hubhost_functions::batch::{EventRecord, PartitionContext};
use hubhost_functions::contract::encode::{HostInvocation, MetadataFlavor, encode_request};
use hubhost_functions::function_app::EventHubTrigger;

/// The namespace and event hub the requests name (those of `hubhost demo`'s local hub).
pub const NAMESPACE: &str = "hubhost.localhost";
pub const EVENT_HUB: &str = "sensors";

/// The trigger's partition context for `partition` of [`EVENT_HUB`] in `consumer_group`.
pub fn partition_context(partition: u32, consumer_group: &str) -> PartitionContext {
    PartitionContext {
        fully_qualified_namespace: Some(NAMESPACE.into()),
        event_hub_name: Some(EVENT_HUB.into()),
        consumer_group: Some(consumer_group.into()),
        partition_id: partition.to_string(),
        is_checkpointing_after_invocation: Some(true),
    }
}

/// The request body the host sends for `events` of `partition` to the function with `trigger`.
pub fn host_request(
    function: &str,
    trigger: &EventHubTrigger,
    partition: u32,
    events: &[EventRecord],
) -> Vec<u8> {
    let context = partition_context(partition, &trigger.consumer_group);
    encode_request(&HostInvocation {
        function,
        trigger,
        partition: &context,
        events,
        retry: None,
        flavor: MetadataFlavor::Current,
        now: Utc::now(),
        inputs: &[],
    })
    .expect("events built in a test are JSON")
}
