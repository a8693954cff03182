# deferq through redis-rb (Debian's ruby-redis, 4.x) with its default settings first: RESP2, a
# 5 s read timeout and one reconnect-and-resend on a connection error. Generic commands go through
# redis.call(...); transactions through multi { |tx| ... }, plain pipelines through
# pipelined { |p| ... }; info(section) is redis-rb's own INFO parser.
#
#   DEFERQ_PORT=P ruby tests/clients/test_redis_rb.rb
#
# Run by run_clients.sh, which starts redis-server and deferq. Each test uses its own queue.
# Prints one line per test, then "N passed, M failed"; exits non-zero on any failure.

require 'redis'
require 'securerandom'

PORT = Integer(ENV.fetch('DEFERQ_PORT', '0'))
abort 'DEFERQ_PORT is not set' if PORT.zero?

ID_RE = /\A[0-9A-HJKMNP-TV-Z]{26}\z/.freeze # 26 characters of Crockford base32
DEFAULT_TTL = 86_400
ALL_BYTES = (0..255).to_a.pack('C*').freeze # every byte value, NUL and CR LF too

class Failure < StandardError; end

def check(ok, message = 'check failed')
  raise Failure, message[0, 400] unless ok
end

def check_equal(expected, actual, what = 'value')
  check(expected == actual, "#{what}: expected #{expected.inspect}, got #{actual.inspect}")
end

# A job is [queue, id, payload, tries_left, ttl_left_s, attempt, elapsed_ms] (docs/commands.md).
def check_job(job, queue, id, payload, tries_left, ttl: DEFAULT_TTL, attempt: 1)
  check(job.is_a?(Array) && job.size == 7,
        "#{job.inspect}: [queue, id, payload, tries_left, ttl_left_s, attempt, elapsed_ms]")
  check_equal([queue, id, payload.b, tries_left], [job[0], job[1], job[2].b, job[3]], 'job')
  check(job[4].is_a?(Integer) && job[4] > ttl - 10 && job[4] <= ttl, "ttl_left_s of #{job.inspect}")
  check_equal(attempt, job[5], 'attempt')
  check(job[6].is_a?(Integer) && job[6] >= 0 && job[6] < 60_000, "elapsed_ms of #{job.inspect}")
end

def connect
  Redis.new(host: '127.0.0.1', port: PORT)
end

def queue_name(tag)
  "rb-#{tag}-#{SecureRandom.hex(4)}"
end

def qstat(redis, queue)
  Hash[*redis.call('QSTAT', queue)]
end

def now
  Process.clock_gettime(Process::CLOCK_MONOTONIC)
end

TESTS = []
def test(name, &block)
  TESTS << [name, block]
end

test 'the default handshake (RESP2): PING, INFO server' do
  r = connect
  check_equal 'PONG', r.ping
  check(r.info('server')['deferq_version'], 'INFO server has deferq_version')
end

test 'publish, consume, ack through call' do
  r = connect
  q = queue_name('basic')
  id = r.call('PUBLISH', q, 'hello redis-rb')
  check ID_RE.match?(id), "id #{id.inspect}"
  check_job r.call('CONSUME', q, 'TTR', 30), q, id, 'hello redis-rb', 0
  check_equal nil, r.call('CONSUME', q), 'CONSUME of an empty queue'
  check_equal 1, r.call('ACK', q, id), 'ACK'
  check_equal 0, r.call('ACK', q, id), 'a second ACK'
  s = qstat(r, q)
  check_equal [0, 0, 1, 1, 1], s.values_at('ready', 'leased', 'published_total', 'consumed_total',
                                           'acked_total'), 'QSTAT'
end

test 'publish with options (PDELAY, TTL, TRIES, ID); a blocking CONSUME gets it when due' do
  r = connect
  q = queue_name('options')
  key = "order-#{SecureRandom.hex(4)}"
  t0 = now
  check_equal key, r.call('PUBLISH', q, 'later', 'PDELAY', 300, 'TTL', 600, 'TRIES', 3, 'ID', key)
  check_equal key, r.call('PUBLISH', q, 'again', 'ID', key), 'idempotent publish'
  check_equal nil, r.call('CONSUME', q), 'not before its due time'
  # TIMEOUT below redis-rb's 5 s read timeout (see docs/clients.md).
  job = r.call('CONSUME', q, 'TTR', 30, 'TIMEOUT', 4)
  took = now - t0
  check_job job, q, key, 'later', 2, ttl: 600
  check took >= 0.25 && took < 3, "delivered after #{took} s, due after 0.3 s"
  check_equal 1, r.call('ACK', q, key)
end

test 'CONSUME TIMEOUT on an empty queue answers nil after the timeout' do
  r = connect
  t0 = now
  check_equal nil, r.call('CONSUME', queue_name('timeout'), 'TIMEOUT', '0.3')
  took = now - t0
  check took >= 0.25 && took < 2, "returned after #{took} s"
