#!/usr/bin/env python3
"""One binary's command-line conventions (docs/CLI.md, common/flags.h).

  cli_test.py BINARY VERSION KNOWN_FLAG BAD_ARG...

--help exits 0 and lists KNOWN_FLAG; --version exits 0 and prints
"<name> VERSION"; an unknown flag exits 2 naming it on stderr; BAD_ARG...
(an existing flag with a bad value) exits 2 naming that flag; nothing on
the command line is run (each call must end within seconds).

  cli_test.py --python-version PYTHON_INIT VERSION

checks that the Python client's __version__ is the project's version.
"""
import os
import re
import subprocess
import sys

failures = []


def check(what, ok, detail=""):
    print(("ok: " if ok else "FAIL: ") + what + ("" if ok else "\n  " + detail))
    if not ok:
        failures.append(what)


def run(binary, args):
    return subprocess.run([binary] + args, capture_output=True, text=True,
                          timeout=30, stdin=subprocess.DEVNULL)


def flag_name(arg):
    return arg.split("=", 1)[0]


def main(argv):
    if argv[1] == "--python-version":
        text = open(argv[2]).read()
        m = re.search(r'^__version__ = "([^"]+)"', text, re.M)
        check("python __version__ is the project's", m is not None and m.group(1) == argv[3],
              "found %r, want %r" % (m and m.group(1), argv[3]))
        return
    binary, version, known, bad = argv[1], argv[2], argv[3], argv[4:]
    name = os.path.basename(binary)

    for spelling in ("--help", "-h"):
        r = run(binary, [spelling])
        check("%s %s exits 0" % (name, spelling), r.returncode == 0,
              "exit %d, stderr %r" % (r.returncode, r.stderr))
        check("%s %s lists %s" % (name, spelling, known), known in r.stdout, r.stdout)
        check("%s %s writes nothing on stderr" % (name, spelling), r.stderr == "", r.stderr)

    r = run(binary, ["--version"])
    check("%s --version exits 0" % name, r.returncode == 0, "exit %d" % r.returncode)
    check("%s --version prints '%s %s'" % (name, name, version),
          r.stdout == "%s %s\n" % (name, version), repr(r.stdout))

    r = run(binary, ["--no-such-flag"])
    check("%s --no-such-flag exits 2" % name, r.returncode == 2,
          "exit %d, stderr %r" % (r.returncode, r.stderr))
    check("%s --no-such-flag is named on stderr" % name,
          "unknown flag --no-such-flag" in r.stderr, repr(r.stderr))
    check("%s --no-such-flag prints nothing on stdout" % name, r.stdout == "", repr(r.stdout))

    r = run(binary, bad)
    flag = next(flag_name(a) for a in bad if a.startswith("--"))
    check("%s %s exits 2" % (name, " ".join(bad)), r.returncode == 2,
          "exit %d, stderr %r" % (r.returncode, r.stderr))
    check("%s %s names %s" % (name, " ".join(bad), flag), flag in r.stderr, repr(r.stderr))

    # --help wins over a bad flag elsewhere on the line.
    r = run(binary, ["--no-such-flag", "--help"])
    check("%s --no-such-flag --help exits 0" % name, r.returncode == 0,
          "exit %d, stderr %r" % (r.returncode, r.stderr))


if __name__ == "__main__":
    main(sys.argv)
    if failures:
        print("%d failed" % len(failures))
        sys.exit(1)
