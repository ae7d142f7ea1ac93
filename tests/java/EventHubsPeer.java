// The official Java Event Hubs SDK (com.azure:azure-messaging-eventhubs) as an independent peer
// of `hubhost hub`: each call does one thing a Java application does and prints what the SDK
// saw as JSON on stdout, for a Rust test to check. It runs as a single-file program
// (`java -cp '.tools/java/eventhubs/*' tests/java/EventHubsPeer.java ...`), with the jars that
// scripts/install-test-tools.sh copies from Maven Central (tests/java/eventhubs-pom.xml).
//
// usage: EventHubsPeer OPTIONS_JSON OP [ARGS...]
//   OPTIONS_JSON: {"connectionString", "hub", "customEndpoint"?, "webSockets"?,
//                  "tryTimeoutSeconds"? (one try, no retries)}
//   OP send COUNT TAG           COUNT events, event i to partition i mod the partition count,
//                               each a JSON body {"tag", "i"}
//   OP produce TAG              events to partition 0 by id, under one partition key, and a
//                               batch to partition 1 filled to the size limit; what was sent
//   OP receive PARTITION POSITION COUNT SECONDS
//                               POSITION: earliest, latest, offset:O, seq:N (exclusive),
//                               seq-inclusive:N, time:RFC3339; the events, each with the last
//                               enqueued event's properties, and the partition's properties
//   OP latest PARTITION TAG     a receiver from "latest", then two events sent: what it got
//   OP properties               the hub's and each partition's properties
//   OP oversized                one event over the size limit: the SDK's error
//   OP process OWNER STORAGE CONTAINER SECONDS
//                               an EventProcessorClient with the blob checkpoint store: a
//                               line of JSON per partition opened or closed and per event,
//                               checkpointing each event, until SECONDS pass or stdin closes

import com.azure.core.amqp.AmqpRetryOptions;
import com.azure.core.amqp.AmqpTransportType;
import com.azure.messaging.eventhubs.EventData;
import com.azure.messaging.eventhubs.EventDataBatch;
import com.azure.messaging.eventhubs.EventHubClientBuilder;
import com.azure.messaging.eventhubs.EventHubConsumerClient;
import com.azure.messaging.eventhubs.EventHubProducerClient;
import com.azure.messaging.eventhubs.EventHubProperties;
import com.azure.messaging.eventhubs.EventProcessorClient;
import com.azure.messaging.eventhubs.EventProcessorClientBuilder;
import com.azure.messaging.eventhubs.PartitionProperties;
import com.azure.messaging.eventhubs.checkpointstore.blob.BlobCheckpointStore;
import com.azure.messaging.eventhubs.models.CreateBatchOptions;
import com.azure.messaging.eventhubs.models.EventPosition;
import com.azure.messaging.eventhubs.models.LastEnqueuedEventProperties;
import com.azure.messaging.eventhubs.models.PartitionEvent;
import com.azure.messaging.eventhubs.models.ReceiveOptions;
import com.azure.messaging.eventhubs.models.SendOptions;
import com.azure.storage.blob.BlobContainerAsyncClient;
import com.azure.storage.blob.BlobContainerClientBuilder;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

public class EventHubsPeer {
    static final ObjectMapper JSON = new ObjectMapper();
    static final PrintStream OUT = new PrintStream(System.out, true, StandardCharsets.UTF_8);

    public static void main(String[] argv) throws Exception {
        JsonNode options = JSON.readTree(argv[0]);
        String op = argv[1];
        List<String> args = Arrays.asList(argv).subList(2, argv.length);
        Object result;
        switch (op) {
            case "send" -> result = send(options, Integer.parseInt(args.get(0)), args.get(1));
            case "produce" -> result = produce(options, args.get(0));
            case "receive" -> result = receive(options, args.get(0), args.get(1),
                Integer.parseInt(args.get(2)), Integer.parseInt(args.get(3)));
            case "latest" -> result = latest(options, args.get(0), args.get(1));
            case "properties" -> result = properties(options);
            case "oversized" -> result = oversized(options);
            case "process" -> {
                process(options, args.get(0), args.get(1), args.get(2), Integer.parseInt(args.get(3)));
                result = null;
            }
            default -> throw new IllegalArgumentException("unknown op " + op);
        }
        if (result != null) {
            OUT.println(JSON.writeValueAsString(result));
        }
        // The SDK's Reactor and Netty threads are not daemons: end with the answer printed.
        System.exit(0);
    }

