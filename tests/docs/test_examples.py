"""Every redis-cli session shown in the docs is run, and its output compared with the page.

A session is a fenced block whose lines start with redis-cli's prompt, `127.0.0.1:6380> ` (or
`127.0.0.1:6380(TX)> ` inside MULTI): each prompt line is typed into a real, interactive
redis-cli (on a pseudo-terminal, so its output is redis-cli's own formatting, as a user sees it),
against a real deferq and redis-server, and what redis-cli prints must be the lines the page shows
under it. Each block starts from nothing, as a reader's first session would: empty Redis servers
(pool `default`, and pool `eu` that the admin examples name) and a deferq started for it (the
admin password `s3cret`). A comment line right before the block's fence may add:

    <!-- example setup="PUBLISH emails hello; CONSUME emails" -->

`setup="CMD; CMD"` runs commands first on the block's connection (their output is not compared);
`skip="why"` leaves the block out (the reason is printed).

What differs from run to run is matched, not compared: a generated job id (26 characters of
Crockford base32) or a hex token in the page stands for the value this run produced at the same
place, consistently (a later command that uses the page's id is sent with this run's); integers of
12 digits and more (millisecond times), a job's `elapsed_ms` (the 7th field of a job array), its
`ttl_left_s` (up to 2 s less than shown), a connection's `id`, and lateness figures of
`INFO queues` are any value. A read that does not match yet (a lease that must expire first) is
read again for up to 5 s.

usage: test_examples.py DEFERQ_BINARY PAGE.md...
       DOCS_EXAMPLES_WRITE=1 test_examples.py ...   writes what this run printed into the pages
                                                   (for a new or changed session; read the diff)
"""

import os
import pty
import re
import select
import shlex
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from dqtest import procs, runner  # noqa: E402

DEFERQ = None
PAGES = []
ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

PROMPT = re.compile(r"^127\.0\.0\.1:6380(\(TX\))?> (.*)$")
LIVE_PROMPT = re.compile(r"127\.0\.0\.1:(\d+)(\(TX\))?> $")
OPTIONS = re.compile(r"^<!-- example(.*)-->\s*$")
TOKEN = re.compile(r"\b([0-9A-HJKMNP-TV-Z]{26}|[0-9a-f]{16,})\b")
BIG_INT = re.compile(r"\(integer\) -?\d{12,}")
READS = ("JOB", "PEEK", "BROWSE", "QSTAT", "QUEUES", "DEADLETTER SIZE", "DEADLETTER PEEK",
         "INFO")
ADMIN_ENV = "DEFERQ_DOCS_ADMIN_PASSWORD"


class Block:
    def __init__(self, page, line, end, options, steps):
        self.page = page
        self.line = line  # the opening fence, 1-based
        self.end = end  # the closing fence, 1-based
        self.options = options
        self.steps = steps  # [(command, [expected lines], "(TX)" or "")]
        self.printed = []  # what this run printed for each step
        self.sent = []  # each step's command as sent (this run's ids)
        self.mismatched = False

    def name(self):
        return "%s:%d" % (os.path.relpath(self.page, ROOT), self.line)


def parse_options(text):
    options = {}
    for word in shlex.split(text):
        key, _, value = word.partition("=")
        options[key] = value
    return options


def sessions(page):
    """The redis-cli sessions of a markdown page."""
    lines = open(page).read().split("\n")
    blocks = []
    i = 0
    while i < len(lines):
        if not lines[i].startswith("```"):
            i += 1
            continue
        start = i
        body = []
        i += 1
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        i += 1
        if not body or not PROMPT.match(body[0]):
            continue
        options = {}
        j = start - 1
        if j >= 0 and OPTIONS.match(lines[j]):
            options = parse_options(OPTIONS.match(lines[j]).group(1))
        steps = []
        for line in body:
            m = PROMPT.match(line)
            if m:
                steps.append((m.group(2), [], m.group(1) or ""))
            else:
                steps[-1][1].append(line)
        blocks.append(Block(page, start + 1, i, options, steps))
    return blocks


