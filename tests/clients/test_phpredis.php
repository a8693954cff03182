<?php
// deferq through phpredis (Debian's php-redis, 5.x) with its default settings first: RESP2, read
// timeout 0 = PHP's default_socket_timeout (60 s). A null array reply (CONSUME that got nothing)
// comes back as an empty array. Generic commands go through rawCommand();
// transactions through multi() ... exec(), plain pipelines through pipeline() ... exec();
// info($section) is phpredis's own INFO parser.
//
//   DEFERQ_PORT=P php tests/clients/test_phpredis.php
//
// Run by run_clients.sh, which starts redis-server and deferq. Each test uses its own queue.
// Prints one line per test, then "N passed, M failed"; exits non-zero on any failure.

declare(strict_types=1);

require __DIR__ . '/php_harness.php';

$port = deferq_port();

function connect(): Redis
{
    global $port;
    $r = new Redis();
    $r->connect('127.0.0.1', $port);
    return $r;
}

function q(string $tag): string
{
    return queue_name('phpredis', $tag);
}

function qstat(Redis $r, string $q): array
{
    return pairs($r->rawCommand('QSTAT', $q));
}

$tests = [];

$tests['the default handshake (RESP2): PING, INFO server'] = function () {
    $r = connect();
    check_equal(true, $r->ping());
    check(isset($r->info('server')['deferq_version']), 'INFO server has deferq_version');
};

$tests['publish, consume, ack through rawCommand'] = function () {
    $r = connect();
    $q = q('basic');
    $id = $r->rawCommand('PUBLISH', $q, 'hello phpredis');
    check(is_id($id), "id $id");
    check_job($r->rawCommand('CONSUME', $q, 'TTR', '30'), $q, $id, 'hello phpredis', 0);
    check_equal([], $r->rawCommand('CONSUME', $q), 'CONSUME of an empty queue');
    check_equal(1, $r->rawCommand('ACK', $q, $id), 'ACK');
    check_equal(0, $r->rawCommand('ACK', $q, $id), 'a second ACK');
    $s = qstat($r, $q);
    check_equal([0, 0, 1, 1, 1], [$s['ready'], $s['leased'], $s['published_total'],
                                  $s['consumed_total'], $s['acked_total']], 'QSTAT');
};

$tests['publish with options (PDELAY, TTL, TRIES, ID); a blocking CONSUME gets it when due'] =
    function () {
        $r = connect();
        $q = q('options');
        $key = 'order-' . bin2hex(random_bytes(4));
        $t0 = microtime(true);
        check_equal($key, $r->rawCommand('PUBLISH', $q, 'later', 'PDELAY', '300', 'TTL', '600',
                                         'TRIES', '3', 'ID', $key));
        check_equal($key, $r->rawCommand('PUBLISH', $q, 'again', 'ID', $key), 'idempotent publish');
        check_equal([], $r->rawCommand('CONSUME', $q), 'not before its due time');
        $job = $r->rawCommand('CONSUME', $q, 'TTR', '30', 'TIMEOUT', '4');
        $took = microtime(true) - $t0;
        check_job($job, $q, $key, 'later', 2, 600);
        check($took >= 0.25 && $took < 3, "delivered after $took s, due after 0.3 s");
        check_equal(1, $r->rawCommand('ACK', $q, $key));
    };

$tests['CONSUME TIMEOUT on an empty queue answers null after the timeout'] = function () {
    $r = connect();
    $t0 = microtime(true);
    check_equal([], $r->rawCommand('CONSUME', q('timeout'), 'TIMEOUT', '0.3'));
    $took = microtime(true) - $t0;
    check($took >= 0.25 && $took < 2, "returned after $took s");
};

$tests['multi(): a MULTI/EXEC of 3 publishes returns 3 ids and creates 3 jobs'] = function () {
    $r = connect();
    $q = q('multi');
    $ids = $r->multi()
             ->rawCommand('PUBLISH', $q, 'm1')
             ->rawCommand('PUBLISH', $q, 'm2', 'TRIES', '2')
             ->rawCommand('PUBLISH', $q, 'm3')
             ->exec();
    check(is_array($ids) && count($ids) === 3, show($ids));
    check(is_id($ids[0]) && is_id($ids[1]) && is_id($ids[2]), show($ids));
    check_equal(3, count(array_unique($ids)));
    $s = qstat($r, $q);
    check_equal([3, 3], [$s['ready'], $s['published_total']], 'QSTAT');
    $jobs = $r->rawCommand('CONSUME', $q, 'COUNT', '10', 'TTR', '30');
    check_equal($ids, array_column($jobs, 1), 'ids of the consumed jobs');
    check_equal(3, $r->rawCommand('ACK', $q, ...$ids));
    check_equal(true, $r->ping(), 'PING after EXEC');
};

$tests['multi(): a syntax error inside MULTI fails the transaction and creates no job'] =
    function () {
        $r = connect();
        // phpredis reads each reply while queuing; after a refused command its exec() waits for
        // the read timeout (60 s by default) and throws, as it does against Redis: shorten it.
        $r->setOption(Redis::OPT_READ_TIMEOUT, 0.5);
        $q = q('execabort');
        $t0 = microtime(true);
        $m = $r->multi();
        $m->rawCommand('PUBLISH', $q, 'a');
        check_equal(false, $m->rawCommand('PUBLISH', $q, 'b', 'NOSUCHOPTION', '1'), 'queuing');
        $m->rawCommand('PUBLISH', $q, 'c');
        try {
            $result = $m->exec();
        } catch (RedisException $e) {
            $result = $e->getMessage();
        }
        check_equal('socket error on read socket', $result, 'exec()');
        check(microtime(true) - $t0 < 5, 'exec() gave up after its read timeout');
        $r = connect();
        $s = qstat($r, $q);
        check_equal([0, 0], [$s['ready'], $s['published_total']], 'QSTAT');
    };