    static EventHubClientBuilder client(JsonNode options) {
        EventHubClientBuilder builder = new EventHubClientBuilder()
            .connectionString(options.get("connectionString").asText(), options.get("hub").asText());
        if (options.hasNonNull("customEndpoint")) {
            builder.customEndpointAddress(options.get("customEndpoint").asText());
        }
        if (options.path("webSockets").asBoolean(false)) {
            builder.transportType(AmqpTransportType.AMQP_WEB_SOCKETS);
        }
        if (options.hasNonNull("tryTimeoutSeconds")) {
            builder.retryOptions(new AmqpRetryOptions().setMaxRetries(0)
                .setTryTimeout(Duration.ofSeconds(options.get("tryTimeoutSeconds").asLong())));
        }
        return builder;
    }

    static EventData event(String body, Map<String, Object> properties) {
        EventData data = new EventData(body);
        data.getProperties().putAll(properties);
        return data;
    }

    static Object send(JsonNode options, int count, String tag) {
        try (EventHubProducerClient producer = client(options).buildProducerClient()) {
            List<String> ids = new ArrayList<>();
            producer.getPartitionIds().forEach(ids::add);
            for (String id : ids) {
                EventDataBatch batch = producer.createBatch(new CreateBatchOptions().setPartitionId(id));
                for (int i = ids.indexOf(id); i < count; i += ids.size()) {
                    if (!batch.tryAdd(new EventData("{\"tag\":\"" + tag + "\",\"i\":" + i + "}"))) {
                        producer.send(batch);
                        batch = producer.createBatch(new CreateBatchOptions().setPartitionId(id));
                        batch.tryAdd(new EventData("{\"tag\":\"" + tag + "\",\"i\":" + i + "}"));
                    }
                }
                if (batch.getCount() > 0) {
                    producer.send(batch);
                }
            }
            return Map.of("sent", count, "partitions", ids.size());
        }
    }

    /** Partition ids, a partition key, and a batch filled until the SDK says it is full. */
    static Object produce(JsonNode options, String tag) {
        Map<String, Object> out = new LinkedHashMap<>();
        try (EventHubProducerClient producer = client(options).buildProducerClient()) {
            EventDataBatch byId = producer.createBatch(new CreateBatchOptions().setPartitionId("0"));
            for (int i = 0; i < 3; i++) {
                byId.tryAdd(event(tag + "-id-" + i, Map.of("i", i, "tag", tag)));
            }
            producer.send(byId);
            List<EventData> keyed = new ArrayList<>();
            for (int i = 0; i < 5; i++) {
                keyed.add(event(tag + "-key-" + i, Map.of("i", i)));
            }
            producer.send(keyed, new SendOptions().setPartitionKey(tag + "-home"));

            EventDataBatch full = producer.createBatch(new CreateBatchOptions().setPartitionId("1"));
            String kilobyte = "x".repeat(1024);
            int added = 0;
            while (full.tryAdd(event(tag + "-full-" + added + "-" + kilobyte, Map.of()))) {
                added++;
            }
            producer.send(full);
            out.put("full_batch_events", added);
            out.put("full_batch_bytes", full.getSizeInBytes());
            out.put("max_batch_bytes", full.getMaxSizeInBytes());
        }
        return out;
    }

    static EventPosition position(String text) {
        if (text.equals("earliest")) return EventPosition.earliest();
        if (text.equals("latest")) return EventPosition.latest();
        String value = text.substring(text.indexOf(':') + 1);
        if (text.startsWith("offset:")) return EventPosition.fromOffsetString(value);
        if (text.startsWith("seq-inclusive:")) return EventPosition.fromSequenceNumber(Long.parseLong(value), true);
        if (text.startsWith("seq:")) return EventPosition.fromSequenceNumber(Long.parseLong(value), false);
        if (text.startsWith("time:")) return EventPosition.fromEnqueuedTime(Instant.parse(value));
        throw new IllegalArgumentException("unknown position " + text);
    }

