// One AMQP 1.0 load, the same against the hub and against ActiveMQ Artemis, on Proton-J (Vert.x
// Proton, the AMQP library under no Event Hubs SDK, so that neither server gets its own client):
// scripts/bench-brokers.sh runs it against both, in turns, and compares. It sends RECORDS durable
// messages of SIZE bytes as fast as the link's credit allows (the send rate), then 2,000 more paced
// at 1,000 a second, timing each from the send to its acceptance (the latencies), then receives
// them all (the receive rate), and prints the figures as JSON. Against the hub it first puts a
// SAS token on $cbs, as the SDKs do, sends to the event hub (the hub spreads the messages over
// the partitions) and receives from every partition of the consumer group $Default.
//
// usage: AmqpLoad hub HOST PORT KEY_NAME KEY HUB PARTITIONS RECORDS SIZE
//        AmqpLoad broker HOST PORT QUEUE RECORDS SIZE

import io.vertx.core.Vertx;
import io.vertx.proton.ProtonClient;
import io.vertx.proton.ProtonClientOptions;
import io.vertx.proton.ProtonConnection;
import io.vertx.proton.ProtonHelper;
import io.vertx.proton.ProtonReceiver;
import io.vertx.proton.ProtonSender;
import java.net.URLEncoder;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;
import org.apache.qpid.proton.amqp.Binary;
import org.apache.qpid.proton.amqp.Symbol;
import org.apache.qpid.proton.amqp.UnknownDescribedType;
import org.apache.qpid.proton.amqp.messaging.Accepted;
import org.apache.qpid.proton.amqp.messaging.AmqpValue;
import org.apache.qpid.proton.amqp.messaging.ApplicationProperties;
import org.apache.qpid.proton.amqp.messaging.Data;
import org.apache.qpid.proton.amqp.messaging.Source;
import org.apache.qpid.proton.message.Message;

public class AmqpLoad {
    /** The messages sent at a steady 1,000 a second, whose latencies are reported. */
    static final int PACED = 2000;

    public static void main(String[] argv) throws Exception {
        boolean hub = argv[0].equals("hub");
        String host = argv[1];
        int port = Integer.parseInt(argv[2]);
        String address = hub ? argv[5] : argv[3];
        int partitions = hub ? Integer.parseInt(argv[6]) : 0;
        int records = Integer.parseInt(argv[hub ? 7 : 4]);
        int size = Integer.parseInt(argv[hub ? 8 : 5]);
        Vertx vertx = Vertx.vertx();
        ProtonConnection connection = connect(vertx, host, port).get(60, TimeUnit.SECONDS);
        if (hub) {
            putToken(vertx, connection, "sb://" + host + "/" + address, argv[3], argv[4]).get(60, TimeUnit.SECONDS);
        }
        long[] latencies = new long[PACED];
        double sendSeconds = send(vertx, connection, address, records, size, latencies).get(600, TimeUnit.SECONDS);
        List<String> sources = new ArrayList<>();
        if (hub) {
            for (int p = 0; p < partitions; p++) {
                sources.add(address + "/ConsumerGroups/$Default/Partitions/" + p);
            }
        } else {
            sources.add(address);
        }
        double receiveSeconds = receive(vertx, connection, sources, records + PACED).get(600, TimeUnit.SECONDS);
        Arrays.sort(latencies);
        System.out.printf("{\"send_per_s\":%d,\"send_p50_ms\":%.3f,\"send_p99_ms\":%.3f,\"received\":%d,\"receive_per_s\":%d}%n",
            Math.round(records / sendSeconds), latencies[PACED / 2] / 1e6, latencies[(int) (PACED * 0.99)] / 1e6,
            records + PACED, Math.round((records + PACED) / receiveSeconds));
        System.exit(0);
    }

    static CompletableFuture<ProtonConnection> connect(Vertx vertx, String host, int port) {
        CompletableFuture<ProtonConnection> opened = new CompletableFuture<>();
        ProtonClientOptions options = new ProtonClientOptions().addEnabledSaslMechanism("ANONYMOUS");
        vertx.runOnContext(v -> ProtonClient.create(vertx).connect(options, host, port, result -> {
            if (result.failed()) {
                opened.completeExceptionally(result.cause());
                return;
            }
            ProtonConnection connection = result.result();
            connection.setContainer("amqp-load").setHostname(host).openHandler(open -> {
                if (open.succeeded()) {
                    opened.complete(connection);
                } else {
                    opened.completeExceptionally(open.cause());
                }
            }).open();
        }));
        return opened;
    }

