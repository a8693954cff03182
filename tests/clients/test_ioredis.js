// deferq through ioredis, with its default settings first: ioredis 5 speaks RESP2, ioredis 6 RESP3
// (and flattens RESP3 maps into arrays). Generic commands go through redis.call / callBuffer and
// sendCommand(new Redis.Command(...)); transactions through multi(), pipelines through pipeline().
//
//   DEFERQ_PORT=P IOREDIS=ioredis5|ioredis6 node tests/clients/test_ioredis.js
//
// Run by run_clients.sh, which starts redis-server and deferq and installs the npm packages of
// package.json (ioredis 5 and 6 under the aliases ioredis5 / ioredis6). Each test uses its own
// queue. Prints one line per test, then "N passed, M failed"; exits non-zero on any failure.
'use strict';

const path = require('node:path');
const h = require('./harness');

const { assert, assertJob, ID_RE, ALL_BYTES, test } = h;

const PACKAGE = process.env.IOREDIS || 'ioredis5';
const Redis = require(path.join(__dirname, 'node_modules', PACKAGE));
const MAJOR = Number(require(path.join(__dirname, 'node_modules', PACKAGE, 'package.json')).version
                         .split('.')[0]);
const DEFAULT_PROTOCOL = MAJOR >= 6 ? 3 : 2;

const clients = [];

// A connected client with ioredis's defaults except for reconnects; resolves once the ready check
// (INFO) has passed. `options` adds or overrides settings (e.g. {protocol: 2}).
async function connect(options = {}) {
  const redis = new Redis({
    host: '127.0.0.1',
    port: h.PORT,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,  // no reconnects: a dropped connection is a failure here
    lazyConnect: true,
    ...options,
  });
  clients.push(redis);
  redis.on('error', () => {});  // errors surface through the failing command
  await redis.connect();
  assert.equal(redis.status, 'ready');
  return redis;
}

const queueName = (tag) => h.queueName(PACKAGE, tag);

function command(name, args) {
  return new Redis.Command(name, args, { replyEncoding: 'utf8' });
}

async function qstat(redis, q) {
  const flat = await redis.call('QSTAT', q);  // a flat array in RESP2, and in ioredis 6's RESP3
  const m = {};
  for (let i = 0; i < flat.length; i += 2) m[flat[i]] = flat[i + 1];
  return m;
}

