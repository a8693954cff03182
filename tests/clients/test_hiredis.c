/* deferq through hiredis (Debian's libhiredis-dev, 0.14: RESP2 only) with its default settings:
 * no read timeout. Commands go through redisCommand (`%s` for text, `%b` for binary);
 * pipelines and MULTI/EXEC through redisAppendCommand + redisGetReply. hiredis has no INFO
 * parser: INFO comes back as text.
 *
 *   DEFERQ_PORT=P ./test_hiredis    (built by run_clients.sh: cc test_hiredis.c -lhiredis)
 *
 * The tests set a 20 s connect and read timeout only so that a hang fails. Each test uses its own
 * queue. Prints one line per test, then "N passed, M failed"; exits non-zero on any failure. */
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int port;
static char failure[512];  /* why the running test failed; empty while it passes */
static redisContext* conn; /* the running test's connection */

/* CHECK records the first failure of a test and leaves it. */
#define CHECK(ok, ...)                                 \
  do {                                                 \
    if (!(ok)) {                                       \
      snprintf(failure, sizeof(failure), __VA_ARGS__); \
      return;                                          \
    }                                                  \
  } while (0)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void queue_name(char* out, size_t size, const char* tag) {
  snprintf(out, size, "hiredis-%s-%08x", tag, (unsigned)rand());
}

static int is_id(const redisReply* r) {
  if (r == NULL || r->type != REDIS_REPLY_STRING || r->len != 26) return 0;
  for (size_t i = 0; i < r->len; i++) {
    if (strchr("0123456789ABCDEFGHJKMNPQRSTVWXYZ", r->str[i]) == NULL) return 0;
  }
  return 1;
}

static long long integer(redisReply* r) {
  long long v = (r != NULL && r->type == REDIS_REPLY_INTEGER) ? r->integer : -999;
  freeReplyObject(r);
  return v;
}

/* A job is [queue, id, payload, tries_left, ttl_left_s, attempt, elapsed_ms] (docs/commands.md).
 * Returns NULL when `r` is that job, else why not. */
static const char* job_mismatch(const redisReply* r, const char* queue, const char* id,
                                const char* payload, size_t payload_len, long long tries_left,
                                long long ttl) {
  if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != 7) return "not a 7-element array";
  redisReply** e = r->element;
  if (e[0]->type != REDIS_REPLY_STRING || strcmp(e[0]->str, queue) != 0) return "queue differs";
  if (e[1]->type != REDIS_REPLY_STRING || strcmp(e[1]->str, id) != 0) return "id differs";
  if (e[2]->type != REDIS_REPLY_STRING || e[2]->len != payload_len ||
      memcmp(e[2]->str, payload, payload_len) != 0) {
    return "payload differs";
  }
  for (int i = 3; i < 7; i++) {
    if (e[i]->type != REDIS_REPLY_INTEGER) return "a figure is not an integer";
  }
  if (e[3]->integer != tries_left) return "tries_left differs";
  if (e[4]->integer <= ttl - 10 || e[4]->integer > ttl) return "ttl_left_s out of range";
  if (e[5]->integer != 1) return "attempt is not 1";
  if (e[6]->integer < 0 || e[6]->integer >= 60000) return "elapsed_ms out of range";
  return NULL;
}

/* QSTAT's value of `field` (RESP2: a flat field/value array). */
static long long qstat(const char* queue, const char* field) {
  redisReply* r = redisCommand(conn, "QSTAT %s", queue);
  long long v = -1;
  for (size_t i = 0; r != NULL && r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements; i += 2) {
    if (strcmp(r->element[i]->str, field) == 0) v = r->element[i + 1]->integer;
  }
  freeReplyObject(r);
  return v;
}

static void test_handshake(void) {
  redisReply* r = redisCommand(conn, "PING");
  CHECK(r != NULL && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "PONG") == 0, "PING");
  freeReplyObject(r);
  r = redisCommand(conn, "INFO server");
  CHECK(r != NULL && r->type == REDIS_REPLY_STRING && strstr(r->str, "deferq_version:") != NULL,
        "INFO server");
  freeReplyObject(r);
}