    /** A SAS token for `audience` put on $cbs, answered 2xx. */
    static CompletableFuture<Void> putToken(Vertx vertx, ProtonConnection connection, String audience,
            String keyName, String key) throws Exception {
        long expiry = System.currentTimeMillis() / 1000 + 3600;
        String resource = URLEncoder.encode(audience, StandardCharsets.UTF_8);
        Mac mac = Mac.getInstance("HmacSHA256");
        mac.init(new SecretKeySpec(key.getBytes(StandardCharsets.UTF_8), "HmacSHA256"));
        String signature = Base64.getEncoder().encodeToString(
            mac.doFinal((resource + "\n" + expiry).getBytes(StandardCharsets.UTF_8)));
        String token = "SharedAccessSignature sr=" + resource + "&sig="
            + URLEncoder.encode(signature, StandardCharsets.UTF_8) + "&se=" + expiry + "&skn=" + keyName;
        CompletableFuture<Void> answered = new CompletableFuture<>();
        vertx.runOnContext(v -> {
            ProtonReceiver replies = connection.createReceiver("$cbs");
            org.apache.qpid.proton.amqp.messaging.Target replyTo = new org.apache.qpid.proton.amqp.messaging.Target();
            replyTo.setAddress("cbs-replies");
            replies.setTarget(replyTo);
            replies.handler((delivery, reply) -> {
                Object status = reply.getApplicationProperties().getValue().get("status-code");
                if (status instanceof Number n && n.intValue() / 100 == 2) {
                    answered.complete(null);
                } else {
                    answered.completeExceptionally(new RuntimeException("put-token answered " + status));
                }
            }).open();
            ProtonSender requests = connection.createSender("$cbs");
            requests.openHandler(open -> {
                Message request = ProtonHelper.message();
                Map<String, Object> properties = new HashMap<>();
                properties.put("operation", "put-token");
                properties.put("type", "servicebus.windows.net:sastoken");
                properties.put("name", audience);
                request.setApplicationProperties(new ApplicationProperties(properties));
                request.setMessageId("put-token-1");
                request.setReplyTo("cbs-replies");
                request.setBody(new AmqpValue(token));
                requests.send(request);
            }).open();
        });
        return answered;
    }

    /**
     * RECORDS messages as fast as credit allows, then PACED ones at 1,000 a second: the seconds
     * the first part took until its last acceptance; the paced ones' latencies in `latencies`.
     */
    static CompletableFuture<Double> send(Vertx vertx, ProtonConnection connection, String address, int records,
            int size, long[] latencies) {
        CompletableFuture<Double> done = new CompletableFuture<>();
        byte[] body = new byte[size];
        Arrays.fill(body, (byte) 'x');
        AtomicLong accepted = new AtomicLong();
        vertx.runOnContext(v -> {
            ProtonSender sender = connection.createSender(address);
            long[] started = new long[1];
            int[] next = new int[1];
            Runnable paced = () -> {
                long[] at = {System.nanoTime()};
                int[] sent = {0};
                vertx.setPeriodic(1, timer -> {
                    // Every message due by now (a timer tick can come late).
                    long now = System.nanoTime();
                    while (sent[0] < PACED && at[0] <= now) {
                        final int i = sent[0]++;
                        at[0] += 1_000_000;
                        final long t = System.nanoTime();
                        sender.send(message(body), delivery -> {
                            if (delivery.getRemoteState() instanceof Accepted) {
                                latencies[i] = System.nanoTime() - t;
                                if (accepted.incrementAndGet() == records + PACED) {
                                    vertx.cancelTimer(timer);
                                    done.complete((double) started[0] / 1e9);
                                }
                            } else {
                                done.completeExceptionally(new RuntimeException("not accepted: " + delivery.getRemoteState()));
                            }
                        });
                    }
                });
            };
            Runnable fill = new Runnable() {
                public void run() {
                    while (next[0] < records && !sender.sendQueueFull()) {
                        next[0]++;
                        sender.send(message(body), delivery -> {
                            if (!(delivery.getRemoteState() instanceof Accepted)) {
                                done.completeExceptionally(new RuntimeException("not accepted: " + delivery.getRemoteState()));
                                return;
                            }
                            if (accepted.incrementAndGet() == records) {
                                started[0] = System.nanoTime() - started[0];
                                paced.run();
                            }
                        });
                    }
                }
            };
            sender.sendQueueDrainHandler(s -> fill.run());
            sender.openHandler(open -> {
                if (open.failed()) {
                    done.completeExceptionally(open.cause());
                    return;
                }
                started[0] = System.nanoTime();
                fill.run();
            }).open();
        });
        return done;
    }

    static Message message(byte[] body) {
        Message message = ProtonHelper.message();
        message.setDurable(true);
        message.setBody(new Data(new Binary(body)));
        return message;
    }

    /** Every message of `sources` until `expected`: the seconds from the first to the last. */
    static CompletableFuture<Double> receive(Vertx vertx, ProtonConnection connection, List<String> sources,
            long expected) {
        CompletableFuture<Double> done = new CompletableFuture<>();
        AtomicLong received = new AtomicLong();
        long[] first = {0};
        vertx.runOnContext(v -> {
            for (String source : sources) {
                ProtonReceiver receiver = connection.createReceiver(source);
                if (source.contains("/Partitions/")) {
                    // From the start of the partition, as an Event Hubs consumer asks.
                    Map<Symbol, Object> filter = new HashMap<>();
                    filter.put(Symbol.valueOf("apache.org:selector-filter:string"), new UnknownDescribedType(
                        Symbol.valueOf("apache.org:selector-filter:string"), "amqp.annotation.x-opt-offset > '-1'"));
                    ((Source) receiver.getSource()).setFilter(filter);
                }
                receiver.setPrefetch(1000).handler((delivery, message) -> {
                    if (first[0] == 0) {
                        first[0] = System.nanoTime();
                    }
                    if (received.incrementAndGet() == expected) {
                        done.complete((System.nanoTime() - first[0]) / 1e9);
                    }
                }).open();
            }
        });
        return done;
    }
}