end

test 'multi: a MULTI/EXEC of 3 publishes returns 3 ids and creates 3 jobs' do
  r = connect
  q = queue_name('multi')
  ids = r.multi do |tx|
    tx.call('PUBLISH', q, 'm1')
    tx.call('PUBLISH', q, 'm2', 'TRIES', 2)
    tx.call('PUBLISH', q, 'm3')
  end
  check(ids.is_a?(Array) && ids.size == 3 && ids.all? { |id| ID_RE.match?(id) }, ids.inspect)
  check_equal 3, ids.uniq.size
  check_equal [3, 3], qstat(r, q).values_at('ready', 'published_total'), 'QSTAT'
  jobs = r.call('CONSUME', q, 'COUNT', 10, 'TTR', 30)
  check_equal ids, jobs.map { |j| j[1] }, 'ids of the consumed jobs'
  check_equal 3, r.call('ACK', q, *ids)
  check_equal 'PONG', r.ping, 'PING after EXEC'
end

test 'multi: a syntax error inside MULTI raises EXECABORT and creates no job' do
  r = connect
  q = queue_name('execabort')
  begin
    r.multi do |tx|
      tx.call('PUBLISH', q, 'a')
      tx.call('PUBLISH', q, 'b', 'NOSUCHOPTION', 1)
      tx.call('PUBLISH', q, 'c')
    end
    raise Failure, 'EXEC did not fail'
  rescue Redis::CommandError => e
    check_equal 'ERR syntax error', e.message # redis-rb raises the queuing error
  end
  check_equal [0, 0], qstat(r, q).values_at('ready', 'published_total'), 'QSTAT'
  check_equal 'PONG', r.ping, 'PING after EXECABORT'
end

test 'pipelined: 50 publishes then 50 consumes, FIFO' do
  r = connect
  q = queue_name('pipe')
  ids = r.pipelined { |p| 50.times { |i| p.call('PUBLISH', q, "job-#{i}") } }
  check_equal 50, ids.uniq.size
  jobs = r.pipelined { |p| 50.times { p.call('CONSUME', q, 'TTR', 30) } }
  jobs.each_with_index { |job, i| check_job job, q, ids[i], "job-#{i}", 0 }
  check_equal 50, r.call('ACK', q, *ids)
end

test 'binary payload: all 256 byte values round-trip' do
  r = connect
  q = queue_name('bin')
  id = r.call('PUBLISH', q, ALL_BYTES)
  job = r.call('CONSUME', q, 'TTR', 30)
  check_job job, q, id, ALL_BYTES, 0
  check_equal 1, r.call('ACK', q, id)
end

test 'info("queues"): both queues (names with ":") with their figures' do
  r = connect
  queues = [queue_name('info:a'), queue_name('info:b')]
  queues.each do |q|
    # A delayed job taken by a consumer waiting before it falls due records lateness
    # (one nobody waits for may be moved by a read instead: docs/metrics.md).
    id = r.call('PUBLISH', q, 'due', 'PDELAY', 300)
    check_job r.call('CONSUME', q, 'TTR', 30, 'TIMEOUT', 4), q, id, 'due', 0
    check_equal 1, r.call('ACK', q, id)
  end
  info = r.info('queues')
  queues.each do |q|
    key = "queue_default/#{q.gsub(':', '%3A')}" # one key per queue, ':' as %3A (docs/commands.md)
    check(info.key?(key), "#{key} in #{info.inspect}")
    check(info[key].split(',').include?('lateness_count=1'), "figures of #{q}: #{info[key]}")
  end
end

test 'publish (the pub/sub habit) sends PUBLISH queue message: it creates a job' do
  r = connect
  q = queue_name('pubsub-habit')
  id = r.publish(q, 'not a broadcast')
  check ID_RE.match?(id.to_s), "publish answered #{id.inspect}"
  check_job r.call('CONSUME', q, 'TTR', 30), q, id.to_s, 'not a broadcast', 0
  check_equal 1, r.call('ACK', q, id.to_s)
end

test 'errors raise Redis::CommandError with the spec texts' do
  r = connect
  begin
    r.call('PUBLISH', 'q', 'x', 'TRIES', 0)
    raise Failure, 'no error'
  rescue Redis::CommandError => e
    check_equal 'ERR value is not an integer or out of range', e.message
  end
  check_equal 'PONG', r.ping
end

passed = 0
failed = 0
TESTS.each do |name, block|
  block.call
  passed += 1
  puts "ok   redis-rb: #{name}"
rescue StandardError => e
  failed += 1
  puts "FAIL redis-rb: #{name}\n     #{e.class}: #{e.message}"
  puts e.backtrace.reject { |l| l.include?('/gems/') }.first(3).map { |l| "     #{l}" }
end
puts "#{passed} passed, #{failed} failed"
exit(failed.zero? && passed.positive? ? 0 : 1)
