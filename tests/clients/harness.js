// What the Node client tests share (test_ioredis.js, test_node_redis.js): a tiny test runner that
// prints one line per test and "N passed, M failed", the job-array assertion of docs/commands.md, the INFO
// text parser the Node clients lack, and redis-cli for cross-client checks.
'use strict';

const assert = require('node:assert/strict');
const { execFile } = require('node:child_process');
const crypto = require('node:crypto');

const PORT = Number(process.env.DEFERQ_PORT);
if (!PORT) {
  console.error('DEFERQ_PORT is not set');
  process.exit(2);
}

// redis://namespace:token@127.0.0.1:port of the deferq with auth.required = true that
// run_clients.sh starts for the URL-authenticated tests.
const AUTH_URL = process.env.DEFERQ_AUTH_URL || '';

const ID_RE = /^[0-9A-HJKMNP-TV-Z]{26}$/;  // 26 characters of Crockford base32
const DEFAULT_TTL = 86400;
const ALL_BYTES = Buffer.from([...Array(256).keys()]);  // every byte value, NUL and CR LF too

function queueName(prefix, tag) {
  return `${prefix}-${tag}-${crypto.randomBytes(4).toString('hex')}`;
}

function sleep(ms) {
  return new Promise((r) => setTimeout(r, ms));
}

function redisCli(...args) {
  return new Promise((resolve, reject) => {
    execFile('redis-cli', ['-h', '127.0.0.1', '-p', String(PORT), ...args], (err, stdout) => {
      if (err) reject(err);
      else resolve(stdout);
    });
  });
}

// A job is [queue, id, payload, tries_left, ttl_left_s, attempt, elapsed_ms] in RESP2 and RESP3
// alike (docs/commands.md). `ttl` is the ttl it was published with; `attempt` defaults to 1.
function assertJob(job, queue, id, payload, triesLeft, { ttl = DEFAULT_TTL, attempt = 1 } = {}) {
  const text = JSON.stringify(job);
  assert.ok(Array.isArray(job), `job ${text} is not an array`);
  assert.equal(job.length, 7,
               `job ${text}: [queue, id, payload, tries_left, ttl_left_s, attempt, elapsed_ms]`);
  assert.equal(String(job[0]), queue);
  assert.equal(String(job[1]), id);
  if (Buffer.isBuffer(payload)) {
    assert.ok(Buffer.isBuffer(job[2]) && job[2].equals(payload), `payload bytes differ: ${text}`);
  } else {
    assert.equal(job[2], payload);
  }
  assert.equal(job[3], triesLeft, `tries_left of ${text}`);
  assert.ok(job[4] > ttl - 10 && job[4] <= ttl, `ttl_left_s of ${text}`);
  assert.equal(job[5], attempt, `attempt of ${text}`);
  assert.ok(Number.isInteger(job[6]) && job[6] >= 0 && job[6] < 60000, `elapsed_ms of ${text}`);
}

// INFO text as redis-py parses it: {section: {key: value}}, a value "a=1,b=x" becoming
// {a: 1, b: 'x'}. Keys end at the first ':', as in every client's parser.
function parseInfo(text) {
  const out = {};
  let section = null;
  for (const line of String(text).split('\r\n')) {
    if (line.startsWith('# ')) {
      section = line.slice(2).toLowerCase();
      out[section] = {};
    } else if (line && section) {
      const colon = line.indexOf(':');
      out[section][line.slice(0, colon)] = parseInfoValue(line.slice(colon + 1));
    }
  }
  return out;
}

function parseInfoValue(value) {
  if (!value.includes('=')) return /^-?\d+$/.test(value) ? Number(value) : value;
  const fields = {};
  for (const pair of value.split(',')) {
    const eq = pair.indexOf('=');
    const v = pair.slice(eq + 1);
    fields[pair.slice(0, eq)] = /^-?\d+$/.test(v) ? Number(v) : v;
  }
  return fields;
}

// The INFO key of a queue of namespace `default` (docs/commands.md: one key per queue, like `db0` in
// # Keyspace): "queue_" + namespace + "/" + queue, with ':' written "%3A" since parsers split at
// the first ':'.
function infoKey(queue) {
  return `queue_default/${queue.replaceAll(':', '%3A')}`;
}

// The `resp=` field of CLIENT INFO: the protocol a connection speaks.
function respOf(clientInfo) {
  const m = /(?:^| )resp=(\d)/.exec(String(clientInfo));
  return m ? Number(m[1]) : undefined;
}

const tests = [];
function test(name, fn) {
  tests.push({ name, fn });
}

// Runs every test (20 s each at most), calls `cleanup` after each, prints the summary and exits.
async function run(label, cleanup) {
  let passed = 0;
  let failed = 0;
  for (const t of tests) {
    let timeout;
    const timer = new Promise((_, reject) => {
      timeout = setTimeout(() => reject(new Error('timed out after 20 s')), 20000);
    });
    try {
      await Promise.race([t.fn(), timer]);
      passed++;
      console.log(`ok   ${label}: ${t.name}`);
    } catch (e) {
      failed++;
      console.log(`FAIL ${label}: ${t.name}\n     ${String((e && e.stack) || e).replace(/\n/g, '\n     ')}`);
    } finally {
      clearTimeout(timeout);
      await cleanup();
    }
  }
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed === 0 && passed > 0 ? 0 : 1);
}

module.exports = {
  PORT, AUTH_URL, ID_RE, DEFAULT_TTL, ALL_BYTES, assert, queueName, sleep, redisCli, assertJob, parseInfo,
  infoKey, respOf, test, run,
};
