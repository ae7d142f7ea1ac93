// The official JavaScript `@azure/event-hubs` package as a peer of `hubhost hub`. Prints JSON.
//
// Usage: node eventhubs_peer.cjs <connection string> <hub> <client options JSON> <operation>
// (with NODE_PATH naming the node_modules that holds the package and `ws`). The client options:
//   {"customEndpointAddress": "sb://localhost:5671", "websocket": true}
// A certificate authority to trust comes as Node's own NODE_EXTRA_CA_CERTS.
//
//   roundtrip   sends one event to partition 0, then subscribes to partition 0 from the start
//               with trackLastEnqueuedEventProperties until that event arrives: its body, the
//               properties the context carried, and the partition's own
//   refused     one management call: the error the client reports

const { EventHubProducerClient, EventHubConsumerClient, earliestEventPosition } =
  require("@azure/event-hubs");
const WebSocket = require("ws");

function clientOptions(text) {
  const given = JSON.parse(text);
  const options = { retryOptions: { maxRetries: 1, timeoutInMs: 20000 } };
  if (given.customEndpointAddress) options.customEndpointAddress = given.customEndpointAddress;
  if (given.websocket) options.webSocketOptions = { webSocket: WebSocket };
  return options;
}

function millis(date) {
  return date ? date.getTime() : null;
}

async function roundtrip(cs, hub, options, tag) {
  const producer = new EventHubProducerClient(cs, hub, options);
  const batch = await producer.createBatch({ partitionId: "0" });
  batch.tryAdd({ body: `${tag}-js` });
  await producer.sendBatch(batch);
  const partition = await producer.getPartitionProperties("0");
  await producer.close();

  const consumer = new EventHubConsumerClient("$Default", cs, hub, options);
  const seen = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("no event within 60 s")), 60000);
    const subscription = consumer.subscribe(
      "0",
      {
        processEvents: async (events, context) => {
          const event = events.find((e) => e.body === `${tag}-js`);
          if (!event) return;
          clearTimeout(timer);
          const last = context.lastEnqueuedEventProperties || {};
          await subscription.close();
          resolve({
            body: event.body,
            last_enqueued: {
              sequence_number: last.sequenceNumber ?? null,
              offset: last.offset ?? null,
              enqueued_time: millis(last.enqueuedOn),
              retrieval_time: millis(last.retrievedOn),
            },
          });
        },
        processError: async (error) => {
          clearTimeout(timer);
          reject(error);
        },
      },
      { startPosition: earliestEventPosition, trackLastEnqueuedEventProperties: true },
    );
  });
  await consumer.close();
  return {
    ...seen,
    partition_last: partition.lastEnqueuedSequenceNumber,
    partition_last_offset: partition.lastEnqueuedOffset,
  };
}

async function refused(cs, hub, options) {
  const producer = new EventHubProducerClient(cs, hub, options);
  try {
    await producer.getEventHubProperties();
    return { error: null };
  } catch (e) {
    // An AggregateError carries the attempts' own errors.
    const inner = (e.errors || []).map((x) => `${x.name}: ${x.message}`).join("; ");
    return { error: `${e.name}: ${e.message}${inner ? ` (${inner})` : ""}` };
  } finally {
    await producer.close();
  }
}

async function main() {
  const [cs, hub, optionsText, op, ...args] = process.argv.slice(2);
  const options = clientOptions(optionsText);
  let result;
  if (op === "roundtrip") result = await roundtrip(cs, hub, options, args[0]);
  else if (op === "refused") result = await refused(cs, hub, options);
  else throw new Error(`unknown operation ${op}`);
  console.log(JSON.stringify(result));
  process.exit(0);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
