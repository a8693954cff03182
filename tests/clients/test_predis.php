<?php
// deferq through Predis (Debian's php-predis, 1.x) with its default settings first: RESP2,
// read_write_timeout = PHP's default_socket_timeout (60 s). Commands Predis does not know go
// through executeRaw([...]) or executeCommand(RawCommand::create(...)) (the latter also inside
// transaction() and pipeline()); info($section) is Predis's own INFO parser.
//
//   DEFERQ_PORT=P php tests/clients/test_predis.php
//
// Run by run_clients.sh, which starts redis-server and deferq. Each test uses its own queue.
// Prints one line per test, then "N passed, M failed"; exits non-zero on any failure.

declare(strict_types=1);

require __DIR__ . '/php_harness.php';
require 'Predis/Autoloader.php';  // Debian installs it on PHP's include_path

Predis\Autoloader::register();

use Predis\Client;
use Predis\Command\RawCommand;

$port = deferq_port();

function connect(): Client
{
    global $port;
    return new Client("tcp://127.0.0.1:$port");
}

function q(string $tag): string
{
    return queue_name('predis', $tag);
}

function raw(string ...$args): RawCommand
{
    return RawCommand::create(...$args);
}

function qstat(Client $c, string $q): array
{
    return pairs($c->executeRaw(['QSTAT', $q]));
}

$tests = [];

$tests['the default handshake (RESP2): PING, INFO server'] = function () {
    $c = connect();
    check_equal('PONG', (string) $c->ping());
    check(isset($c->info('server')['Server']['deferq_version']), 'INFO server has deferq_version');
};

$tests['publish, consume, ack through executeRaw'] = function () {
    $c = connect();
    $q = q('basic');
    $id = $c->executeRaw(['PUBLISH', $q, 'hello predis']);
    check(is_id($id), "id $id");
    check_job($c->executeRaw(['CONSUME', $q, 'TTR', '30']), $q, $id, 'hello predis', 0);
    check_equal(null, $c->executeRaw(['CONSUME', $q]), 'CONSUME of an empty queue');
    check_equal(1, $c->executeRaw(['ACK', $q, $id]), 'ACK');
    check_equal(0, $c->executeRaw(['ACK', $q, $id]), 'a second ACK');
    $s = qstat($c, $q);
    check_equal([0, 0, 1, 1, 1], [$s['ready'], $s['leased'], $s['published_total'],
                                  $s['consumed_total'], $s['acked_total']], 'QSTAT');
};

$tests['publish with options (PDELAY, TTL, TRIES, ID); a blocking CONSUME gets it when due'] =
    function () {
        $c = connect();
        $q = q('options');
        $key = 'order-' . bin2hex(random_bytes(4));
        $t0 = microtime(true);
        check_equal($key, $c->executeRaw(['PUBLISH', $q, 'later', 'PDELAY', '300', 'TTL', '600',
                                          'TRIES', '3', 'ID', $key]));
        check_equal($key, $c->executeRaw(['PUBLISH', $q, 'again', 'ID', $key]), 'idempotent publish');
        check_equal(null, $c->executeRaw(['CONSUME', $q]), 'not before its due time');
        $job = $c->executeRaw(['CONSUME', $q, 'TTR', '30', 'TIMEOUT', '4']);
        $took = microtime(true) - $t0;
        check_job($job, $q, $key, 'later', 2, 600);
        check($took >= 0.25 && $took < 3, "delivered after $took s, due after 0.3 s");
        check_equal(1, $c->executeRaw(['ACK', $q, $key]));
    };

$tests['CONSUME TIMEOUT on an empty queue answers null after the timeout'] = function () {
    $c = connect();
    $t0 = microtime(true);
    check_equal(null, $c->executeRaw(['CONSUME', q('timeout'), 'TIMEOUT', '0.3']));
    $took = microtime(true) - $t0;
    check($took >= 0.25 && $took < 2, "returned after $took s");
};

$tests['transaction(): a MULTI/EXEC of 3 publishes returns 3 ids and creates 3 jobs'] =
    function () {
        $c = connect();
        $q = q('multi');
        $ids = $c->transaction(function ($tx) use ($q) {
            $tx->executeCommand(raw('PUBLISH', $q, 'm1'));
            $tx->executeCommand(raw('PUBLISH', $q, 'm2', 'TRIES', '2'));
            $tx->executeCommand(raw('PUBLISH', $q, 'm3'));
        });
        check(is_array($ids) && count($ids) === 3, show($ids));
        check(is_id($ids[0]) && is_id($ids[1]) && is_id($ids[2]), show($ids));
        check_equal(3, count(array_unique($ids)));
        $s = qstat($c, $q);
        check_equal([3, 3], [$s['ready'], $s['published_total']], 'QSTAT');
        $jobs = $c->executeRaw(['CONSUME', $q, 'COUNT', '10', 'TTR', '30']);
        check_equal($ids, array_column($jobs, 1), 'ids of the consumed jobs');
        check_equal(3, $c->executeRaw(array_merge(['ACK', $q], $ids)));
        check_equal('PONG', (string) $c->ping(), 'PING after EXEC');
    };

