"""pytest plugin (``-p tests.helpers.parallel``, loaded before the command line is read): the whole
suite, ``python -m pytest`` with no file or folder named, runs on pytest-xdist's workers, one per
core up to four (``pytest_xdist_auto_num_workers`` in tests/conftest.py), each test file on one
worker (its module fixtures built once) and every test that launches ranks on the same worker
(``mlx.launch`` listens on fixed ports). ``--no-loadscope-reorder`` keeps the order of the groups that
tests/conftest.py sets, longest first (pytest-xdist 3.8 otherwise starts the groups of most tests
first, which left the longest single tests to the end of the run). Naming files, ``-n``, ``-p no:xdist``, ``--pdb`` or ``-s``
keeps the run in this process; without pytest-xdist installed nothing changes."""

from __future__ import annotations

import importlib.util

# Options after which the run stays in one process: the user asked for it, or a debugger, the terminal
# or a snapshot update must be this process's.
SERIAL = ("-n", "--numprocesses", "--pdb", "--trace", "-s", "--capture=no", "--collect-only", "--co",
          "--snapshot-update")


XDIST = ("-n", "auto", "--dist", "loadgroup", "--no-loadscope-reorder")


def pytest_load_initial_conftests(early_config, parser, args):  # type: ignore[no-untyped-def]
    if importlib.util.find_spec("xdist") is None:
        return
    for before, arg in zip(["", *args], args):
        if arg in SERIAL or arg.split("=")[0] in SERIAL or arg.startswith("-n") and arg[2:].isdigit():
            return
        if "no:xdist" in arg:
            return
        if before != "-p" and not arg.startswith("-") and ("/" in arg or arg.endswith(".py") or "::" in arg
                                                           or arg == "tests"):
            return  # files or folders named: a developer's run of a few tests
    args[:0] = list(XDIST)