class Cli:
    """An interactive redis-cli on a pseudo-terminal (TERM=dumb: no hints, no colours)."""

    def __init__(self, port):
        self.master, slave = pty.openpty()
        env = dict(os.environ, TERM="dumb")
        env.pop("REDISCLI_AUTH", None)
        self.proc = subprocess.Popen(["redis-cli", "-p", str(port)], stdin=slave, stdout=slave,
                                     stderr=slave, env=env, close_fds=True)
        os.close(slave)
        self.read_until_prompt()

    def read_until_prompt(self, bound=15.0):
        out = b""
        deadline = time.time() + bound
        while time.time() < deadline:
            ready, _, _ = select.select([self.master], [], [], 0.1)
            if ready:
                try:
                    chunk = os.read(self.master, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                out += chunk
                text = out.decode("utf-8", "replace")
                if LIVE_PROMPT.search(text):
                    return LIVE_PROMPT.sub("", text)
        raise AssertionError("redis-cli printed no prompt within %.0f s; got %r" % (bound, out))

    def run(self, command):
        os.write(self.master, command.encode() + b"\n")
        text = self.read_until_prompt().replace("\r", "")
        lines = text.split("\n")
        # The terminal echoes the typed line first.
        if lines and lines[0].strip() == command.strip():
            lines = lines[1:]
        while lines and lines[-1] == "":
            lines.pop()
        return lines

    def close(self):
        try:
            os.write(self.master, b"quit\n")
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self.master)


class Ids:
    """The page's ids and tokens mapped to this run's, one to one."""

    def __init__(self):
        self.to_run = {}

    def send(self, command):
        return TOKEN.sub(lambda m: self.to_run.get(m.group(1), m.group(1)), command)

    def match(self, expected, actual, commit):
        """Whether the line of the page matches this run's, mapping new ids; `commit` keeps the
        new pairs."""
        exp = TOKEN.split(expected)
        act = TOKEN.split(actual)
        if len(exp) != len(act):
            return False
        new = {}
        for k, (e, a) in enumerate(zip(exp, act)):
            if k % 2 == 0:
                if e != a:
                    return False
                continue
            known = self.to_run.get(e, new.get(e))
            if known is None:
                if a in self.to_run.values() or a in new.values():
                    return False
                new[e] = a
            elif known != a:
                return False
        if commit:
            self.to_run.update(new)
        return True


JOB_FIELD = re.compile(r"^(\s*(?:\d+\) )*)(\d+)\) \(integer\) (-?\d+)$")


def job_field(lines, i):
    """The field number (5 or 7) when line i is a job array's ttl_left_s or elapsed_ms."""
    m = JOB_FIELD.match(lines[i])
    if not m or m.group(2) not in ("5", "7"):
        return None
    back = int(m.group(2)) - 2  # the id is field 2
    if i - back < 0 or not re.search(r"\b2\) \"", lines[i - back]):
        return None
    return m.group(2)


def normalize(line):
    line = BIG_INT.sub("(integer) <ms>", line)
    line = re.sub(r'("id" => \(integer\) )\d+', r"\1<id>", line)
    line = re.sub(r"(lateness_(?:count|p50_ms|p90_ms|p99_ms|max_ms)=)\d+", r"\1<n>", line)
    return line


UNORDERED = ("QUEUES",)  # replies in no particular order (a Redis set's)


def unordered(lines):
    return sorted(re.sub(r"^\s*\d+\) ", "", line) for line in lines)


def lines_match(ids, expected, actual, commit, command=""):
    if len(expected) != len(actual):
        return False
    if command.split()[:1] and command.split()[0].upper() in UNORDERED:
        expected, actual = unordered(expected), unordered(actual)
    pairs = []
    for i, (e, a) in enumerate(zip(expected, actual)):
        field = job_field(expected, i)
        if field is not None and job_field(actual, i) == field:
            ev = int(JOB_FIELD.match(e).group(3))
            av = int(JOB_FIELD.match(a).group(3))
            if field == "5" and not (ev - 2 <= av <= ev or ev == av):
                return False
            continue
        pairs.append((normalize(e), normalize(a)))
    for e, a in pairs:
        if not ids.match(e, a, commit=False):
            return False
    # All lines match: keep the new id pairs (in order, so a block's first id maps first).
    for e, a in pairs:
        ids.match(e, a, commit=True)
    return True