test(`the default handshake speaks RESP${DEFAULT_PROTOCOL}; PING, ECHO, INFO`, async () => {
  const redis = await connect();
  assert.equal(h.respOf(await redis.call('CLIENT', 'INFO')), DEFAULT_PROTOCOL);
  assert.equal(await redis.ping(), 'PONG');
  assert.match(await redis.info(), /# Server/);
  assert.equal(await redis.call('ECHO', 'hi'), 'hi');
});

test('publish, consume, ack through redis.call', async () => {
  const redis = await connect();
  const q = queueName('call');
  const id = await redis.call('PUBLISH', q, 'hello ioredis');
  assert.match(id, ID_RE);
  assertJob(await redis.call('CONSUME', q, 'TTR', '30'), q, id, 'hello ioredis', 0);
  assert.equal(await redis.call('CONSUME', q), null, 'an empty queue answers null');
  assert.equal(await redis.call('ACK', q, id), 1);
  assert.equal(await redis.call('ACK', q, id), 0, 'a second ACK counts 0');
  const s = await qstat(redis, q);
  assert.deepEqual([s.ready, s.leased, s.published_total, s.consumed_total, s.acked_total],
                   [0, 0, 1, 1, 1], JSON.stringify(s));
});

test('publish with options (PDELAY, TTL, TRIES, ID); a blocking CONSUME gets it when due', async () => {
  const redis = await connect();
  const q = queueName('options');
  const key = `order-${Date.now()}`;
  const t0 = Date.now();
  const id = await redis.call('PUBLISH', q, 'later', 'PDELAY', '300', 'TTL', '600', 'TRIES', '3',
                              'ID', key);
  assert.equal(id, key);
  assert.equal(await redis.call('PUBLISH', q, 'again', 'ID', key), key, 'ID makes publish idempotent');
  assert.equal(await redis.call('CONSUME', q), null, 'not before its due time');
  const job = await redis.call('CONSUME', q, 'TTR', '30', 'TIMEOUT', '5');
  const took = Date.now() - t0;
  assertJob(job, q, key, 'later', 2, { ttl: 600 });
  assert.ok(took >= 250 && took < 3000, `delivered after ${took} ms, due after 300 ms`);
  assert.equal(await redis.call('ACK', q, key), 1);
});

test('publish, consume, ack through sendCommand(new Redis.Command(...))', async () => {
  const redis = await connect();
  const q = queueName('cmd');
  const id = await redis.sendCommand(command('PUBLISH', [q, 'via Command', 'TRIES', '3']));
  assert.match(id, ID_RE);
  const job = await redis.sendCommand(command('CONSUME', [q, 'TTR', '30', 'TIMEOUT', '1']));
  assertJob(job, q, id, 'via Command', 2);
  assert.equal(await redis.sendCommand(command('ACK', [q, id])), 1);
  assert.equal(await redis.sendCommand(command('CONSUME', [q, 'TIMEOUT', '0'])), null);
});

test('COUNT returns an array of jobs in publish order; ACK of many ids', async () => {
  const redis = await connect();
  const q = queueName('count');
  const ids = [];
  for (const p of ['a', 'b', 'c']) ids.push(await redis.call('PUBLISH', q, p));
  const jobs = await redis.call('CONSUME', q, 'COUNT', '10', 'TTR', '30');
  assert.equal(jobs.length, 3);
  jobs.forEach((job, i) => assertJob(job, q, ids[i], 'abc'[i], 0));
  assert.equal(await redis.call('ACK', q, ...ids), 3);
  assert.equal(await redis.call('CONSUME', q, 'COUNT', '10', 'TIMEOUT', '0.2'), null);
});

test('multi(): a MULTI/EXEC of 3 publishes returns 3 ids and creates 3 jobs', async () => {
  const redis = await connect();
  const q = queueName('multi');
  const replies = await redis.multi()
                      .call('PUBLISH', q, 'm1')
                      .call('PUBLISH', q, 'm2', 'TRIES', '2')
                      .call('PUBLISH', q, 'm3')
                      .exec();
  assert.equal(replies.length, 3, JSON.stringify(replies));
  for (const [err] of replies) assert.equal(err, null);
  const ids = replies.map(([, id]) => id);
  ids.forEach((id) => assert.match(id, ID_RE));
  assert.equal(new Set(ids).size, 3);
  const s = await qstat(redis, q);
  assert.deepEqual([s.ready, s.published_total], [3, 3], JSON.stringify(s));
  const jobs = await redis.call('CONSUME', q, 'COUNT', '10', 'TTR', '30');
  assert.deepEqual(jobs.map((j) => j[1]), ids);
  assert.equal(await redis.call('ACK', q, ...ids), 3);
  assert.equal(await redis.ping(), 'PONG', 'the connection is in step after EXEC');
});

test('multi(): a syntax error inside MULTI makes EXEC fail with EXECABORT and creates no job',
     async () => {
       const redis = await connect();
       const q = queueName('execabort');
       await assert.rejects(redis.multi()
                                .call('PUBLISH', q, 'a')
                                .call('PUBLISH', q, 'b', 'NOSUCHOPTION', '1')
                                .call('PUBLISH', q, 'c')
                                .exec(),
                            (e) => /^EXECABORT/.test(e.message) &&
                                   e.previousErrors.some((p) => p.message === 'ERR syntax error'));
       const s = await qstat(redis, q);
       assert.deepEqual([s.ready, s.published_total], [0, 0], JSON.stringify(s));
       assert.equal(await redis.ping(), 'PONG', 'the connection is in step after EXECABORT');
     });

test('pipeline(): 50 publishes then 50 consumes in one round trip each, FIFO', async () => {
  const redis = await connect();
  const q = queueName('pipe');
  const pub = redis.pipeline();
  for (let i = 0; i < 50; i++) pub.call('PUBLISH', q, `job-${i}`);
  const ids = (await pub.exec()).map(([err, id]) => {
    assert.equal(err, null);
    return id;
  });
  assert.equal(new Set(ids).size, 50);
  const con = redis.pipeline();
  for (let i = 0; i < 50; i++) con.call('CONSUME', q, 'TTR', '30');
  const jobs = (await con.exec()).map(([, job]) => job);
  jobs.forEach((job, i) => assertJob(job, q, ids[i], `job-${i}`, 0));
  assert.equal(await redis.call('ACK', q, ...ids), 50);
});

test('binary payload: all 256 byte values round-trip through callBuffer', async () => {
  const redis = await connect();
  const q = queueName('bin');
  const id = (await redis.callBuffer('PUBLISH', q, ALL_BYTES)).toString();
  assert.match(id, ID_RE);
  const job = await redis.callBuffer('CONSUME', q, 'TTR', '30');
  assertJob(job, q, id, ALL_BYTES, 0);
  assert.equal(await redis.call('ACK', q, id), 1);
});

if (MAJOR >= 6) {
  test('CONSUME answers the same 7-element array under RESP3 and RESP2', async () => {
    const resp3 = await connect({ protocol: 3 });
    const resp2 = await connect({ protocol: 2 });
    assert.equal(h.respOf(await resp3.call('CLIENT', 'INFO')), 3);
    assert.equal(h.respOf(await resp2.call('CLIENT', 'INFO')), 2);
    const q = queueName('resp');
    const id3 = await resp3.call('PUBLISH', q, 'three', 'TRIES', '2', 'TTL', '600');
    const id2 = await resp2.call('PUBLISH', q, 'two', 'TRIES', '2', 'TTL', '600');
    const job3 = await resp3.call('CONSUME', q, 'TTR', '30', 'TIMEOUT', '1');
    const job2 = await resp2.call('CONSUME', q, 'TTR', '30', 'TIMEOUT', '1');
    assertJob(job3, q, id3, 'three', 1, { ttl: 600 });
    assertJob(job2, q, id2, 'two', 1, { ttl: 600 });
    assert.deepEqual(job3.map((v) => typeof v), job2.map((v) => typeof v));
    assert.equal(await resp3.call('ACK', q, id3, id2), 2);
  });
}

test('info(): `# Queues` shows both queues (names with ":") with their figures', async () => {
  const redis = await connect();
  const queues = [queueName('info:a'), queueName('info:b')];
  for (const q of queues) {
    // A delayed job, delivered to a consumer that waits before it falls due, records its
    // lateness (one nobody waits for may be moved by a read instead: docs/metrics.md).
    const id = await redis.call('PUBLISH', q, 'due', 'PDELAY', '300');
    assertJob(await redis.call('CONSUME', q, 'TTR', '30', 'TIMEOUT', '5'), q, id, 'due', 0);
    assert.equal(await redis.call('ACK', q, id), 1);
  }
  const info = h.parseInfo(await redis.info('queues'));
  for (const q of queues) {
    const entry = info.queues[h.infoKey(q)];
    assert.ok(entry && typeof entry === 'object', `${h.infoKey(q)} in ${JSON.stringify(info)}`);
    assert.equal(entry.lateness_count, 1, JSON.stringify(entry));
    assert.ok(Number.isInteger(entry.lateness_p99_ms), JSON.stringify(entry));
  }
});

test('trap: a commandTimeout shorter than CONSUME TIMEOUT leases the job to nobody; TRIES 2 ' +
     'brings it back after its ttr', async () => {
  const impatient = await connect({ commandTimeout: 300 });
  const redis = await connect();
  const q = queueName('cmdtimeout');
  const blocked = impatient.call('CONSUME', q, 'TTR', '1', 'TIMEOUT', '3').then(
      (job) => `answered ${JSON.stringify(job)}`, (e) => e.message);
  await h.sleep(600);  // the promise has been rejected by now; the CONSUME still waits in deferq
  assert.equal(await blocked, 'Command timed out');
  const id = await redis.call('PUBLISH', q, 'lost once', 'TRIES', '2');
  await h.sleep(100);
  const s = await qstat(redis, q);
  assert.deepEqual([s.ready, s.leased], [0, 1], `leased to the dead promise: ${JSON.stringify(s)}`);
  const job = await redis.call('CONSUME', q, 'TTR', '30', 'TIMEOUT', '4');  // after the 1 s ttr
  assertJob(job, q, id, 'lost once', 0, { attempt: 2 });
  assert.equal(await redis.call('ACK', q, id), 1);
});

test('ioredis built-in publish() sends PUBLISH queue payload: it creates a job', async () => {
  const redis = await connect();
  const q = queueName('builtin');
  const id = await redis.publish(q, 'built in');
  assert.match(String(id), ID_RE);
  assertJob(await redis.call('CONSUME', q, 'TTR', '30'), q, String(id), 'built in', 0);
});

test('CALL waits for the result a worker ACKs; WAITJOB reads a kept one', async () => {
  const requester = await connect();
  const worker = await connect();
  const q = queueName('call');
  const call = requester.call('CALL', q, '{"image":42}', 'TIMEOUT', '30');
  const job = await worker.call('CONSUME', q, 'TIMEOUT', '5');
  await worker.call('ACK', q, job[1], 'RESULT', '{"ok":true}');
  assert.equal(await call, '{"ok":true}');
  const id = await worker.call('PUBLISH', q, 'report', 'RETAIN', '600');
  const [, jobId, , , , attempt] = await worker.call('CONSUME', q);
  await worker.call('ACK', q, jobId, 'RESULT', '42 rows', 'ATTEMPT', String(attempt));
  assert.equal(await requester.call('WAITJOB', q, id, 'TIMEOUT', '5'), '42 rows');
  await assert.rejects(requester.call('CALL', q, 'nobody', 'TIMEOUT', '0.2'),
                       (e) => /^TIMEOUT job/.test(e.message));
});

test('CONSUME TIMEOUT on an empty queue answers null after the timeout', async () => {
  const redis = await connect();
  const q = queueName('timeout');
  const t0 = Date.now();
  assert.equal(await redis.call('CONSUME', q, 'TIMEOUT', '0.3'), null);
  const ms = Date.now() - t0;
  assert.ok(ms >= 250 && ms < 2000, `returned after ${ms} ms`);
});

test('a consumer blocked in ioredis is woken by a PUBLISH from another ioredis client', async () => {
  const consumer = await connect();
  const producer = await connect();
  const q = queueName('wake');
  const t0 = Date.now();
  const blocked = consumer.call('CONSUME', q, 'TTR', '30', 'TIMEOUT', '10');
  await h.sleep(300);
  const tPub = Date.now();
  const id = await producer.call('PUBLISH', q, 'wake up');
  const job = await blocked;
  const wokeAfter = Date.now() - tPub;
  assertJob(job, q, id, 'wake up', 0);
  assert.ok(tPub - t0 >= 250, 'the consumer must have been blocked before the publish');
  assert.ok(wokeAfter < 1000, `woken ${wokeAfter} ms after the publish`);
  assert.equal(await producer.call('ACK', q, id), 1);
});

test('a consumer blocked in ioredis is woken by a PUBLISH from redis-cli', async () => {
  const consumer = await connect();
  const q = queueName('wakecli');
  const blocked = consumer.sendCommand(command('CONSUME', [q, 'TTR', '30', 'TIMEOUT', '10']));
  await h.sleep(300);
  const tPub = Date.now();
  const id = (await h.redisCli('PUBLISH', q, 'from redis-cli')).trim();
  assert.match(id, ID_RE);
  const job = await blocked;
  const wokeAfter = Date.now() - tPub;
  assertJob(job, q, id, 'from redis-cli', 0);
  assert.ok(wokeAfter < 1000, `woken ${wokeAfter} ms after the publish`);
  assert.equal(await consumer.call('ACK', q, id), 1);
});

test('a job published through ioredis is consumed by redis-cli', async () => {
  const redis = await connect();
  const q = queueName('tocli');
  const id = await redis.call('PUBLISH', q, 'for redis-cli');
  const lines = (await h.redisCli('CONSUME', q, 'TTR', '30')).split('\n');
  assert.deepEqual(lines.slice(0, 6), [q, id, 'for redis-cli', '0', '86400', '1'],
                   JSON.stringify(lines));
  assert.equal(await redis.call('ACK', q, id), 1);
});

test('errors are ReplyErrors with the spec texts', async () => {
  const redis = await connect();
  await assert.rejects(redis.call('PUBLISH', 'q', 'x', 'TRIES', '0'),
                       (e) => e instanceof Redis.ReplyError &&
                              e.message === 'ERR value is not an integer or out of range');
  await assert.rejects(redis.call('CONSUME', 'q', 'TIMEOUT', '-1'),
                       (e) => e.message === 'ERR timeout is negative');
  assert.equal(await redis.ping(), 'PONG', 'the connection is still usable');
});

// redis://namespace:token@host:port (docs/commands.md): ioredis sends AUTH namespace token (or HELLO 3
// AUTH ...) on connect, so a URL is all a team's client needs.
test('a URL-authenticated client (redis://ns:token@host:port) publishes, consumes, acks', async () => {
  assert.ok(h.AUTH_URL, 'DEFERQ_AUTH_URL is not set (run_clients.sh sets it)');
  const options = { maxRetriesPerRequest: 0, retryStrategy: () => null, lazyConnect: true };
  const a = new Redis(h.AUTH_URL, options);
  const b = new Redis(h.AUTH_URL, options);
  clients.push(a, b);
  a.on('error', () => {});
  b.on('error', () => {});
  await a.connect();
  await b.connect();
  const q = queueName('url-auth');
  const blocked = b.call('CONSUME', q, 'TIMEOUT', '5');
  await h.sleep(200);
  const id = await a.call('PUBLISH', q, 'over-url');
  assert.match(String(id), ID_RE);
  const job = await blocked;
  assert.equal(String(job[1]), String(id));
  assert.equal(String(job[2]), 'over-url');
  assert.equal(await b.call('ACK', q, String(id)), 1);
  // A wrong token: ioredis reports the AUTH error as an 'error' event, then the connection ends.
  const wrong = new Redis(h.AUTH_URL.replace('@', 'x@'), options);
  clients.push(wrong);
  const errors = [];
  wrong.on('error', (e) => errors.push(String(e && e.message)));
  try {
    await wrong.connect();
  } catch (e) {
    errors.push(String(e && e.message));
  }
  await h.sleep(100);
  assert.ok(errors.some((m) => m.includes('WRONGPASS invalid username-password pair')),
            JSON.stringify(errors));
});

// docs/clients.md "Node: a blocking CONSUME holds its connection": commands are answered in order
// on one connection, so a PING sent on the consumer's client waits for the CONSUME; the fix, a
// connection of its own for the consumer, leaves other commands free.
test('trap: a PING on the client blocked in CONSUME waits for it; on another connection it does not',
     async () => {
       const shared = await connect();
       const other = await connect();
       const q = queueName('shared');
       const blocked = shared.call('CONSUME', q, 'TIMEOUT', '1');
       await h.sleep(50);
       let t0 = Date.now();
       assert.equal(await other.ping(), 'PONG');
       assert.ok(Date.now() - t0 < 500, `PING on another connection took ${Date.now() - t0} ms`);
       t0 = Date.now();
       assert.equal(await shared.ping(), 'PONG');
       const waited = Date.now() - t0;
       assert.equal(await blocked, null);
       assert.ok(waited >= 700, `PING on the consumer's connection waited ${waited} ms, not ~1 s`);
     });

h.run(PACKAGE, async () => {
  while (clients.length) clients.pop().disconnect();
});
