<?php
// What the PHP client tests share (test_phpredis.php, test_predis.php): checks, the job-array
// check of docs/commands.md, and a runner that prints one line per test and "N passed, M failed".

declare(strict_types=1);

const ID_RE = '/^[0-9A-HJKMNP-TV-Z]{26}$/';  // 26 characters of Crockford base32
const DEFAULT_TTL = 86400;

final class Failure extends Exception
{
}

function deferq_port(): int
{
    $port = (int) getenv('DEFERQ_PORT');
    if ($port === 0) {
        fwrite(STDERR, "DEFERQ_PORT is not set\n");
        exit(2);
    }
    return $port;
}

function all_bytes(): string  // every byte value, NUL and CR LF too
{
    return implode('', array_map('chr', range(0, 255)));
}

function check(bool $ok, string $message = 'check failed'): void
{
    if (!$ok) {
        throw new Failure(substr($message, 0, 400));
    }
}

// A value as JSON, binary strings included.
function show($value): string
{
    return json_encode($value, JSON_INVALID_UTF8_SUBSTITUTE | JSON_PARTIAL_OUTPUT_ON_ERROR);
}

function check_equal($expected, $actual, string $what = 'value'): void
{
    check($expected === $actual, "$what: expected " . show($expected) . ', got ' . show($actual));
}

function is_id($id): bool
{
    return is_string($id) && preg_match(ID_RE, $id) === 1;
}

// A job is [queue, id, payload, tries_left, ttl_left_s, attempt, elapsed_ms] (docs/commands.md).
function check_job($job, string $queue, string $id, string $payload, int $triesLeft,
                   int $ttl = DEFAULT_TTL, int $attempt = 1): void
{
    check(is_array($job) && count($job) === 7,
          show($job) . ': [queue, id, payload, tries_left, ttl_left_s, attempt, elapsed_ms]');
    check_equal([$queue, $id, $payload, $triesLeft], array_slice($job, 0, 4), 'job');
    check(is_int($job[4]) && $job[4] > $ttl - 10 && $job[4] <= $ttl, 'ttl_left_s ' . $job[4]);
    check_equal($attempt, $job[5], 'attempt');
    check(is_int($job[6]) && $job[6] >= 0 && $job[6] < 60000, 'elapsed_ms ' . $job[6]);
}

function queue_name(string $prefix, string $tag): string
{
    return $prefix . '-' . $tag . '-' . bin2hex(random_bytes(4));
}

// A flat field/value array (QSTAT in RESP2) as a map.
function pairs(array $flat): array
{
    $map = [];
    for ($i = 0; $i + 1 < count($flat); $i += 2) {
        $map[$flat[$i]] = $flat[$i + 1];
    }
    return $map;
}

// The INFO key of a queue of namespace `default` (docs/commands.md: one key per queue, ':' as %3A).
function info_key(string $queue): string
{
    return 'queue_default/' . str_replace(':', '%3A', $queue);
}

// Runs the tests ([name => callable]), prints the summary and exits.
function run_tests(string $label, array $tests): void
{
    $passed = 0;
    $failed = 0;
    foreach ($tests as $name => $fn) {
        try {
            $fn();
            $passed++;
            echo "ok   $label: $name\n";
        } catch (Throwable $e) {
            $failed++;
            echo "FAIL $label: $name\n     " . get_class($e) . ': ' . $e->getMessage() . "\n";
            // The line of the test that failed: where it threw, or where it called check().
            $frames = array_merge([['file' => $e->getFile(), 'line' => $e->getLine()]],
                                  $e->getTrace());
            foreach ($frames as $frame) {
                if (isset($frame['file']) && $frame['file'] !== __FILE__) {
                    echo '     at ' . basename($frame['file']) . ':' . $frame['line'] . "\n";
                    break;
                }
            }
        }
    }
    echo "$passed passed, $failed failed\n";
    exit($failed === 0 && $passed > 0 ? 0 : 1);
}
