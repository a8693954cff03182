// deferq through ioredis's generic command API (SPEC §3): redis.call / callBuffer and
// sendCommand(new Redis.Command(...)), against a running deferq.
//
//   DEFERQ_PORT=P node tests/clients/test_ioredis.js
//
// Run by run_clients.sh, which starts redis-server and deferq and installs ioredis (the version
// pinned in package.json). Each test uses its own queue. Prints one line per test, then
// "N passed, M failed"; exits non-zero on any failure.
'use strict';

const assert = require('node:assert/strict');
const { execFile } = require('node:child_process');
const crypto = require('node:crypto');
const path = require('node:path');

const Redis = require(path.join(__dirname, 'node_modules', 'ioredis'));

const PORT = Number(process.env.DEFERQ_PORT);
if (!PORT) {
  console.error('DEFERQ_PORT is not set');
  process.exit(2);
}

const ID_RE = /^[0-9A-HJKMNP-TV-Z]{26}$/;  // 26 characters of Crockford base32
const DEFAULT_TTL = 86400;

const clients = [];

// A connected client; resolves once ioredis's ready check (INFO) has passed.
async function connect() {
  const redis = new Redis({
    host: '127.0.0.1',
    port: PORT,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,  // no reconnects: a dropped connection is a failure here
    lazyConnect: true,
  });
  clients.push(redis);
  redis.on('error', () => {});  // errors surface through the failing command
  await redis.connect();
  assert.equal(redis.status, 'ready');
  return redis;
}

function queueName(tag) {
  return `io-${tag}-${crypto.randomBytes(4).toString('hex')}`;
}

function command(name, args) {
  return new Redis.Command(name, args, { replyEncoding: 'utf8' });
}

function redisCli(...args) {
  return new Promise((resolve, reject) => {
    execFile('redis-cli', ['-h', '127.0.0.1', '-p', String(PORT), ...args], (err, stdout) => {
      if (err) reject(err);
      else resolve(stdout);
    });
  });
}

function assertJob(job, queue, id, payload, triesLeft) {
  assert.ok(Array.isArray(job), `job ${JSON.stringify(job)} is not an array`);
  assert.equal(job.length, 7,
    `job ${JSON.stringify(job)}: [queue, id, payload, tries_left, ttl_left_s, attempt, elapsed_ms]`);
  assert.equal(job[0], queue);
  assert.equal(job[1], id);
  assert.equal(job[2], payload);
  assert.equal(job[3], triesLeft);
  assert.ok(job[4] > DEFAULT_TTL - 10 && job[4] <= DEFAULT_TTL, `ttl_left_s ${job[4]}`);
  assert.ok(Number.isInteger(job[5]) && job[5] >= 1, `attempt ${job[5]}`);
  assert.ok(Number.isInteger(job[6]) && job[6] >= 0, `elapsed_ms ${job[6]}`);
}

const tests = [];
function test(name, fn) {
  tests.push({ name, fn });
}

test('ready check and connection commands', async () => {
  const redis = await connect();
  assert.equal(await redis.ping(), 'PONG');
  const info = await redis.info();
  assert.match(info, /# Server/);
  assert.equal(await redis.call('ECHO', 'hi'), 'hi');
});

test('publish, consume, ack through redis.call', async () => {
  const redis = await connect();
  const q = queueName('call');
  const id = await redis.call('PUBLISH', q, 'hello ioredis');
  assert.match(id, ID_RE);
  const job = await redis.call('CONSUME', q, 'TTR', '30');
  assertJob(job, q, id, 'hello ioredis', 0);
  assert.equal(await redis.call('CONSUME', q), null, 'an empty queue answers null');
  assert.equal(await redis.call('ACK', q, id), 1);
  assert.equal(await redis.call('ACK', q, id), 0, 'a second ACK counts 0');
  const stat = await redis.call('QSTAT', q);
  const m = {};
  for (let i = 0; i < stat.length; i += 2) m[stat[i]] = stat[i + 1];
  assert.deepEqual([m.ready, m.leased, m.published_total, m.consumed_total, m.acked_total],
                   [0, 0, 1, 1, 1], JSON.stringify(stat));
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
  assert.equal(await redis.call('ACK', q, ...ids, 'unknown-id'), 3);
  assert.equal(await redis.call('CONSUME', q, 'COUNT', '10', 'TIMEOUT', '0.2'), null);
});

test('binary payload round trip through callBuffer', async () => {
  const redis = await connect();
  const q = queueName('bin');
  const payload = Buffer.from([...Array(256).keys()]);  // every byte value, NUL and CR LF too
  const id = (await redis.callBuffer('PUBLISH', q, payload)).toString();
  assert.match(id, ID_RE);
  const job = await redis.callBuffer('CONSUME', q, 'TTR', '30');
  assert.equal(job[0].toString(), q);
  assert.equal(job[1].toString(), id);
  assert.ok(Buffer.isBuffer(job[2]) && job[2].equals(payload), 'payload bytes differ');
  assert.equal(await redis.call('ACK', q, id), 1);
});

test('ioredis built-in publish() sends PUBLISH queue payload and gets the id', async () => {
  const redis = await connect();
  const q = queueName('builtin');
  const id = await redis.publish(q, 'built in');
  assert.match(String(id), ID_RE);
  assertJob(await redis.call('CONSUME', q, 'TTR', '30'), q, String(id), 'built in', 0);
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
  await new Promise((r) => setTimeout(r, 300));
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
  await new Promise((r) => setTimeout(r, 300));
  const tPub = Date.now();
  const id = (await redisCli('PUBLISH', q, 'from redis-cli')).trim();
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
  const out = await redisCli('CONSUME', q, 'TTR', '30');
  const lines = out.split('\n');
  assert.deepEqual(lines.slice(0, 4), [q, id, 'for redis-cli', '0'], JSON.stringify(out));
  assert.equal(await redis.call('ACK', q, id), 1);
});

test('errors are ReplyErrors with the spec texts', async () => {
  const redis = await connect();
  await assert.rejects(redis.call('PUBLISH', 'q', 'x', 'TRIES', '0'),
                       (e) => e instanceof Redis.ReplyError &&
                              e.message === 'ERR value is not an integer or out of range');
  await assert.rejects(redis.call('CONSUME', 'q', 'TIMEOUT', '-1'),
                       (e) => e.message === 'ERR timeout is negative');
  // The connection is still usable.
  assert.equal(await redis.ping(), 'PONG');
});

async function main() {
  let passed = 0;
  let failed = 0;
  for (const t of tests) {
    const timer = new Promise((_, reject) => {
      t.timeout = setTimeout(() => reject(new Error('timed out after 20 s')), 20000);
    });
    try {
      await Promise.race([t.fn(), timer]);
      passed++;
      console.log(`ok   ioredis: ${t.name}`);
    } catch (e) {
      failed++;
      console.log(`FAIL ioredis: ${t.name}\n     ${String(e && e.stack || e).replace(/\n/g, '\n     ')}`);
    } finally {
      clearTimeout(t.timeout);
      while (clients.length) clients.pop().disconnect();
    }
  }
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed === 0 ? 0 : 1);
}

main();