static void test_publish_consume_ack(void) {
  char q[64];
  queue_name(q, sizeof(q), "basic");
  redisReply* id = redisCommand(conn, "PUBLISH %s %s", q, "hello hiredis");
  CHECK(is_id(id), "PUBLISH answered no id");
  redisReply* job = redisCommand(conn, "CONSUME %s TTR 30", q);
  const char* why = job_mismatch(job, q, id->str, "hello hiredis", 13, 0, 86400);
  freeReplyObject(job);
  CHECK(why == NULL, "CONSUME: %s", why);
  job = redisCommand(conn, "CONSUME %s", q);
  int null = job != NULL && job->type == REDIS_REPLY_NIL;
  freeReplyObject(job);
  CHECK(null, "CONSUME of an empty queue is not nil");
  CHECK(integer(redisCommand(conn, "ACK %s %s", q, id->str)) == 1, "ACK");
  CHECK(integer(redisCommand(conn, "ACK %s %s", q, id->str)) == 0, "a second ACK");
  freeReplyObject(id);
  CHECK(qstat(q, "acked_total") == 1 && qstat(q, "ready") == 0, "QSTAT");
}

static void test_options_and_blocking_consume(void) {
  char q[64], key[80];
  queue_name(q, sizeof(q), "options");
  snprintf(key, sizeof(key), "order-%s", q);
  double t0 = now_s();
  redisReply* r = redisCommand(conn, "PUBLISH %s later PDELAY 300 TTL 600 TRIES 3 ID %s", q, key);
  CHECK(r != NULL && r->type == REDIS_REPLY_STRING && strcmp(r->str, key) == 0, "PUBLISH");
  freeReplyObject(r);
  r = redisCommand(conn, "CONSUME %s TTR 30 TIMEOUT 5", q);
  double took = now_s() - t0;
  const char* why = job_mismatch(r, q, key, "later", 5, 2, 600);
  freeReplyObject(r);
  CHECK(why == NULL, "CONSUME: %s", why);
  CHECK(took >= 0.25 && took < 3, "delivered after %.3f s, due after 0.3 s", took);
  CHECK(integer(redisCommand(conn, "ACK %s %s", q, key)) == 1, "ACK");
}

static void test_consume_timeout(void) {
  char q[64];
  queue_name(q, sizeof(q), "timeout");
  double t0 = now_s();
  redisReply* r = redisCommand(conn, "CONSUME %s TIMEOUT 0.3", q);
  double took = now_s() - t0;
  int null = r != NULL && r->type == REDIS_REPLY_NIL;
  freeReplyObject(r);
  CHECK(null, "not nil");
  CHECK(took >= 0.25 && took < 2, "returned after %.3f s", took);
}

static void test_multi_exec(void) {
  char q[64];
  queue_name(q, sizeof(q), "multi");
  redisAppendCommand(conn, "MULTI");
  for (int i = 1; i <= 3; i++) redisAppendCommand(conn, "PUBLISH %s m%d", q, i);
  redisAppendCommand(conn, "EXEC");
  redisReply* r;
  for (int i = 0; i < 4; i++) { /* OK, then QUEUED three times */
    CHECK(redisGetReply(conn, (void**)&r) == REDIS_OK && r->type == REDIS_REPLY_STATUS,
          "reply %d to MULTI/PUBLISH is not a status", i);
    freeReplyObject(r);
  }
  CHECK(redisGetReply(conn, (void**)&r) == REDIS_OK, "EXEC");
  int three_ids = r->type == REDIS_REPLY_ARRAY && r->elements == 3 && is_id(r->element[0]) &&
                  is_id(r->element[1]) && is_id(r->element[2]);
  CHECK(three_ids, "EXEC did not answer 3 ids");
  CHECK(qstat(q, "ready") == 3 && qstat(q, "published_total") == 3, "QSTAT");
  long long acked = integer(redisCommand(conn, "ACK %s %s %s %s", q, r->element[0]->str,
                                         r->element[1]->str, r->element[2]->str));
  freeReplyObject(r);
  CHECK(acked == 3, "ACK of the 3");
}

