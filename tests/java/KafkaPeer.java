// Apache Kafka's own Java client (org.apache.kafka:kafka-clients) as an independent peer of
// `hubhost hub`'s Kafka endpoint, configured as for Event Hubs' (SASL_PLAINTEXT, PLAIN, user
// `$ConnectionString`, the connection string as the password). Each call does one thing and
// prints what the client saw as JSON on stdout. It runs as a single-file program with the jars
// of one client version (`java -cp '.tools/java/kafka-clients-4.4.0/*' tests/java/KafkaPeer.java
// ...`), which scripts/install-test-tools.sh copies from Maven Central (tests/java/kafka-pom.xml);
// it uses only what kafka-clients 3.x and 4.x both have.
//
// usage: KafkaPeer OP BOOTSTRAP CONNECTION_STRING [ARGS...]
//   OP version            the client's version
//   OP produce TOPIC COUNT TAG COMPRESSION
//                         an idempotent producer (acks=all): COUNT records keyed home-(i mod 50),
//                         with headers i and tag; each one's partition and offset
//   OP consume TOPIC GROUP PROTOCOL EXPECT SECONDS
//                         a group member (group.protocol PROTOCOL: classic or consumer) reading
//                         from the committed offsets (or the start), committing after each poll;
//                         stops at EXPECT records or after SECONDS; or the client's error
//   OP admin TOPIC GROUP  the admin client: the topic described, the groups listed and GROUP
//                         described, the earliest and latest offsets, GROUP's committed offsets

import com.fasterxml.jackson.databind.ObjectMapper;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.ConsumerGroupListing;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

@SuppressWarnings("removal")
public class KafkaPeer {
    static final ObjectMapper JSON = new ObjectMapper();

    public static void main(String[] argv) throws Exception {
        String op = argv[0];
        Properties config = new Properties();
        config.put("bootstrap.servers", argv[1]);
        config.put("security.protocol", "SASL_PLAINTEXT");
        config.put("sasl.mechanism", "PLAIN");
        config.put("sasl.jaas.config",
            "org.apache.kafka.common.security.plain.PlainLoginModule required username=\"$ConnectionString\" password=\""
                + argv[2].replace("\"", "\\\"") + "\";");
        List<String> args = Arrays.asList(argv).subList(3, argv.length);
        Object result = switch (op) {
            case "version" -> Map.of("version", clientVersion());
            case "produce" -> produce(config, args.get(0), Integer.parseInt(args.get(1)), args.get(2), args.get(3));
            case "consume" -> consume(config, args.get(0), args.get(1), args.get(2),
                Integer.parseInt(args.get(3)), Integer.parseInt(args.get(4)));
            case "admin" -> admin(config, args.get(0), args.get(1));
            default -> throw new IllegalArgumentException("unknown op " + op);
        };
        System.out.println(JSON.writeValueAsString(result));
        System.exit(0);
    }

    /** The client's version, from the properties file its jar carries (3.x and 4.x alike). */
    static String clientVersion() {
        try (var in = KafkaProducer.class.getResourceAsStream("/kafka/kafka-version.properties")) {
            Properties p = new Properties();
            p.load(in);
            return p.getProperty("version");
        } catch (Exception e) {
            return "unknown";
        }
    }