    static Map<String, Object> describe(EventData data) {
        Map<String, Object> e = new LinkedHashMap<>();
        e.put("body", data.getBodyAsString());
        e.put("sequence", data.getSequenceNumber());
        e.put("offset", data.getOffsetString());
        e.put("enqueued", data.getEnqueuedTime().toString());
        e.put("partition_key", data.getPartitionKey());
        e.put("properties", data.getProperties());
        return e;
    }

    static Map<String, Object> describe(PartitionProperties p) {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("id", p.getId());
        out.put("beginning_sequence", p.getBeginningSequenceNumber());
        out.put("last_sequence", p.getLastEnqueuedSequenceNumber());
        out.put("last_offset", p.getLastEnqueuedOffset());
        out.put("last_enqueued", p.getLastEnqueuedTime().toString());
        out.put("empty", p.isEmpty());
        return out;
    }

    static Object receive(JsonNode options, String partition, String from, int count, int seconds) {
        Map<String, Object> out = new LinkedHashMap<>();
        try (EventHubConsumerClient consumer = client(options).consumerGroup("$Default").buildConsumerClient()) {
            List<Object> events = new ArrayList<>();
            Instant deadline = Instant.now().plusSeconds(seconds);
            EventPosition at = position(from);
            ReceiveOptions tracking = new ReceiveOptions().setTrackLastEnqueuedEventProperties(true);
            // One receive at a time until COUNT events arrive: each call starts a receiver at
            // the position after the last event seen.
            while (events.size() < count && Instant.now().isBefore(deadline)) {
                for (PartitionEvent pe : consumer.receiveFromPartition(partition, count - events.size(), at,
                        Duration.ofSeconds(3), tracking)) {
                    Map<String, Object> e = describe(pe.getData());
                    LastEnqueuedEventProperties last = pe.getLastEnqueuedEventProperties();
                    Map<String, Object> l = new LinkedHashMap<>();
                    l.put("sequence", last == null ? null : last.getSequenceNumber());
                    l.put("offset", last == null ? null : last.getOffsetString());
                    l.put("enqueued", last == null || last.getEnqueuedTime() == null ? null : last.getEnqueuedTime().toString());
                    l.put("retrieved", last == null || last.getRetrievalTime() == null ? null : last.getRetrievalTime().toString());
                    e.put("last_enqueued", l);
                    events.add(e);
                    at = EventPosition.fromSequenceNumber(pe.getData().getSequenceNumber(), false);
                }
            }
            out.put("events", events);
            out.put("partition", describe(consumer.getPartitionProperties(partition)));
        }
        return out;
    }

    /** A receiver from "latest" sees only what is sent after it attached. */
    static Object latest(JsonNode options, String partition, String tag) throws Exception {
        List<Object> events = new ArrayList<>();
        CountDownLatch two = new CountDownLatch(2);
        var consumer = client(options).consumerGroup("$Default").buildAsyncConsumerClient();
        var subscription = consumer.receiveFromPartition(partition, EventPosition.latest())
            .subscribe(pe -> {
                synchronized (events) {
                    events.add(describe(pe.getData()));
                }
                two.countDown();
            });
        // The receiver attaches after the subscription, on the SDK's own threads: give it time
        // before sending (the SDK offers no signal that its link is open).
        Thread.sleep(3000);
        try (EventHubProducerClient producer = client(options).buildProducerClient()) {
            EventDataBatch batch = producer.createBatch(new CreateBatchOptions().setPartitionId(partition));
            batch.tryAdd(event(tag + "-after-0", Map.of()));
            batch.tryAdd(event(tag + "-after-1", Map.of()));
            producer.send(batch);
        }
        two.await(30, TimeUnit.SECONDS);
        subscription.dispose();
        consumer.close();
        synchronized (events) {
            return Map.of("events", new ArrayList<>(events));
        }
    }

