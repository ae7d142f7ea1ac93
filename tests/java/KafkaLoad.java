// One load of Apache Kafka's Java client, the same against any broker: scripts/bench-brokers.sh
// runs it against `hubhost hub`'s Kafka endpoint and against Apache Kafka's own broker, in
// turns, and compares. With an idempotent producer (acks=all, linger.ms=5) it sends RECORDS
// records of SIZE bytes as fast as the producer takes them (the produce rate), then 2,000 more
// paced at 1,000 a second, timing each from the call to its acknowledgement (the latencies: at
// full speed they would time the producer's queue), then reads them all back with a new consumer
// group (the fetch rate), and prints the figures as JSON.
//
// usage: KafkaLoad BOOTSTRAP PASSWORD|- TOPIC RECORDS SIZE
//   PASSWORD: an Event Hubs connection string (SASL PLAIN, user $ConnectionString), or - for a
//   broker without authentication.
//   KafkaLoad create-topic BOOTSTRAP TOPIC PARTITIONS   makes the topic on a Kafka broker

import java.time.Duration;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class KafkaLoad {
    /** The records sent at a steady 1,000 a second, whose latencies are reported. */
    static final int PACED = 2000;

    public static void main(String[] argv) throws Exception {
        if (argv[0].equals("create-topic")) {
            Properties config = new Properties();
            config.put("bootstrap.servers", argv[1]);
            try (Admin admin = Admin.create(config)) {
                admin.createTopics(List.of(new NewTopic(argv[2], Integer.parseInt(argv[3]), (short) 1)))
                    .all().get(60, TimeUnit.SECONDS);
            }
            System.out.println("{\"created\":true}");
            System.exit(0);
        }
        Properties config = new Properties();
        config.put("bootstrap.servers", argv[0]);
        if (!argv[1].equals("-")) {
            config.put("security.protocol", "SASL_PLAINTEXT");
            config.put("sasl.mechanism", "PLAIN");
            config.put("sasl.jaas.config",
                "org.apache.kafka.common.security.plain.PlainLoginModule required username=\"$ConnectionString\" password=\""
                    + argv[1].replace("\"", "\\\"") + "\";");
        }
        String topic = argv[2];
        int records = Integer.parseInt(argv[3]);
        int size = Integer.parseInt(argv[4]);
        Map<String, Object> out = new LinkedHashMap<>();
        out.putAll(produce((Properties) config.clone(), topic, records, size));
        out.putAll(fetch((Properties) config.clone(), topic, records));
        StringBuilder json = new StringBuilder("{");
        out.forEach((k, v) -> json.append(json.length() > 1 ? "," : "").append('"').append(k).append("\":").append(v));
        System.out.println(json.append('}'));
        System.exit(0);
    }

    static Map<String, Object> produce(Properties config, String topic, int records, int size) throws Exception {
        config.put("key.serializer", ByteArraySerializer.class.getName());
        config.put("value.serializer", ByteArraySerializer.class.getName());
        config.put("enable.idempotence", "true");
        config.put("acks", "all");
        config.put("linger.ms", "5");
        byte[] value = new byte[size];
        Arrays.fill(value, (byte) 'x');
        long[] latencies = new long[PACED];
        long started;
        long elapsed;
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(config)) {
            // One record first, so that metadata and the producer id are not timed.
            producer.send(new ProducerRecord<>(topic, value)).get(60, TimeUnit.SECONDS);
            started = System.nanoTime();
            for (int i = 0; i < records; i++) {
                producer.send(new ProducerRecord<>(topic, ("k" + (i % 1000)).getBytes(), value), (meta, error) -> {
                    if (error != null) {
                        throw new RuntimeException(error);
                    }
                });
            }
            producer.flush();
            elapsed = System.nanoTime() - started;
            long next = System.nanoTime();
            for (int i = 0; i < PACED; i++) {
                next += 1_000_000; // 1,000 a second
                while (System.nanoTime() < next) {
                    Thread.onSpinWait();
                }
                final int at = i;
                final long sent = System.nanoTime();
                producer.send(new ProducerRecord<>(topic, ("k" + (i % 1000)).getBytes(), value), (meta, error) -> {
                    if (error != null) {
                        throw new RuntimeException(error);
                    }
                    latencies[at] = System.nanoTime() - sent;
                });
            }
            producer.flush();
        }
        Arrays.sort(latencies);
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("produce_per_s", Math.round(records / (elapsed / 1e9)));
        out.put("produce_p50_ms", latencies[PACED / 2] / 1e6);
        out.put("produce_p99_ms", latencies[(int) (PACED * 0.99)] / 1e6);
        return out;
    }

    static Map<String, Object> fetch(Properties config, String topic, int records) {
        config.put("key.deserializer", ByteArrayDeserializer.class.getName());
        config.put("value.deserializer", ByteArrayDeserializer.class.getName());
        config.put("group.id", "load-" + UUID.randomUUID());
        config.put("auto.offset.reset", "earliest");
        config.put("enable.auto.commit", "false");
        long read = 0;
        long started = 0;
        long last = 0;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(config)) {
            consumer.subscribe(List.of(topic));
            // The warm-up record and the paced ones are read too. Timed from the first poll that
            // returns any to the last.
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(300);
            while (read < records + 1 + PACED && System.nanoTime() < deadline) {
                ConsumerRecords<byte[], byte[]> polled = consumer.poll(Duration.ofMillis(500));
                if (polled.isEmpty()) {
                    continue;
                }
                if (started == 0) {
                    started = System.nanoTime();
                }
                read += polled.count();
                last = System.nanoTime();
            }
        }
        double seconds = (last - started) / 1e9;
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("fetched", read);
        out.put("fetch_per_s", Math.round(read / Math.max(seconds, 0.001)));
        return out;
    }
}