$tests['pipeline(): 50 publishes then 50 consumes, FIFO'] = function () {
    $r = connect();
    $q = q('pipe');
    $p = $r->pipeline();
    for ($i = 0; $i < 50; $i++) {
        $p->rawCommand('PUBLISH', $q, "job-$i");
    }
    $ids = $p->exec();
    check_equal(50, count(array_unique($ids)));
    $p = $r->pipeline();
    for ($i = 0; $i < 50; $i++) {
        $p->rawCommand('CONSUME', $q, 'TTR', '30');
    }
    foreach ($p->exec() as $i => $job) {
        check_job($job, $q, $ids[$i], "job-$i", 0);
    }
    check_equal(50, $r->rawCommand('ACK', $q, ...$ids));
};

$tests['binary payload: all 256 byte values round-trip'] = function () {
    $r = connect();
    $q = q('bin');
    $id = $r->rawCommand('PUBLISH', $q, all_bytes());
    check_job($r->rawCommand('CONSUME', $q, 'TTR', '30'), $q, $id, all_bytes(), 0);
    check_equal(1, $r->rawCommand('ACK', $q, $id));
};

$tests['info("queues"): both queues (names with ":") with their figures'] = function () {
    $r = connect();
    $queues = [q('info:a'), q('info:b')];
    foreach ($queues as $q) {
        // Taken by a consumer waiting before it falls due, it records lateness (one nobody
        // waits for may be moved by a read instead: docs/metrics.md).
        $id = $r->rawCommand('PUBLISH', $q, 'due', 'PDELAY', '300');
        check_job($r->rawCommand('CONSUME', $q, 'TTR', '30', 'TIMEOUT', '4'), $q, $id, 'due', 0);
        check_equal(1, $r->rawCommand('ACK', $q, $id));
    }
    $info = $r->info('queues');
    foreach ($queues as $q) {
        $entry = $info[info_key($q)] ?? null;
        check($entry !== null, info_key($q) . ' in ' . show($info));
        check(in_array('lateness_count=1', explode(',', $entry), true), "figures of $q: $entry");
    }
};

$tests['publish() (the pub/sub habit) creates a job; phpredis answers false (not an integer)'] =
    function () {
        $r = connect();
        $q = q('pubsub-habit');
        check_equal(false, $r->publish($q, 'not a broadcast'), 'publish()');
        $job = $r->rawCommand('CONSUME', $q, 'TTR', '30');
        check(is_array($job) && is_id($job[1] ?? null), show($job));
        check_job($job, $q, $job[1], 'not a broadcast', 0);
        check_equal(1, $r->rawCommand('ACK', $q, $job[1]));
    };

$tests['errors: rawCommand answers false and getLastError() has the spec text'] = function () {
    $r = connect();
    check_equal(false, $r->rawCommand('PUBLISH', 'q', 'x', 'TRIES', '0'));
    check_equal('ERR value is not an integer or out of range', $r->getLastError());
    check_equal(true, $r->ping());
};

// docs/clients.md "A read timeout shorter than CONSUME ... TIMEOUT", phpredis: the trap, then
// both fixes. The trap: past its read timeout phpredis throws but keeps the socket, deferq leases
// the next job to the waiting CONSUME, and that job is the reply to the connection's next command.
$tests['trap: past its read timeout phpredis keeps the socket and every later reply is one behind'] =
    function () {
        $r = connect();
        $r->setOption(Redis::OPT_READ_TIMEOUT, 0.3);
        $publisher = connect();
        $q = q('read-timeout');
        $threw = false;
        try {
            $r->rawCommand('CONSUME', $q, 'TTR', '30', 'TIMEOUT', '2');
        } catch (RedisException $e) {
            $threw = true;
        }
        check($threw, 'CONSUME past the read timeout throws');
        check_equal(true, $r->isConnected(), 'the socket stays open');
        $id = $publisher->rawCommand('PUBLISH', $q, 'lost');
        usleep(300000);
        $reply = $r->rawCommand('PING');
        check(is_array($reply) && ($reply[1] ?? null) === $id, 'PING answered the job: ' . show($reply));
        check_equal(1, pairs($publisher->rawCommand('QSTAT', $q))['leased'], 'the job is leased');
    };

$tests['fix: close() after a read timeout and reconnect; nothing is leased to the closed socket'] =
    function () {
        $r = connect();
        $r->setOption(Redis::OPT_READ_TIMEOUT, 0.3);
        $publisher = connect();
        $q = q('read-timeout-close');
        try {
            $r->rawCommand('CONSUME', $q, 'TTR', '30', 'TIMEOUT', '2');
            check(false, 'CONSUME past the read timeout throws');
        } catch (RedisException $e) {
            $r->close();
            $r = connect();
        }
        $id = $publisher->rawCommand('PUBLISH', $q, 'kept');
        check_equal(true, $r->ping(), 'PING answers PONG');
        check_job($r->rawCommand('CONSUME', $q, 'TTR', '30'), $q, $id, 'kept', 0);
    };

$tests['fix: OPT_READ_TIMEOUT -1 on a consumer connection: CONSUME waits its whole TIMEOUT'] =
    function () {
        $r = connect();
        $r->setOption(Redis::OPT_READ_TIMEOUT, -1);
        $t0 = microtime(true);
        check_equal([], $r->rawCommand('CONSUME', q('no-read-timeout'), 'TIMEOUT', '1'), 'CONSUME');
        $took = microtime(true) - $t0;
        check($took >= 0.9 && $took < 5, "returned after $took s");
        check_equal(true, $r->ping());
    };

run_tests('phpredis', $tests);