class Env:
    tmpdir = None
    redis = None
    redis_eu = None


def setUpModule():
    Env.tmpdir = procs.make_tmpdir("examples")
    Env.redis = procs.Redis(Env.tmpdir, name="redis-default").start()
    Env.redis_eu = procs.Redis(Env.tmpdir, name="redis-eu").start()
    os.environ[ADMIN_ENV] = "s3cret"


def tearDownModule():
    for server in (Env.redis, Env.redis_eu):
        if server is not None:
            server.stop()
    procs.remove_tmpdir(Env.tmpdir)


def is_read(command):
    words = command.upper().split()
    return any(words[:len(r.split())] == r.split() for r in READS)


def write_pages(blocks):
    """Replaces each session that did not match by what this run printed (the page's prompts
    kept)."""
    for page in sorted({b.page for b in blocks}):
        lines = open(page).read().split("\n")
        for block in sorted((b for b in blocks if b.page == page and b.mismatched),
                            key=lambda b: -b.line):
            body = []
            for (_, _, tx), sent, printed in zip(block.steps, block.sent, block.printed):
                body.append("127.0.0.1:6380%s> %s" % (tx, sent))
                body.extend(printed)
            lines[block.line:block.end - 1] = body
        with open(page, "w") as f:
            f.write("\n".join(lines))


class Examples(unittest.TestCase):
    def test_every_session_of_the_pages_runs_as_shown(self):
        blocks = [b for page in PAGES for b in sessions(page)]
        self.assertGreater(len(blocks), 10, "too few sessions found in %s" % PAGES)
        ran = 0
        for n, block in enumerate(blocks):
            with self.subTest(block=block.name()):
                if "skip" in block.options:
                    print("skipped %s: %s" % (block.name(), block.options["skip"]))
                    continue
                self.run_block(n, block)
                ran += 1
        print("%d sessions run, %d skipped" % (ran, len(blocks) - ran))
        if os.environ.get("DOCS_EXAMPLES_WRITE"):
            write_pages(blocks)

    def run_block(self, n, block):
        for redis in (Env.redis, Env.redis_eu):
            subprocess.run(["redis-cli", "-p", str(redis.port), "FLUSHALL"], check=True,
                           stdout=subprocess.DEVNULL)
        config = ('[auth]\nadmin_password_env = "%s"\n[pools.eu]\naddr = "redis://127.0.0.1:%d"\n'
                  % (ADMIN_ENV, Env.redis_eu.port))
        deferq = procs.Deferq(DEFERQ, Env.tmpdir, Env.redis.port, config_text=config,
                              name="deferq-example%d" % n).start()
        cli = Cli(deferq.port)
        try:
            for command in filter(None, (c.strip() for c in block.options.get("setup", "").split(";"))):
                cli.run(command)
            ids = Ids()
            for command, expected, _ in block.steps:
                sent = ids.send(command)
                actual = cli.run(sent)
                deadline = time.time() + 5
                while (not lines_match(ids, expected, actual, True, sent)
                       and is_read(sent) and time.time() < deadline):
                    time.sleep(0.2)
                    actual = cli.run(sent)
                block.printed.append(actual)
                block.sent.append(sent)
                if not lines_match(ids, expected, actual, True, sent):
                    if os.environ.get("DOCS_EXAMPLES_WRITE"):
                        block.mismatched = True
                        continue
                    self.fail("%s: `%s` printed\n%s\nbut the page shows\n%s"
                              % (block.name(), command, "\n".join(actual), "\n".join(expected)))
        finally:
            cli.close()
            deferq.stop()


if __name__ == "__main__":
    DEFERQ = os.path.abspath(sys.argv[1])
    PAGES = [os.path.join(ROOT, p) for p in sys.argv[2:]]
    result = runner.text_runner().run(unittest.defaultTestLoader.loadTestsFromTestCase(Examples))
    sys.exit(runner.report(result))
