// The BullMQ reference of bench/fleet.sh: the same work as a deferq lateness shape, done by
// BullMQ 6 on its own redis-server. N delayed jobs fall due at a steady rate over a window
// (job i is due at start + i * window / N, its delay computed when it is added), on one queue;
// one Worker of concurrency 50 takes them (removeOnComplete, so Redis does not keep them).
//
//   node bench/fleet/bullmq.js REDIS_PORT JOBS WINDOW_MS LEAD_MS
//
// Prints one line `RESULT n=.. received=.. p50=.. p99=.. max=.. redis_us_per_job=..`: lateness =
// the time the processor ran minus the job's due time (ms), Redis CPU (INFO cpu, user+sys) from
// the first add to the last job completed, per job.
'use strict';

const { Queue, Worker } = require('bullmq');
const IORedis = require('ioredis');
const { redisCpu } = require('../lib/redis_cpu.js');

const [port, jobs, windowMs, leadMs] = process.argv.slice(2).map(Number);
if (!port || !jobs || !windowMs || !leadMs) {
  console.error('usage: node bullmq.js REDIS_PORT JOBS WINDOW_MS LEAD_MS');
  process.exit(2);
}

async function main() {
  const connection = { host: '127.0.0.1', port, maxRetriesPerRequest: null };
  const admin = new IORedis(connection);
  const name = 'fleet' + Date.now();
  const queue = new Queue(name, { connection });
  const late = [];
  let done;
  const finished = new Promise((resolve) => { done = resolve; });
  const worker = new Worker(name, async (job) => {
    late.push(Date.now() - job.data.due);
    if (late.length === jobs) done();
  }, { connection, concurrency: 50, removeOnComplete: { count: 0 }, removeOnFail: { count: 1000 } });
  await worker.waitUntilReady();
  const cpu0 = await redisCpu(admin);
  const start = Date.now() + leadMs;
  for (let i = 0; i < jobs; i += 500) {
    const batch = [];
    for (let k = i; k < Math.min(jobs, i + 500); ++k) {
      const due = start + Math.floor((k * windowMs) / jobs);
      batch.push({ name: 'j', data: { due }, opts: { delay: Math.max(0, due - Date.now()) } });
    }
    await queue.addBulk(batch);
  }
  const margin = start - Date.now();
  const timeout = new Promise((resolve) => setTimeout(resolve, leadMs + windowMs + 15000));
  await Promise.race([finished, timeout]);
  const cpu1 = await redisCpu(admin);
  late.sort((a, b) => a - b);
  const q = (p) => (late.length ? late[Math.min(late.length - 1, Math.floor(p * late.length))] : NaN);
  console.log(`RESULT n=${jobs} received=${late.length} p50=${q(0.5)} p99=${q(0.99)} ` +
              `max=${late[late.length - 1]} margin_ms=${margin} ` +
              `redis_us_per_job=${((cpu1 - cpu0) * 1e6 / jobs).toFixed(1)}`);
  await worker.close();
  await queue.obliterate({ force: true }).catch(() => {});
  await queue.close();
  admin.disconnect();
}

main().catch((e) => { console.error(e); process.exit(1); });
