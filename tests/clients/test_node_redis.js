// deferq through node-redis (npm `redis`) with its default settings first: node-redis 6 speaks
// RESP3 by default (HELLO 3 on connect) and turns RESP3 maps into objects; node-redis 5 RESP2. Generic commands go
// through client.sendCommand([...]); transactions through multi().exec(), plain pipelines through
// multi().execAsPipeline(); binary payloads through the command option
// sendCommand(args, {typeMapping: {BLOB_STRING: Buffer}}) (withTypeMapping(...).sendCommand
// corrupts them on node-redis 5).
//
//   DEFERQ_PORT=P NODE_REDIS=redis|redis5 node tests/clients/test_node_redis.js
//
// Run by run_clients.sh, which starts redis-server and deferq and installs the npm packages of
// package.json. Each test uses its own queue. Prints one line per test, then "N passed, M failed";
// exits non-zero on any failure.
'use strict';

const path = require('node:path');
const h = require('./harness');

const { assert, assertJob, ID_RE, ALL_BYTES, test } = h;
const PACKAGE = process.env.NODE_REDIS || 'redis';
const { createClient, RESP_TYPES } = require(path.join(__dirname, 'node_modules', PACKAGE));
const MAJOR = Number(require(path.join(__dirname, 'node_modules', PACKAGE, 'package.json')).version
                         .split('.')[0]);

const clients = [];

// A connected client with node-redis's defaults except for reconnects. `options` adds or
// overrides settings (e.g. {RESP: 2}).
async function connect(options = {}) {
  const client = createClient({
    url: `redis://127.0.0.1:${h.PORT}`,
    socket: { reconnectStrategy: false },  // a dropped connection is a failure here
    ...options,
  });
  clients.push(client);
  client.on('error', () => {});  // errors surface through the failing command
  await client.connect();
  return client;
}

const queueName = (tag) => h.queueName(`node-${PACKAGE}`, tag);

// QSTAT is a map: an object under RESP3, a flat array under RESP2.
async function qstat(client, q) {
  const reply = await client.sendCommand(['QSTAT', q]);
  if (!Array.isArray(reply)) return reply;
  const m = {};
  for (let i = 0; i < reply.length; i += 2) m[reply[i]] = reply[i + 1];
  return m;
}

const DEFAULT_PROTOCOL = MAJOR >= 6 ? 3 : 2;

