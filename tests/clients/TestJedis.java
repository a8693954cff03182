// deferq through Jedis 5.2.0 (Java), with its default settings first: RESP2, a 2 s socket
// timeout, no retries. deferq's commands are sent with sendCommand(ProtocolCommand, args...)
// (a command enum of our own, DeferqCommand); a blocking CONSUME with sendBlockingCommand, which
// lifts the socket timeout for that call; transactions through multi(), plain pipelines through
// pipelined(); info(section) returns INFO's text.
//
//   javac -sourcepath jedis-5.2.0/src/main/java -cp DEBIAN_JARS -d OUT TestJedis.java
//   DEFERQ_PORT=P DEFERQ_AUTH_URL=redis://ns:token@host:port java -cp OUT:DEBIAN_JARS TestJedis
//
// Built and run by run_clients.sh (Jedis's source from tests/clients/java/, its dependencies from
// Debian's packages), which starts redis-server and deferq. Each test uses its own queue. Prints
// one line per test, then "N passed, M failed"; exits non-zero on any failure.

import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ThreadLocalRandom;
import java.util.regex.Pattern;
import redis.clients.jedis.DefaultJedisClientConfig;
import redis.clients.jedis.HostAndPort;
import redis.clients.jedis.Jedis;
import redis.clients.jedis.JedisPool;
import redis.clients.jedis.Pipeline;
import redis.clients.jedis.RedisProtocol;
import redis.clients.jedis.Response;
import redis.clients.jedis.Transaction;
import redis.clients.jedis.commands.ProtocolCommand;
import redis.clients.jedis.exceptions.JedisConnectionException;
import redis.clients.jedis.exceptions.JedisDataException;
import redis.clients.jedis.util.SafeEncoder;

public class TestJedis {
  /** deferq's commands for sendCommand: Jedis sends the name and the arguments as given. */
  enum DeferqCommand implements ProtocolCommand {
    PUBLISH,
    CONSUME,
    ACK,
    NACK,
    QSTAT,
    DEADLETTER;

    private final byte[] raw = SafeEncoder.encode(name());

    @Override
    public byte[] getRaw() {
      return raw;
    }
  }

  static final int PORT = Integer.parseInt(System.getenv().getOrDefault("DEFERQ_PORT", "0"));
  static final String AUTH_URL = System.getenv().getOrDefault("DEFERQ_AUTH_URL", "");
  static final Pattern ID = Pattern.compile("[0-9A-HJKMNP-TV-Z]{26}"); // Crockford base32

  static class Failure extends RuntimeException {
    Failure(String message) {
      super(message);
    }
  }

  static void check(boolean ok, String what) {
    if (!ok)
      throw new Failure(what);
  }

  static void checkEqual(Object expected, Object actual, String what) {
    if (expected == null ? actual != null : !expected.equals(actual)) {
      throw new Failure(what + ": expected " + expected + ", got " + actual);
    }
  }

  static String text(Object reply) {
    return reply == null ? null : SafeEncoder.encode((byte[]) reply);
  }

  static Jedis connect() {
    return new Jedis("127.0.0.1", PORT);
  }

  static String queue(String tag) {
    return String.format("java-%s-%08x", tag, ThreadLocalRandom.current().nextInt());
  }

  static Map<String, Object> qstat(Jedis j, String q) {
    List<?> flat = (List<?>) j.sendCommand(DeferqCommand.QSTAT, q);
    Map<String, Object> m = new HashMap<>();
    for (int i = 0; i + 1 < flat.size(); i += 2) {
      Object v = flat.get(i + 1);
      m.put(text(flat.get(i)), v instanceof byte[] ? text(v) : v);
    }
    return m;
  }

  /** A job is [queue, id, payload, tries_left, ttl_left_s, attempt, elapsed_ms]. */
  static List<?> checkJob(Object reply, String q, String id, byte[] payload, long triesLeft) {
    check(reply instanceof List && ((List<?>) reply).size() == 7, "a job is a list of 7: " + reply);
    List<?> job = (List<?>) reply;
    checkEqual(q, text(job.get(0)), "queue");
    if (id != null)
      checkEqual(id, text(job.get(1)), "id");
    check(Arrays.equals(payload, (byte[]) job.get(2)), "payload");
    checkEqual(triesLeft, job.get(3), "tries_left");
    long ttl = (Long) job.get(4);
    check(ttl > 86390 && ttl <= 86400, "ttl_left_s " + ttl);
    checkEqual(1L, job.get(5), "attempt");
    return job;
  }

  static byte[] bytes(String s) {
    return s.getBytes(StandardCharsets.UTF_8);
  }

  interface Body {
    void run() throws Exception;
  }

  static final List<Object[]> TESTS = new ArrayList<>();

  static void test(String name, Body body) {
    TESTS.add(new Object[] {name, body});
  }

