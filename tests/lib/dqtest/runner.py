"""Runs a suite with unittest and ends with the line "N passed, M failed" that scripts/test and
tests/clients/run_clients.sh read; the exit code is non-zero when a test failed or none ran."""

import os
import shutil
import sys
import time
import unittest


class CountingResult(unittest.TextTestResult):
    """Counts tests, not reports (a test can fail in its body and again in tearDown), and prints
    each test's duration in verbose mode."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.failed_ids = set()
        self.started = {}

    def startTest(self, test):
        self.started[test.id()] = time.time()
        super().startTest(test)

    def stopTest(self, test):
        super().stopTest(test)
        t = self.started.get(test.id())
        if t is not None and self.showAll:
            self.stream.writeln("    (%.2f s)" % (time.time() - t))

    def addFailure(self, test, err):
        self.failed_ids.add(test.id())
        super().addFailure(test, err)

    def addError(self, test, err):
        self.failed_ids.add(test.id())
        super().addError(test, err)

    def addUnexpectedSuccess(self, test):
        self.failed_ids.add(test.id())
        super().addUnexpectedSuccess(test)

    def addSubTest(self, test, subtest, err):
        if err is not None:
            self.failed_ids.add(test.id())
        super().addSubTest(test, subtest, err)


def text_runner(verbosity=2):
    return unittest.TextTestRunner(stream=sys.stdout, verbosity=verbosity,
                                   resultclass=CountingResult)


def report(result):
    """Prints "N passed, M failed"; returns the exit code."""
    ran = result.testsRun
    failed = len(result.failed_ids)
    print("%d passed, %d failed" % (ran - failed - len(result.skipped), failed))
    sys.stdout.flush()
    return 1 if failed or ran == 0 else 0


def run_suite(suite, verbosity=2):
    return report(text_runner(verbosity).run(suite))


def main(module, argv, verbosity=2):
    """unittest.main over `module` (a name or module object) with unittest's own options in argv
    (argv[0] is the program name; e.g. -k PATTERN, -f); returns the exit code."""
    prog = unittest.main(module=module, argv=argv, testRunner=text_runner(verbosity), exit=False)
    return report(prog.result)


def binary_arg(argv, usage):
    """argv[1] as an absolute path to an executable, removed from argv; None (after printing
    usage) when it is missing or not executable."""
    if len(argv) < 2 or not os.access(argv[1], os.X_OK):
        sys.stderr.write("usage: %s\n" % usage)
        return None
    return os.path.abspath(argv.pop(1))


def main_with_deferq(module, argv, usage):
    """The main() of a suite that drives a deferq binary (argv[1]) against redis-server: sets the
    module's DEFERQ to that binary, then runs main(); 2 when either is missing."""
    binary = binary_arg(argv, usage)
    if binary is None:
        return 2
    if shutil.which("redis-server") is None:
        print("redis-server not found", file=sys.stderr)
        return 2
    sys.modules[module].DEFERQ = binary
    return main(module, argv)
