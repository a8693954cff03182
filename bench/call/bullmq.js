// The BullMQ reference of bench/call.sh: request/reply with BullMQ 6's waitUntilFinished on its
// own redis-server. REQUESTERS requesters each add a job and wait for it to finish, one after the
// other, until N round trips; one Worker of concurrency 50 answers each with a result.
//
//   node bench/call/bullmq.js REDIS_PORT N REQUESTERS
//
// Prints one line `RESULT n=.. p50=.. p99=.. redis_us_per_call=..`: round trip = add to result
// (ms), Redis CPU (INFO cpu, user+sys) over the round trips, per call.
'use strict';

const { Queue, QueueEvents, Worker } = require('bullmq');
const IORedis = require('ioredis');
const { redisCpu } = require('../lib/redis_cpu.js');

const [port, n, requesters] = process.argv.slice(2).map(Number);
if (!port || !n || !requesters) {
  console.error('usage: node bullmq.js REDIS_PORT N REQUESTERS');
  process.exit(2);
}

async function main() {
  const connection = { host: '127.0.0.1', port, maxRetriesPerRequest: null };
  const admin = new IORedis(connection);
  const name = 'calls' + Date.now();
  const queue = new Queue(name, { connection });
  const events = new QueueEvents(name, { connection });
  // The result is kept 60 s, as deferq's CALL keeps it by default.
  const worker = new Worker(name, async (job) => 'result of ' + job.data.p,
    { connection, concurrency: 50 });
  await Promise.all([worker.waitUntilReady(), events.waitUntilReady()]);
  const trips = [];
  let next = 0;
  const cpu0 = await redisCpu(admin);
  async function requester() {
    while (next < n) {
      const i = next++;
      const t0 = process.hrtime.bigint();
      const job = await queue.add('call', { p: 'p' + i },
        { removeOnComplete: { age: 60 }, removeOnFail: { age: 60 } });
      const r = await job.waitUntilFinished(events, 30000);
      if (r !== 'result of p' + i) throw new Error('wrong result ' + r);
      trips.push(Number(process.hrtime.bigint() - t0) / 1e6);
    }
  }
  await Promise.all(Array.from({ length: requesters }, requester));
  const cpu1 = await redisCpu(admin);
  trips.sort((a, b) => a - b);
  const q = (p) => trips[Math.min(trips.length - 1, Math.floor(p * trips.length))];
  console.log(`RESULT n=${trips.length} p50=${q(0.5).toFixed(2)} p99=${q(0.99).toFixed(2)} ` +
              `redis_us_per_call=${((cpu1 - cpu0) * 1e6 / n).toFixed(1)}`);
  await worker.close();
  await events.close();
  await queue.close();
  admin.disconnect();
}

main().then(() => process.exit(0), (e) => { console.error(e); process.exit(1); });