  public static void main(String[] args) {
    if (PORT == 0) {
      System.err.println("DEFERQ_PORT is not set");
      System.exit(2);
    }

    test("the default handshake: PING, INFO server", () -> {
      try (Jedis j = connect()) {
        checkEqual("PONG", j.ping(), "PING");
        check(j.info("server").contains("deferq_version:"), "INFO server has deferq_version");
      }
    });

    test("publish, consume, ack through sendCommand", () -> {
      try (Jedis j = connect()) {
        String q = queue("basic");
        String id = text(j.sendCommand(DeferqCommand.PUBLISH, q, "hello jedis", "TRIES", "3"));
        check(ID.matcher(id).matches(), "id " + id);
        checkJob(
            j.sendCommand(DeferqCommand.CONSUME, q, "TTR", "30"), q, id, bytes("hello jedis"), 2);
        checkEqual(null, j.sendCommand(DeferqCommand.CONSUME, q), "CONSUME of an empty queue");
        checkEqual(1L, j.sendCommand(DeferqCommand.ACK, q, id), "ACK");
        checkEqual(0L, j.sendCommand(DeferqCommand.ACK, q, id), "a second ACK");
        Map<String, Object> s = qstat(j, q);
        checkEqual("0 1 1",
            s.get("ready") + " " + s.get("consumed_total") + " " + s.get("acked_total"), "QSTAT");
      }
    });

    test("trap: jedis.publish() is Pub/Sub's PUBLISH and cannot read a job id", () -> {
      try (Jedis j = connect()) {
        String q = queue("pubsub");
        boolean threw = false;
        try {
          j.publish(q, "x"); // expects an integer (subscribers reached), deferq answers the id
        } catch (ClassCastException e) {
          threw = true;
        }
        check(threw, "jedis.publish() read a job id as a number");
        checkEqual(1L, qstat(j, q).get("ready"), "the job was published all the same");
        checkEqual("PONG", j.ping(), "the connection still works");
      }
    });

    test("trap: a CONSUME blocking longer than the 2 s socket timeout fails", () -> {
      try (Jedis j = connect()) {
        String q = queue("timeout");
        long t0 = System.nanoTime();
        boolean threw = false;
        try {
          j.sendCommand(DeferqCommand.CONSUME, q, "TIMEOUT", "4");
        } catch (JedisConnectionException e) {
          threw = true;
        }
        double took = (System.nanoTime() - t0) / 1e9;
        check(threw, "sendCommand with TIMEOUT 4 did not time out");
        check(
            took >= 1.9 && took < 3.5, "timed out after " + took + " s, the socket timeout is 2 s");
        check(j.isBroken(), "Jedis marks the connection broken");
      }
    });

    test("the fix: sendBlockingCommand waits past the socket timeout for a delayed job", () -> {
      try (Jedis j = connect()) {
        String q = queue("blocking");
        checkEqual("order-1",
            text(j.sendCommand(DeferqCommand.PUBLISH, q, "later", "DELAY", "3", "ID", "order-1")),
            "PUBLISH ID");
        long t0 = System.nanoTime();
        Object job = j.sendBlockingCommand(DeferqCommand.CONSUME, q, "TTR", "30", "TIMEOUT", "6");
        double took = (System.nanoTime() - t0) / 1e9;
        checkJob(job, q, "order-1", bytes("later"), 0);
        check(took >= 2.5 && took < 5, "delivered after " + took + " s, due after 3 s");
        checkEqual(1L, j.sendCommand(DeferqCommand.ACK, q, "order-1"), "ACK");
        checkEqual("PONG", j.ping(), "the socket timeout is back and the connection works");
      }
    });

    test("MULTI/EXEC of 3 publishes returns 3 ids", () -> {
      try (Jedis j = connect()) {
        String q = queue("multi");
        Transaction t = j.multi();
        List<Response<Object>> queued = new ArrayList<>();
        for (int i = 1; i <= 3; i++) queued.add(t.sendCommand(DeferqCommand.PUBLISH, q, "m" + i));
        List<Object> ids = t.exec();
        checkEqual(3, ids.size(), "EXEC replies");
        for (int i = 0; i < 3; i++) {
          String id = text(ids.get(i));
          check(ID.matcher(id).matches(), "id " + id);
          checkEqual(id, text(queued.get(i).get()), "the Response of the queued command");
        }
        checkEqual(3L, qstat(j, q).get("ready"), "ready");
      }
    });

    test("a pipeline: sendCommand, then sync", () -> {
      try (Jedis j = connect()) {
        String q = queue("pipe");
        Pipeline p = j.pipelined();
        List<Response<Object>> replies = new ArrayList<>();
        for (int i = 1; i <= 5; i++) replies.add(p.sendCommand(DeferqCommand.PUBLISH, q, "p" + i));
        p.sync();
        List<String> ids = new ArrayList<>();
        for (Response<Object> r : replies) ids.add(text(r.get()));
        List<?> jobs = (List<?>) j.sendCommand(DeferqCommand.CONSUME, q, "COUNT", "10");
        List<String> got = new ArrayList<>();
        for (Object job : jobs) got.add(text(((List<?>) job).get(1)));
        checkEqual(ids, got, "ids in order");
      }
    });

    test("a binary payload (every byte value) round-trips", () -> {
      try (Jedis j = connect()) {
        String q = queue("binary");
        byte[] all = new byte[256];
        for (int i = 0; i < 256; i++) all[i] = (byte) i;
        String id = text(j.sendCommand(DeferqCommand.PUBLISH, SafeEncoder.encode(q), all));
        checkJob(j.sendCommand(DeferqCommand.CONSUME, q), q, id, all, 0);
        checkEqual(1L, j.sendCommand(DeferqCommand.ACK, q, id), "ACK");
      }
    });

    test("DEADLETTER SIZE; INFO queues", () -> {
      try (Jedis j = connect()) {
        String q = queue("dead");
        String id = text(j.sendCommand(DeferqCommand.PUBLISH, q, "x"));
        j.sendCommand(DeferqCommand.CONSUME, q);
        checkEqual(1L, j.sendCommand(DeferqCommand.NACK, q, id), "NACK of the last try");
        checkEqual(1L, j.sendCommand(DeferqCommand.DEADLETTER, "SIZE", q), "DEADLETTER SIZE");
        // INFO queues shows the figures of deferq's poller, a second old at most.
        String line = "";
        for (int i = 0; i < 50 && !line.contains(",dead=1,"); i++) {
          if (i > 0)
            Thread.sleep(100);
          line = Arrays.stream(j.info("queues").split("\r\n"))
                     .filter(l -> l.startsWith("queue_default/" + q + ":"))
                     .findFirst()
                     .orElse("");
        }
        check(line.contains(",dead=1,"), "INFO queues has the queue with dead=1: " + line);
      }
    });

    test("an error reply throws JedisDataException with its text", () -> {
      try (Jedis j = connect()) {
        boolean threw = false;
        try {
          j.sendCommand(DeferqCommand.PUBLISH, queue("err"), "x", "TTL", "1", "TTL", "2");
        } catch (JedisDataException e) {
          threw = e.getMessage().startsWith("ERR syntax error");
        }
        check(threw, "a syntax error is a JedisDataException");
        checkEqual("PONG", j.ping(), "the connection still works");
      }
    });

    test("RESP3 (protocol(RedisProtocol.RESP3)): a job is the same list", () -> {
      DefaultJedisClientConfig config =
          DefaultJedisClientConfig.builder().protocol(RedisProtocol.RESP3).build();
      try (Jedis j = new Jedis(new HostAndPort("127.0.0.1", PORT), config)) {
        String q = queue("resp3");
        String id = text(j.sendCommand(DeferqCommand.PUBLISH, q, "three"));
        checkJob(j.sendCommand(DeferqCommand.CONSUME, q), q, id, bytes("three"), 0);
        checkEqual(null, j.sendCommand(DeferqCommand.CONSUME, q), "CONSUME of an empty queue");
      }
    });

    test("JedisPool: a consumer borrows its own connection", () -> {
      String q = queue("pool");
      try (JedisPool pool = new JedisPool("127.0.0.1", PORT)) {
        String id;
        try (Jedis producer = pool.getResource()) {
          id = text(producer.sendCommand(DeferqCommand.PUBLISH, q, "pooled"));
        }
        try (Jedis consumer = pool.getResource()) {
          checkJob(consumer.sendBlockingCommand(DeferqCommand.CONSUME, q, "TIMEOUT", "5"), q, id,
              bytes("pooled"), 0);
          checkEqual(1L, consumer.sendCommand(DeferqCommand.ACK, q, id), "ACK");
        }
      }
    });

    test("a URL with credentials: redis://namespace:token@host:port", () -> {
      check(!AUTH_URL.isEmpty(), "DEFERQ_AUTH_URL is not set (run_clients.sh sets it)");
      try (Jedis j = new Jedis(URI.create(AUTH_URL))) {
        String q = queue("auth");
        String id = text(j.sendCommand(DeferqCommand.PUBLISH, q, "authed"));
        checkJob(j.sendCommand(DeferqCommand.CONSUME, q), q, id, bytes("authed"), 0);
      }
      String noToken = AUTH_URL.replaceFirst("://[^@]*@", "://");
      try (Jedis j = new Jedis(URI.create(noToken))) {
        boolean refused = false;
        try {
          j.sendCommand(DeferqCommand.PUBLISH, queue("auth"), "x");
        } catch (JedisDataException e) {
          refused = e.getMessage().startsWith("NOAUTH");
        }
        check(refused, "a job command without a token is refused with NOAUTH");
      }
    });

    int passed = 0;
    int failed = 0;
    for (Object[] t : TESTS) {
      try {
        ((Body) t[1]).run();
        passed++;
        System.out.println("ok   - " + t[0]);
      } catch (Throwable e) {
        failed++;
        System.out.println("FAIL - " + t[0] + ": " + e);
      }
    }
    System.out.println(passed + " passed, " + failed + " failed");
    System.exit(failed == 0 ? 0 : 1);
  }
}
