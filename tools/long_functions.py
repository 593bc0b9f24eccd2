#!/usr/bin/env python3
"""Lists the functions longer than a limit in C++ sources (the house rule: keep functions short).

    tools/long_functions.py [--limit N] [--fail-over M] [DIR_OR_FILE ...]   (default: src tools/qbc)

A function is a definition that starts at column 0 (after the namespace, which the house style
does not indent): a line that is not a preprocessor line, comment, namespace, type or using
declaration, whose signature ends with `{` within six lines, running to the next line that is
exactly `}`. Its length counts both. Member functions defined inside a class body are not seen
(they are indented); neither are lambdas. Prints `LINES FILE:LINE SIGNATURE`, longest first.
With --fail-over M the exit status is 1 when any function is longer than M lines.
Standard library only.
"""
import argparse
import os
import sys

SKIP = ("namespace", "}", "#", "//", "struct", "class", "enum", "template", "using",
        "static_assert", "extern", "inline constexpr", "constexpr")


def functions(path):
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    i = 0
    while i < len(lines):
        s = lines[i]
        if s and not s[0].isspace() and not s.startswith(SKIP) and not s.rstrip().endswith("}"):
            j = i
            while j < len(lines) and j < i + 6 and not lines[j].rstrip().endswith(("{", ";")):
                j += 1
            head = "".join(lines[i:j + 1])
            if (j < len(lines) and lines[j].rstrip().endswith("{") and "(" in head
                    and "=" not in lines[i].split("(")[0]):
                k = j + 1
                while k < len(lines) and lines[k] != "}":
                    k += 1
                yield k - i + 1, i + 1, s.strip()
                i = k
        i += 1


def sources(args):
    for a in args:
        if os.path.isfile(a):
            yield a
            continue
        for root, _, names in os.walk(a):
            for n in sorted(names):
                if n.endswith((".cpp", ".cc", ".h")):
                    yield os.path.join(root, n)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("paths", nargs="*", default=["src", "tools/qbc"])
    ap.add_argument("--limit", type=int, default=100, help="list functions longer than this")
    ap.add_argument("--fail-over", type=int, default=0, help="exit 1 if any is longer than this")
    a = ap.parse_args()
    found = []
    for path in sources(a.paths):
        for n, line, sig in functions(path):
            if n > a.limit:
                found.append((n, f"{path}:{line}", sig))
    for n, where, sig in sorted(found, key=lambda x: -x[0]):
        print(f"{n:5d} {where} {sig[:90]}")
    if a.fail_over and any(n > a.fail_over for n, _, _ in found):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
