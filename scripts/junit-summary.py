#!/usr/bin/env python3
"""What cargo-nextest's JUnit reports say, in the lines that end a test run.

Usage: scripts/junit-summary.py [--slowest N] [--failed] [--counts] REPORT...

--slowest N   the N slowest tests, slowest first, with their seconds
--failed      the tests that failed (or did not run to an end)
--counts      one line: "PASSED FAILED" summed over the reports

scripts/test.sh calls it on target/nextest/*/junit.xml, which the
profiles in .config/nextest.toml write. A report that is missing (a build
that failed before any test ran) counts nothing.
"""

import argparse
import sys
import xml.etree.ElementTree as ET


def cases(paths):
    for path in paths:
        try:
            root = ET.parse(path).getroot()
        except (OSError, ET.ParseError):
            continue
        for suite in root.iter("testsuite"):
            for case in suite.iter("testcase"):
                yield path, suite.get("name", "?"), case


def failed(case):
    return case.find("failure") is not None or case.find("error") is not None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slowest", type=int, default=0)
    parser.add_argument("--failed", action="store_true")
    parser.add_argument("--counts", action="store_true")
    parser.add_argument("reports", nargs="+")
    args = parser.parse_args()
    every = list(cases(args.reports))
    if args.counts:
        bad = sum(1 for _, _, c in every if failed(c))
        print(len(every) - bad, bad)
    if args.slowest:
        timed = sorted(every, key=lambda x: -float(x[2].get("time", 0)))
        for path, suite, case in timed[: args.slowest]:
            run = " (TLS)" if "/tls/" in path else ""
            print(f"  {float(case.get('time', 0)):8.1f} s  {suite} {case.get('name')}{run}")
    if args.failed:
        for path, suite, case in every:
            if failed(case):
                run = " (TLS)" if "/tls/" in path else ""
                print(f"  {suite} {case.get('name')}{run}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
