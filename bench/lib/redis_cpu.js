// Redis's CPU seconds so far (INFO cpu, used_cpu_sys + used_cpu_user), for the BullMQ references
// of bench/fleet.sh and bench/call.sh: read before and after the work, per job.
'use strict';

async function redisCpu(r) {
  const info = await r.info('cpu');
  let s = 0;
  for (const line of info.split('\n')) {
    const m = /^used_cpu_(sys|user):([0-9.]+)/.exec(line.trim());
    if (m) s += Number(m[2]);
  }
  return s;
}

module.exports = { redisCpu };