static void test_execabort(void) {
  char q[64];
  queue_name(q, sizeof(q), "execabort");
  redisAppendCommand(conn, "MULTI");
  redisAppendCommand(conn, "PUBLISH %s a", q);
  redisAppendCommand(conn, "PUBLISH %s b NOSUCHOPTION 1", q);
  redisAppendCommand(conn, "PUBLISH %s c", q);
  redisAppendCommand(conn, "EXEC");
  const int expected[] = {REDIS_REPLY_STATUS, REDIS_REPLY_STATUS, REDIS_REPLY_ERROR,
                          REDIS_REPLY_STATUS, REDIS_REPLY_ERROR};
  redisReply* r;
  for (int i = 0; i < 5; i++) {
    CHECK(redisGetReply(conn, (void**)&r) == REDIS_OK, "reply %d", i);
    int ok = r->type == expected[i] && (i != 4 || strncmp(r->str, "EXECABORT", 9) == 0);
    freeReplyObject(r);
    CHECK(ok, "reply %d has the wrong type (EXEC must answer EXECABORT)", i);
  }
  CHECK(qstat(q, "ready") == 0 && qstat(q, "published_total") == 0, "a job was created");
}

static void test_pipeline(void) {
  char q[64], payload[16];
  queue_name(q, sizeof(q), "pipe");
  redisReply* ids[50];
  for (int i = 0; i < 50; i++) redisAppendCommand(conn, "PUBLISH %s job-%d", q, i);
  for (int i = 0; i < 50; i++) {
    CHECK(redisGetReply(conn, (void**)&ids[i]) == REDIS_OK && is_id(ids[i]), "PUBLISH %d", i);
  }
  for (int i = 0; i < 50; i++) redisAppendCommand(conn, "CONSUME %s TTR 30", q);
  const char* why = NULL;
  for (int i = 0; i < 50; i++) {
    redisReply* job;
    CHECK(redisGetReply(conn, (void**)&job) == REDIS_OK, "CONSUME %d", i);
    int len = snprintf(payload, sizeof(payload), "job-%d", i);
    if (why == NULL) why = job_mismatch(job, q, ids[i]->str, payload, (size_t)len, 0, 86400);
    freeReplyObject(job);
  }
  long long acked = 0;
  for (int i = 0; i < 50; i++) {
    acked += integer(redisCommand(conn, "ACK %s %s", q, ids[i]->str));
    freeReplyObject(ids[i]);
  }
  CHECK(why == NULL, "pipelined CONSUME: %s", why);
  CHECK(acked == 50, "ACK of the 50");
}

static void test_binary_payload(void) {
  char q[64], all[256];
  queue_name(q, sizeof(q), "bin");
  for (int i = 0; i < 256; i++) all[i] = (char)i; /* every byte value, NUL and CR LF too */
  redisReply* id = redisCommand(conn, "PUBLISH %s %b", q, all, sizeof(all));
  CHECK(is_id(id), "PUBLISH");
  redisReply* job = redisCommand(conn, "CONSUME %s TTR 30", q);
  const char* why = job_mismatch(job, q, id->str, all, sizeof(all), 0, 86400);
  freeReplyObject(job);
  long long acked = integer(redisCommand(conn, "ACK %s %s", q, id->str));
  freeReplyObject(id);
  CHECK(why == NULL, "CONSUME: %s", why);
  CHECK(acked == 1, "ACK");
}

/* Does the INFO text have the line of `queue` (namespace `default`), counting one delivered
 * delayed job? Its key is unique per queue, ':' written %3A (docs/commands.md). */
static int info_has_queue(const char* info, const char* queue) {
  char line[512] = "\r\nqueue_default/";
  size_t n = strlen(line);
  for (const char* c = queue; *c != '\0' && n + 4 < sizeof(line); c++) {
    n += (size_t)snprintf(line + n, sizeof(line) - n, *c == ':' ? "%%3A" : "%c", *c);
  }
  snprintf(line + n, sizeof(line) - n, ":lateness_count=1,");
  return strstr(info, line) != NULL;
}