    static Object produce(Properties config, String topic, int count, String tag, String compression)
            throws Exception {
        config.put("key.serializer", StringSerializer.class.getName());
        config.put("value.serializer", StringSerializer.class.getName());
        config.put("enable.idempotence", "true");
        config.put("acks", "all");
        config.put("compression.type", compression);
        config.put("linger.ms", "5");
        config.put("delivery.timeout.ms", "60000");
        List<Map<String, Object>> placed = new ArrayList<>();
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(config)) {
            List<Future<RecordMetadata>> sends = new ArrayList<>();
            for (int i = 0; i < count; i++) {
                ProducerRecord<String, String> record = new ProducerRecord<>(topic, "home-" + (i % 50), tag + "-" + i);
                record.headers().add("i", String.valueOf(i).getBytes(StandardCharsets.UTF_8));
                record.headers().add("tag", tag.getBytes(StandardCharsets.UTF_8));
                sends.add(producer.send(record));
            }
            producer.flush();
            for (int i = 0; i < count; i++) {
                RecordMetadata meta = sends.get(i).get(60, TimeUnit.SECONDS);
                Map<String, Object> p = new LinkedHashMap<>();
                p.put("i", i);
                p.put("key", "home-" + (i % 50));
                p.put("partition", meta.partition());
                p.put("offset", meta.offset());
                placed.add(p);
            }
        }
        return Map.of("placed", placed, "version", clientVersion());
    }

    static Object consume(Properties config, String topic, String group, String protocol, int expect, int seconds) {
        config.put("key.deserializer", StringDeserializer.class.getName());
        config.put("value.deserializer", StringDeserializer.class.getName());
        config.put("group.id", group);
        config.put("auto.offset.reset", "earliest");
        config.put("enable.auto.commit", "false");
        if (!protocol.equals("classic")) {
            config.put("group.protocol", protocol);
        }
        List<Map<String, Object>> records = new ArrayList<>();
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("records", records);
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(config)) {
            consumer.subscribe(List.of(topic));
            Instant deadline = Instant.now().plusSeconds(seconds);
            while (records.size() < expect && Instant.now().isBefore(deadline)) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                    Map<String, Object> e = new LinkedHashMap<>();
                    e.put("partition", r.partition());
                    e.put("offset", r.offset());
                    e.put("key", r.key());
                    e.put("value", r.value());
                    Map<String, String> headers = new LinkedHashMap<>();
                    for (Header h : r.headers()) {
                        headers.put(h.key(), new String(h.value(), StandardCharsets.UTF_8));
                    }
                    e.put("headers", headers);
                    records.add(e);
                }
                consumer.commitSync();
            }
            out.put("assignment", consumer.assignment().size());
        } catch (RuntimeException e) {
            out.put("error", e.getClass().getName() + ": " + e.getMessage());
        }
        return out;
    }

    static Object admin(Properties config, String topic, String group) throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        try (Admin admin = Admin.create(config)) {
            TopicDescription described = admin.describeTopics(List.of(topic)).allTopicNames()
                .get(60, TimeUnit.SECONDS).get(topic);
            List<Integer> partitions = new ArrayList<>();
            for (TopicPartitionInfo info : described.partitions()) {
                partitions.add(info.partition());
            }
            out.put("topic", Map.of("name", described.name(), "partitions", partitions,
                "internal", described.isInternal()));

            List<String> groups = new ArrayList<>();
            for (ConsumerGroupListing listing : admin.listConsumerGroups().all().get(60, TimeUnit.SECONDS)) {
                groups.add(listing.groupId());
            }
            out.put("groups", groups);
            try {
                ConsumerGroupDescription description = admin.describeConsumerGroups(List.of(group))
                    .describedGroups().get(group).get(60, TimeUnit.SECONDS);
                out.put("group", Map.of("id", description.groupId(), "state", String.valueOf(description.state()),
                    "members", description.members().size()));
            } catch (Exception e) {
                out.put("group_error", String.valueOf(e.getCause() == null ? e : e.getCause()));
            }

            Map<TopicPartition, OffsetSpec> earliest = new HashMap<>();
            Map<TopicPartition, OffsetSpec> latest = new HashMap<>();
            for (int p : partitions) {
                earliest.put(new TopicPartition(topic, p), OffsetSpec.earliest());
                latest.put(new TopicPartition(topic, p), OffsetSpec.latest());
            }
            out.put("earliest", offsets(admin.listOffsets(earliest)));
            out.put("latest", offsets(admin.listOffsets(latest)));

            Map<String, Long> committed = new java.util.TreeMap<>();
            for (Map.Entry<TopicPartition, OffsetAndMetadata> e : admin.listConsumerGroupOffsets(group)
                    .partitionsToOffsetAndMetadata().get(60, TimeUnit.SECONDS).entrySet()) {
                if (e.getValue() != null) {
                    committed.put(String.valueOf(e.getKey().partition()), e.getValue().offset());
                }
            }
            out.put("committed", committed);
        }
        return out;
    }

    static Map<String, Long> offsets(ListOffsetsResult result) throws Exception {
        Map<String, Long> out = new java.util.TreeMap<>();
        for (Map.Entry<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> e : result.all()
                .get(60, TimeUnit.SECONDS).entrySet()) {
            out.put(String.valueOf(e.getKey().partition()), e.getValue().offset());
        }
        return out;
    }
}