$tests['transaction(): a syntax error inside MULTI aborts it (EXECABORT), no job is created'] =
    function () {
        $c = connect();
        $q = q('execabort');
        try {
            $c->transaction(function ($tx) use ($q) {
                $tx->executeCommand(raw('PUBLISH', $q, 'a'));
                $tx->executeCommand(raw('PUBLISH', $q, 'b', 'NOSUCHOPTION', '1'));
                $tx->executeCommand(raw('PUBLISH', $q, 'c'));
            });
            throw new Failure('the transaction did not fail');
        } catch (Predis\Transaction\AbortedMultiExecException $e) {
            check(str_contains($e->getMessage(), 'syntax error'), $e->getMessage());
        }
        $s = qstat($c, $q);
        check_equal([0, 0], [$s['ready'], $s['published_total']], 'QSTAT');
        check_equal('PONG', (string) $c->ping(), 'PING after EXECABORT');
    };

$tests['pipeline(): 50 publishes then 50 consumes, FIFO'] = function () {
    $c = connect();
    $q = q('pipe');
    $ids = $c->pipeline(function ($p) use ($q) {
        for ($i = 0; $i < 50; $i++) {
            $p->executeCommand(raw('PUBLISH', $q, "job-$i"));
        }
    });
    check_equal(50, count(array_unique($ids)));
    $jobs = $c->pipeline(function ($p) use ($q) {
        for ($i = 0; $i < 50; $i++) {
            $p->executeCommand(raw('CONSUME', $q, 'TTR', '30'));
        }
    });
    foreach ($jobs as $i => $job) {
        check_job($job, $q, $ids[$i], "job-$i", 0);
    }
    check_equal(50, $c->executeRaw(array_merge(['ACK', $q], $ids)));
};

$tests['binary payload: all 256 byte values round-trip'] = function () {
    $c = connect();
    $q = q('bin');
    $id = $c->executeRaw(['PUBLISH', $q, all_bytes()]);
    check_job($c->executeRaw(['CONSUME', $q, 'TTR', '30']), $q, $id, all_bytes(), 0);
    check_equal(1, $c->executeRaw(['ACK', $q, $id]));
};

$tests['info("queues"): both queues (names with ":") with their figures'] = function () {
    $c = connect();
    $queues = [q('info:a'), q('info:b')];
    foreach ($queues as $q) {
        // Taken by a consumer waiting before it falls due, it records lateness (one nobody
        // waits for may be moved by a read instead: docs/metrics.md).
        $id = $c->executeRaw(['PUBLISH', $q, 'due', 'PDELAY', '300']);
        check_job($c->executeRaw(['CONSUME', $q, 'TTR', '30', 'TIMEOUT', '4']), $q, $id, 'due', 0);
        check_equal(1, $c->executeRaw(['ACK', $q, $id]));
    }
    $info = $c->info('queues');
    foreach ($queues as $q) {
        $entry = $info['Queues'][info_key($q)] ?? null;
        check($entry !== null, info_key($q) . ' in ' . show($info));
        check(in_array('lateness_count=1', explode(',', $entry), true), "figures of $q: $entry");
    }
};

$tests['publish() (the pub/sub habit) sends PUBLISH queue message: it creates a job'] =
    function () {
        $c = connect();
        $q = q('pubsub-habit');
        $id = $c->publish($q, 'not a broadcast');
        check(is_id($id), 'publish() answered ' . show($id));
        check_job($c->executeRaw(['CONSUME', $q, 'TTR', '30']), $q, $id, 'not a broadcast', 0);
        check_equal(1, $c->executeRaw(['ACK', $q, $id]));
    };

$tests['errors: executeRaw answers an error response with the spec text'] = function () {
    $c = connect();
    $error = $c->executeRaw(['PUBLISH', 'q', 'x', 'TRIES', '0'], $isError);
    check_equal(true, $isError, 'is an error');
    check_equal('ERR value is not an integer or out of range', $error);
    check_equal('PONG', (string) $c->ping());
};

run_tests('Predis', $tests);
