# deferq through Redis.pm (Debian's libredis-perl, 2.000) with its default settings: RESP2, no
# read timeout, no reconnect. Any method name is sent as a command (`$r->consume(...)` sends
# CONSUME; an underscore splits words: `$r->deadletter_size($q)` sends DEADLETTER SIZE); a
# trailing code reference pipelines the command (its reply goes to the callback at
# `wait_all_responses`); `info($section)` is Redis.pm's own INFO parser.
#
#   DEFERQ_PORT=P perl tests/clients/test_redis_perl.pl
#
# Run by run_clients.sh, which starts redis-server and deferq. Each test uses its own queue.
# Prints one line per test, then "N passed, M failed"; exits non-zero on any failure.
use strict;
use warnings;
use Redis;
use Time::HiRes qw(time);

my $port = $ENV{DEFERQ_PORT} or die "DEFERQ_PORT is not set\n";
my $id_re = qr/\A[0-9A-HJKMNP-TV-Z]{26}\z/;    # 26 characters of Crockford base32
my $all_bytes = join '', map { chr } 0 .. 255;    # every byte value, NUL and CR LF too

sub connect_deferq { Redis->new(server => "127.0.0.1:$port") }

sub queue_name { sprintf 'pl-%s-%08x', $_[0], int(rand(2**32)) }

sub check {
  my ($ok, $what) = @_;
  die "$what\n" unless $ok;
}

sub check_equal {
  my ($expected, $actual, $what) = @_;
  my $e = defined $expected ? $expected : 'undef';
  my $a = defined $actual ? $actual : 'undef';
  die "$what: expected '$e', got '$a'\n" unless $e eq $a;
}

# A job is [queue, id, payload, tries_left, ttl_left_s, attempt, elapsed_ms].
sub check_job {
  my ($job, $queue, $id, $payload, $tries_left) = @_;
  check(ref $job eq 'ARRAY' && @$job == 7, 'a job is an array of 7');
  check_equal($queue, $job->[0], 'queue');
  check_equal($id, $job->[1], 'id');
  check($job->[2] eq $payload, 'payload');
  check_equal($tries_left, $job->[3], 'tries_left');
  check($job->[4] > 86390 && $job->[4] <= 86400, "ttl_left_s $job->[4]");
  check_equal(1, $job->[5], 'attempt');
}

sub qstat {
  my ($r, $q) = @_;
  my %s = @{ scalar $r->qstat($q) };
  return \%s;
}

my @tests = (
  ['the default handshake: PING, INFO server' => sub {
    my $r = connect_deferq();
    check_equal('PONG', $r->ping, 'PING');
    check(defined $r->info('server')->{deferq_version}, 'INFO server has deferq_version');
  }],
  ['publish, consume, ack' => sub {
    my $r = connect_deferq();
    my $q = queue_name('basic');
    my $id = $r->publish($q, 'hello perl', 'TRIES', 3);
    check($id =~ $id_re, "id $id");
    check_job(scalar $r->consume($q, 'TTR', 30), $q, $id, 'hello perl', 2);
    check(!defined scalar $r->consume($q), 'CONSUME of an empty queue is undef');
    check_equal(1, $r->ack($q, $id), 'ACK');
    check_equal(0, $r->ack($q, $id), 'a second ACK');
    my $s = qstat($r, $q);
    check_equal('0 1 1', "$s->{ready} $s->{consumed_total} $s->{acked_total}", 'QSTAT');
  }],
  ['a blocking CONSUME gets a delayed job when due' => sub {
    my $r = connect_deferq();
    my $q = queue_name('delay');
    my $t0 = time;
    check_equal('order-1', $r->publish($q, 'later', 'PDELAY', 300, 'ID', 'order-1'), 'PUBLISH ID');
    my $job = $r->consume($q, 'TTR', 30, 'TIMEOUT', 5);
    my $took = time - $t0;
    check_job($job, $q, 'order-1', 'later', 0);
    check($took >= 0.25 && $took < 3, "delivered after $took s, due after 0.3 s");
    check_equal(1, $r->ack($q, 'order-1'), 'ACK');
  }],
  ['MULTI/EXEC of 3 publishes returns 3 ids' => sub {
    my $r = connect_deferq();
    my $q = queue_name('multi');
    $r->multi;
    check_equal('QUEUED', $r->publish($q, "m$_"), 'QUEUED') for 1 .. 3;
    my @ids = $r->exec;
    check(@ids == 3 && !grep({ $_ !~ $id_re } @ids), "EXEC: @ids");
    check_equal(3, qstat($r, $q)->{ready}, 'ready');
  }],
  ['a pipeline: callbacks, then wait_all_responses' => sub {
    my $r = connect_deferq();
    my $q = queue_name('pipe');
    my @ids;
    $r->publish($q, "p$_", sub { push @ids, $_[0] }) for 1 .. 5;
    $r->wait_all_responses;
    check(@ids == 5 && !grep({ $_ !~ $id_re } @ids), "ids: @ids");
    my $jobs = $r->consume($q, 'COUNT', 10);
    check_equal(join(' ', @ids), join(' ', map { $_->[1] } @$jobs), 'ids in order');
  }],
  ['a binary payload (every byte value) round-trips' => sub {
    my $r = connect_deferq();
    my $q = queue_name('binary');
    my $id = $r->publish($q, $all_bytes);
    my $job = $r->consume($q);
    check(length $job->[2] == 256 && $job->[2] eq $all_bytes, 'the payload came back intact');
    check_equal(1, $r->ack($q, $id), 'ACK');
  }],
  ['DEADLETTER SIZE through an underscore method; INFO queues' => sub {
    my $r = connect_deferq();
    my $q = queue_name('dead');
    my $id = $r->publish($q, 'x');
    $r->consume($q);
    check_equal(1, $r->nack($q, $id), 'NACK of the last try');
    check_equal(1, $r->deadletter_size($q), 'DEADLETTER SIZE');
    check(ref $r->info('queues') eq 'HASH', 'INFO queues parsed');
  }],
  ['an error reply dies with its text' => sub {
    my $r = connect_deferq();
    eval { $r->publish(queue_name('err'), 'x', 'TTL', 1, 'TTL', 2); 1 } and die "no error\n";
    check($@ =~ /ERR syntax error/, "error: $@");
    check_equal('PONG', $r->ping, 'the connection still works');
  }],
);

my ($passed, $failed) = (0, 0);
for my $t (@tests) {
  my ($name, $body) = @$t;
  if (eval { $body->(); 1 }) {
    $passed++;
    print "ok   - $name\n";
  } else {
    $failed++;
    print "FAIL - $name: $@";
  }
}
print "$passed passed, $failed failed\n";
exit($failed ? 1 : 0);