    static Object properties(JsonNode options) {
        Map<String, Object> out = new LinkedHashMap<>();
        try (EventHubProducerClient producer = client(options).buildProducerClient()) {
            EventHubProperties hub = producer.getEventHubProperties();
            out.put("name", hub.getName());
            out.put("created", hub.getCreatedAt().toString());
            List<String> ids = new ArrayList<>();
            hub.getPartitionIds().forEach(ids::add);
            out.put("partition_ids", ids);
            List<Object> partitions = new ArrayList<>();
            for (String id : ids) {
                partitions.add(describe(producer.getPartitionProperties(id)));
            }
            out.put("partitions", partitions);
        }
        return out;
    }

    /** One event larger than a batch may be: the SDK's own refusal, before anything is sent. */
    static Object oversized(JsonNode options) {
        Map<String, Object> out = new LinkedHashMap<>();
        try (EventHubProducerClient producer = client(options).buildProducerClient()) {
            EventDataBatch batch = producer.createBatch();
            boolean added;
            try {
                added = batch.tryAdd(new EventData(new byte[1024 * 1024 + 1]));
                out.put("added", added);
            } catch (RuntimeException e) {
                out.put("added", false);
                out.put("error", e.getClass().getSimpleName() + ": " + e.getMessage());
            }
            out.put("max_batch_bytes", batch.getMaxSizeInBytes());
        }
        return out;
    }

    static synchronized void line(Map<String, Object> fields) {
        try {
            OUT.println(JSON.writeValueAsString(fields));
        } catch (Exception e) {
            throw new RuntimeException(e);
        }
    }

    /**
     * An EventProcessorClient beside others of its consumer group: the load balancer at 2 s and
     * ownership expiring after 10 s (the SDK's defaults are 10 s and 2 min), so a test sees a
     * takeover in seconds.
     */
    static void process(JsonNode options, String owner, String storage, String container, int seconds)
            throws Exception {
        BlobContainerAsyncClient blobs = new BlobContainerClientBuilder()
            .connectionString(storage).containerName(container).buildAsyncClient();
        EventProcessorClientBuilder builder = new EventProcessorClientBuilder()
            .connectionString(options.get("connectionString").asText(), options.get("hub").asText())
            .consumerGroup("$Default")
            .checkpointStore(new BlobCheckpointStore(blobs))
            .loadBalancingUpdateInterval(Duration.ofSeconds(2))
            .partitionOwnershipExpirationInterval(Duration.ofSeconds(10))
            .initialPartitionEventPosition(partition -> EventPosition.earliest())
            .processPartitionInitialization(init -> line(Map.of(
                "owner", owner, "opened", init.getPartitionContext().getPartitionId())))
            .processPartitionClose(close -> line(Map.of(
                "owner", owner, "closed", close.getPartitionContext().getPartitionId(),
                "reason", close.getCloseReason().toString())))
            .processEvent(context -> {
                EventData data = context.getEventData();
                Map<String, Object> e = new LinkedHashMap<>();
                e.put("owner", owner);
                e.put("partition", context.getPartitionContext().getPartitionId());
                e.put("sequence", data.getSequenceNumber());
                e.put("body", data.getBodyAsString());
                line(e);
                context.updateCheckpoint();
            })
            .processError(error -> line(Map.of(
                "owner", owner, "error", String.valueOf(error.getThrowable()),
                "partition", String.valueOf(error.getPartitionContext().getPartitionId()))));
        if (options.hasNonNull("customEndpoint")) {
            builder.customEndpointAddress(options.get("customEndpoint").asText());
        }
        EventProcessorClient processor = builder.buildEventProcessorClient();
        processor.start();
        line(Map.of("owner", owner, "started", true));
        // Until the test closes stdin (or kills the process), or SECONDS pass.
        Thread waiter = new Thread(() -> {
            try {
                while (System.in.read() != -1) {
                }
            } catch (Exception ignored) {
            }
        });
        waiter.setDaemon(true);
        waiter.start();
        waiter.join(seconds * 1000L);
        processor.stop();
        line(Map.of("owner", owner, "stopped", true));
    }
}