static void test_info_queues(void) {
  char queues[2][64];
  queue_name(queues[0], sizeof(queues[0]), "info:a");
  queue_name(queues[1], sizeof(queues[1]), "info:b");
  for (int i = 0; i < 2; i++) {
    redisReply* id = redisCommand(conn, "PUBLISH %s due PDELAY 50", queues[i]); /* lateness */
    CHECK(is_id(id), "PUBLISH");
    redisReply* job = redisCommand(conn, "CONSUME %s TTR 30 TIMEOUT 4", queues[i]);
    const char* why = job_mismatch(job, queues[i], id->str, "due", 3, 0, 86400);
    freeReplyObject(job);
    long long acked = integer(redisCommand(conn, "ACK %s %s", queues[i], id->str));
    freeReplyObject(id);
    CHECK(why == NULL && acked == 1, "delayed job of %s", queues[i]);
  }
  redisReply* info = redisCommand(conn, "INFO queues");
  CHECK(info != NULL && info->type == REDIS_REPLY_STRING, "INFO queues");
  int found = info_has_queue(info->str, queues[0]) && info_has_queue(info->str, queues[1]);
  snprintf(failure, sizeof(failure), "both queues in %.400s", info->str);
  freeReplyObject(info);
  if (found) failure[0] = '\0';
}

static void test_errors(void) {
  redisReply* r = redisCommand(conn, "PUBLISH q x TRIES 0");
  int ok = r != NULL && r->type == REDIS_REPLY_ERROR &&
           strcmp(r->str, "ERR value is not an integer or out of range") == 0;
  freeReplyObject(r);
  CHECK(ok, "PUBLISH ... TRIES 0");
  r = redisCommand(conn, "PING");
  ok = r != NULL && r->type == REDIS_REPLY_STATUS;
  freeReplyObject(r);
  CHECK(ok, "PING after the error");
}

static const struct {
  const char* name;
  void (*fn)(void);
} kTests[] = {
    {"the default handshake (RESP2): PING, INFO server", test_handshake},
    {"publish, consume, ack through redisCommand", test_publish_consume_ack},
    {"publish with options (PDELAY, TTL, TRIES, ID); a blocking CONSUME gets it when due",
     test_options_and_blocking_consume},
    {"CONSUME TIMEOUT on an empty queue answers nil after the timeout", test_consume_timeout},
    {"MULTI/EXEC of 3 publishes (redisAppendCommand) returns 3 ids and creates 3 jobs",
     test_multi_exec},
    {"a syntax error inside MULTI: EXEC answers EXECABORT, no job is created", test_execabort},
    {"pipeline (redisAppendCommand, redisGetReply): 50 publishes then 50 consumes, FIFO",
     test_pipeline},
    {"binary payload (%b): all 256 byte values round-trip", test_binary_payload},
    {"INFO queues (text; hiredis has no parser): both queues (names with \":\") with figures",
     test_info_queues},
    {"errors are REDIS_REPLY_ERROR with the spec texts", test_errors},
};

int main(void) {
  const char* env = getenv("DEFERQ_PORT");
  port = env != NULL ? atoi(env) : 0;
  if (port == 0) {
    fprintf(stderr, "DEFERQ_PORT is not set\n");
    return 2;
  }
  srand((unsigned)time(NULL) ^ (unsigned)port);
  int passed = 0, failed = 0;
  for (size_t i = 0; i < sizeof(kTests) / sizeof(kTests[0]); i++) {
    failure[0] = '\0';
    struct timeval timeout = {20, 0}; /* a hung test fails instead of hanging the run */
    conn = redisConnectWithTimeout("127.0.0.1", port, timeout);
    if (conn == NULL || conn->err) {
      snprintf(failure, sizeof(failure), "connect: %s", conn ? conn->errstr : "out of memory");
    } else {
      redisSetTimeout(conn, timeout);
      kTests[i].fn();
    }
    if (failure[0] == '\0') {
      passed++;
      printf("ok   hiredis: %s\n", kTests[i].name);
    } else {
      failed++;
      printf("FAIL hiredis: %s\n     %s\n", kTests[i].name, failure);
    }
    redisFree(conn);
  }
  printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 && passed > 0 ? 0 : 1;
}