test(`the default handshake speaks RESP${DEFAULT_PROTOCOL}; PING, INFO`, async () => {
  const client = await connect();
  assert.equal(h.respOf(await client.sendCommand(['CLIENT', 'INFO'])), DEFAULT_PROTOCOL);
  assert.equal(await client.ping(), 'PONG');
  assert.match(await client.info(), /# Server/);
});

// node-redis with client-side caching (RESP3) sends CLIENT TRACKING ON on connect; deferq accepts
// it (nothing it answers can be cached, so nothing is ever invalidated) and the client works.
test('a client with clientSideCache connects and runs job commands', async () => {
  const client = await connect({ RESP: 3, clientSideCache: { ttl: 0, maxEntries: 0 } });
  const q = queueName('cached');
  const id = await client.sendCommand(['PUBLISH', q, 'cache me not']);
  assert.match(id, ID_RE);
  assertJob(await client.sendCommand(['CONSUME', q]), q, id, 'cache me not', 0);
  assert.equal(await client.sendCommand(['ACK', q, id]), 1);
  const info = await client.sendCommand(['CLIENT', 'TRACKINGINFO']);
  assert.deepEqual(info.flags, ['on'], JSON.stringify(info));
});

test('publish, consume, ack through sendCommand', async () => {
  const client = await connect();
  const q = queueName('basic');
  const id = await client.sendCommand(['PUBLISH', q, 'hello node-redis']);
  assert.match(id, ID_RE);
  assertJob(await client.sendCommand(['CONSUME', q, 'TTR', '30']), q, id, 'hello node-redis', 0);
  assert.equal(await client.sendCommand(['CONSUME', q]), null, 'an empty queue answers null');
  assert.equal(await client.sendCommand(['ACK', q, id]), 1);
  assert.equal(await client.sendCommand(['ACK', q, id]), 0, 'a second ACK counts 0');
  const s = await qstat(client, q);
  assert.deepEqual([s.ready, s.leased, s.published_total, s.consumed_total, s.acked_total],
                   [0, 0, 1, 1, 1], JSON.stringify(s));
});

test('publish with options (PDELAY, TTL, TRIES, ID); a blocking CONSUME gets it when due', async () => {
  const client = await connect();
  const q = queueName('options');
  const key = `order-${Date.now()}`;
  const t0 = Date.now();
  const id = await client.sendCommand(['PUBLISH', q, 'later', 'PDELAY', '300', 'TTL', '600',
                                       'TRIES', '3', 'ID', key]);
  assert.equal(id, key);
  assert.equal(await client.sendCommand(['PUBLISH', q, 'again', 'ID', key]), key,
               'ID makes publish idempotent');
  assert.equal(await client.sendCommand(['CONSUME', q]), null, 'not before its due time');
  const job = await client.sendCommand(['CONSUME', q, 'TTR', '30', 'TIMEOUT', '4']);
  const took = Date.now() - t0;
  assertJob(job, q, key, 'later', 2, { ttl: 600 });
  assert.ok(took >= 250 && took < 3000, `delivered after ${took} ms, due after 300 ms`);
  assert.equal(await client.sendCommand(['ACK', q, key]), 1);
});

test('CALL waits for the result a worker ACKs; WAITJOB reads a kept one', async () => {
  const requester = await connect();
  const worker = await connect();
  const q = queueName('call');
  const call = requester.sendCommand(['CALL', q, '{"image":42}', 'TIMEOUT', '30']);
  const job = await worker.sendCommand(['CONSUME', q, 'TIMEOUT', '5']);
  await worker.sendCommand(['ACK', q, job[1], 'RESULT', '{"ok":true}']);
  assert.equal(await call, '{"ok":true}');
  const id = await worker.sendCommand(['PUBLISH', q, 'report', 'RETAIN', '600']);
  const [, jobId, , , , attempt] = await worker.sendCommand(['CONSUME', q]);
  await worker.sendCommand(['ACK', q, jobId, 'RESULT', '42 rows', 'ATTEMPT', String(attempt)]);
  assert.equal(await requester.sendCommand(['WAITJOB', q, id, 'TIMEOUT', '5']), '42 rows');
  await assert.rejects(requester.sendCommand(['CALL', q, 'nobody', 'TIMEOUT', '0.2']),
                       (e) => /^TIMEOUT job/.test(e.message));
});

test('CONSUME TIMEOUT on an empty queue answers null after the timeout', async () => {
  const client = await connect();
  const q = queueName('timeout');
  const t0 = Date.now();
  assert.equal(await client.sendCommand(['CONSUME', q, 'TIMEOUT', '0.3']), null);
  const ms = Date.now() - t0;
  assert.ok(ms >= 250 && ms < 2000, `returned after ${ms} ms`);
});

test('a consumer blocked in node-redis is woken by a PUBLISH from another client', async () => {
  const consumer = await connect();
  const producer = await connect();
  const q = queueName('wake');
  const blocked = consumer.sendCommand(['CONSUME', q, 'TTR', '30', 'TIMEOUT', '4']);
  await h.sleep(300);
  const tPub = Date.now();
  const id = await producer.sendCommand(['PUBLISH', q, 'wake up']);
  const job = await blocked;
  const wokeAfter = Date.now() - tPub;
  assertJob(job, q, id, 'wake up', 0);
  assert.ok(wokeAfter < 1000, `woken ${wokeAfter} ms after the publish`);
  assert.equal(await producer.sendCommand(['ACK', q, id]), 1);
});

test('multi().exec(): a MULTI/EXEC of 3 publishes returns 3 ids and creates 3 jobs', async () => {
  const client = await connect();
  const q = queueName('multi');
  const ids = await client.multi()
                  .addCommand(['PUBLISH', q, 'm1'])
                  .addCommand(['PUBLISH', q, 'm2', 'TRIES', '2'])
                  .addCommand(['PUBLISH', q, 'm3'])
                  .exec();
  assert.equal(ids.length, 3, JSON.stringify(ids));
  ids.forEach((id) => assert.match(id, ID_RE));
  assert.equal(new Set(ids).size, 3);
  const s = await qstat(client, q);
  assert.deepEqual([s.ready, s.published_total], [3, 3], JSON.stringify(s));
  const jobs = await client.sendCommand(['CONSUME', q, 'COUNT', '10', 'TTR', '30']);
  assert.deepEqual(jobs.map((j) => j[1]), ids);
  assert.equal(await client.sendCommand(['ACK', q, ...ids]), 3);
  assert.equal(await client.ping(), 'PONG', 'the connection is in step after EXEC');
});

test('multi().exec(): a syntax error inside MULTI aborts the transaction, no job is created',
     async () => {
       const client = await connect();
       const q = queueName('execabort');
       await assert.rejects(client.multi()
                                .addCommand(['PUBLISH', q, 'a'])
                                .addCommand(['PUBLISH', q, 'b', 'NOSUCHOPTION', '1'])
                                .addCommand(['PUBLISH', q, 'c'])
                                .exec(),
                            // node-redis rejects with the error of the command refused while queuing.
                            (e) => e.message === 'ERR syntax error');
       const s = await qstat(client, q);
       assert.deepEqual([s.ready, s.published_total], [0, 0], JSON.stringify(s));
       assert.equal(await client.ping(), 'PONG', 'the connection is in step after EXECABORT');
     });

test('multi().execAsPipeline(): 50 publishes then 50 consumes, FIFO', async () => {
  const client = await connect();
  const q = queueName('pipe');
  const pub = client.multi();
  for (let i = 0; i < 50; i++) pub.addCommand(['PUBLISH', q, `job-${i}`]);
  const ids = await pub.execAsPipeline();
  assert.equal(new Set(ids).size, 50);
  const con = client.multi();
  for (let i = 0; i < 50; i++) con.addCommand(['CONSUME', q, 'TTR', '30']);
  const jobs = await con.execAsPipeline();
  jobs.forEach((job, i) => assertJob(job, q, ids[i], `job-${i}`, 0));
  assert.equal(await client.sendCommand(['ACK', q, ...ids]), 50);
});

test('binary payload: all 256 byte values round-trip with the typeMapping command option',
     async () => {
       const client = await connect();
       const typeMapping = { [RESP_TYPES.BLOB_STRING]: Buffer };
       const q = queueName('bin');
       const id = (await client.sendCommand(['PUBLISH', q, ALL_BYTES], { typeMapping })).toString();
       assert.match(id, ID_RE);
       assertJob(await client.sendCommand(['CONSUME', q, 'TTR', '30'], { typeMapping }), q, id,
                 ALL_BYTES, 0);
       assert.equal(await client.sendCommand(['ACK', q, id]), 1);
     });

// docs/clients.md "Binary payloads in Node": withTypeMapping(...) is honoured by sendCommand on
// node-redis 6, not on 5 (the payload comes back as a UTF-8 string, corrupted).
test(`withTypeMapping(...).sendCommand ${MAJOR >= 6 ? 'keeps' : 'corrupts (trap)'} a binary payload ` +
     `on node-redis ${MAJOR}`, async () => {
  const client = await connect();
  const binary = client.withTypeMapping({ [RESP_TYPES.BLOB_STRING]: Buffer });
  const q = queueName('bin-with');
  const id = String(await binary.sendCommand(['PUBLISH', q, ALL_BYTES]));
  const job = await binary.sendCommand(['CONSUME', q, 'TTR', '30']);
  if (MAJOR >= 6) {
    assertJob(job, q, id, ALL_BYTES, 0);
  } else {
    assert.equal(typeof job[2], 'string', 'node-redis 5 answers a string here');
    assert.notDeepEqual(Buffer.from(job[2], 'utf8'), ALL_BYTES);
  }
  assert.equal(await client.sendCommand(['ACK', q, id]), 1);
});

// docs/clients.md "A blocking CONSUME holds its connection": a consumer needs its own client.
test('trap: a PING on the client blocked in CONSUME waits for it; on another client it does not',
     async () => {
       const shared = await connect();
       const other = await connect();
       const blocked = shared.sendCommand(['CONSUME', queueName('shared'), 'TIMEOUT', '1']);
       await h.sleep(50);
       let t0 = Date.now();
       assert.equal(await other.ping(), 'PONG');
       assert.ok(Date.now() - t0 < 500, `PING on another client took ${Date.now() - t0} ms`);
       t0 = Date.now();
       assert.equal(await shared.ping(), 'PONG');
       const waited = Date.now() - t0;
       assert.equal(await blocked, null);
       assert.ok(waited >= 700, `PING on the consumer's client waited ${waited} ms, not ~1 s`);
     });

test('CONSUME answers the same 7-element array under RESP3 and RESP2', async () => {
  const resp3 = await connect();
  const resp2 = await connect({ RESP: 2 });
  assert.equal(h.respOf(await resp2.sendCommand(['CLIENT', 'INFO'])), 2);
  const q = queueName('resp');
  const id3 = await resp3.sendCommand(['PUBLISH', q, 'three', 'TRIES', '2', 'TTL', '600']);
  const id2 = await resp2.sendCommand(['PUBLISH', q, 'two', 'TRIES', '2', 'TTL', '600']);
  const job3 = await resp3.sendCommand(['CONSUME', q, 'TTR', '30', 'TIMEOUT', '1']);
  const job2 = await resp2.sendCommand(['CONSUME', q, 'TTR', '30', 'TIMEOUT', '1']);
  assertJob(job3, q, id3, 'three', 1, { ttl: 600 });
  assertJob(job2, q, id2, 'two', 1, { ttl: 600 });
  assert.deepEqual(job3.map((v) => typeof v), job2.map((v) => typeof v));
  assert.equal(await resp3.sendCommand(['ACK', q, id3, id2]), 2);
});

test('info(): `# Queues` shows both queues (names with ":") with their figures', async () => {
  const client = await connect();
  const queues = [queueName('info:a'), queueName('info:b')];
  for (const q of queues) {
    // A delayed job, delivered to a consumer that waits before it falls due, records its
    // lateness (one nobody waits for may be moved by a read instead: docs/metrics.md).
    const id = await client.sendCommand(['PUBLISH', q, 'due', 'PDELAY', '300']);
    assertJob(await client.sendCommand(['CONSUME', q, 'TTR', '30', 'TIMEOUT', '4']), q, id, 'due', 0);
    assert.equal(await client.sendCommand(['ACK', q, id]), 1);
  }
  const info = h.parseInfo(await client.info('queues'));
  for (const q of queues) {
    const entry = info.queues[h.infoKey(q)];
    assert.ok(entry && typeof entry === 'object', `${h.infoKey(q)} in ${JSON.stringify(info)}`);
    assert.equal(entry.lateness_count, 1, JSON.stringify(entry));
    assert.ok(Number.isInteger(entry.lateness_p99_ms), JSON.stringify(entry));
  }
});

test('node-redis publish() (pub/sub habit) sends PUBLISH queue message: it creates a job',
     async () => {
       const client = await connect();
       const q = queueName('pubsub-habit');
       const id = await client.publish(q, 'not a broadcast');
       assert.match(String(id), ID_RE);
       assertJob(await client.sendCommand(['CONSUME', q, 'TTR', '30']), q, String(id),
                 'not a broadcast', 0);
       assert.equal(await client.sendCommand(['ACK', q, String(id)]), 1);
     });

test('errors reject with the spec texts; the connection stays usable', async () => {
  const client = await connect();
  await assert.rejects(client.sendCommand(['PUBLISH', 'q', 'x', 'TRIES', '0']),
                       (e) => e.message === 'ERR value is not an integer or out of range');
  await assert.rejects(client.sendCommand(['CONSUME', 'q', 'TIMEOUT', '-1']),
                       (e) => e.message === 'ERR timeout is negative');
  assert.equal(await client.ping(), 'PONG');
});

// redis://namespace:token@host:port (docs/commands.md): node-redis sends HELLO 3 AUTH namespace token on
// connect, so a URL is all a team's client needs.
test('a URL-authenticated client (redis://ns:token@host:port) publishes, consumes, acks', async () => {
  assert.ok(h.AUTH_URL, 'DEFERQ_AUTH_URL is not set (run_clients.sh sets it)');
  const a = await connect({ url: h.AUTH_URL });
  const b = await connect({ url: h.AUTH_URL });
  const q = queueName('url-auth');
  const blocked = b.sendCommand(['CONSUME', q, 'TIMEOUT', '5']);
  await h.sleep(200);
  const id = await a.sendCommand(['PUBLISH', q, 'over-url']);
  assert.match(String(id), ID_RE);
  const job = await blocked;
  assert.equal(String(job[1]), String(id));
  assert.equal(String(job[2]), 'over-url');
  assert.equal(await b.sendCommand(['ACK', q, String(id)]), 1);
  await assert.rejects(connect({ url: h.AUTH_URL.replace('@', 'x@') }),
                       (e) => /WRONGPASS invalid username-password pair/.test(e.message));
});

h.run(`node-${PACKAGE}`, async () => {
  while (clients.length) {
    try {
      clients.pop().destroy();
    } catch (e) {
      // node-redis 5 throws ClientClosedError for a client that never connected (WRONGPASS).
    }
  }
});
