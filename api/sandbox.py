"""``grpo_tui.sandbox``: run model-written code, or one tool call, in a child process with limits.

A reward that runs the model's code (unit tests, a program's output) or a tool that is a Python
interpreter runs it here instead of inside the worker::

    from grpo_tui.sandbox import run_python

    def passes(completions, tests, **kwargs):
        return [float(run_python(code + "\\n" + test).ok) for code, test in zip(completions, tests)]

and ``sandbox = true`` on a ``[[tools]]`` table runs each of that tool's calls through ``call``.

Each call is a fresh ``python`` process in a session of its own, in a fresh temporary folder (its
working folder, ``HOME`` and ``TMPDIR``; removed afterwards), with: a wall-clock limit (at
``timeout_s`` the whole process tree is killed: on Linux a keeper process, a child subreaper, inherits
every process the call leaves behind, one that moved to a session of its own with ``setsid``
included, and kills them all when the call ends or its time is up), a CPU-time limit, an address-space limit (``memory_mb``), a
file-size limit (``file_size_mb``), no core files, and at most ``max_processes`` processes. On
Linux it also gets no network (a network namespace of its own, when the kernel lets this process
make one), and when the worker runs as root the call runs as ``nobody`` (so the process limit holds
and root's files, ``~/.ssh`` among them, cannot be read). A call never raises for what the code
does: ``Result.error`` says it in words the model can read ("timed out after 10 s", "ran out of
memory (memory_mb = 1024)").

What it does NOT protect against (docs/agents.md, "Sandboxed tools"): it is not a security
boundary against a determined attacker. Without root the call runs as the worker's own user and
can read what that user can read by absolute path; there is no mount namespace, so it can write
wherever that user (or ``nobody``) may, ``/tmp`` included; the process limit counts that user's
processes; on macOS there is no network or user containment at all (only the rlimits, and macOS
does not enforce the address-space limit); kernel exploits, CPU cache side channels and a call
that fills the disk through many files below the size limit are not contained.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

OUTPUT_CHARS = 20_000  # of stdout and stderr kept in a Result
# Standard modules imported before the child gives up root (see _CHILD), besides those the code names
PRELOAD = ("array", "base64", "encodings.idna", "bisect", "collections", "copy", "dataclasses", "datetime", "decimal", "fractions",
           "functools", "hashlib", "heapq", "io", "itertools", "json", "math", "operator", "random", "re", "shutil",
           "socket", "statistics", "string", "subprocess", "textwrap", "time", "traceback", "typing", "unittest")
NOBODY = 65534


@dataclass(frozen=True)
class Limits:
    timeout_s: float = 10.0  # wall clock, for the whole call
    cpu_s: float | None = None  # CPU time (default: timeout_s)
    memory_mb: int = 1024  # address space of each process
    file_size_mb: int = 16  # the largest file it may write
    max_processes: int = 16  # processes it may have at once, itself included
    network: bool = False  # True keeps the network


@dataclass(frozen=True)
class Result:
    ok: bool  # it ran to its end without an error, within its limits
    returncode: int | None
    stdout: str
    stderr: str
    error: str | None  # what went wrong, as a sentence the model can read
    value: Any = None  # ``call``: what the function returned
    contained: tuple[str, ...] = field(default_factory=tuple)  # "network", "user": what this platform allowed
    seconds: float = 0.0


# The child: a request line on stdin, then containment, then the code. Standard library only, so it
# starts fast and needs nothing of grpo-tui.
_CHILD = r'''
import json, os, sys, resource, signal, time
req = json.loads(sys.stdin.readline())
fd = req["fd"]
# This first process is the keeper of the call's process tree: the code runs in a child, and every
# process it starts that outlives its parent (a daemon that forked and called setsid included) is
# handed to the keeper (a child subreaper) instead of init; when the code ends, or the caller's
# wall clock sends SIGTERM, the keeper kills them all, so no process of the call outlives it.
if sys.platform.startswith("linux"):
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
def sweep(group):
    me, quiet = str(os.getpid()), 0
    try:  # the code's own session (its group): where no subreaper exists (macOS), what it started in it
        os.killpg(group, signal.SIGKILL)
    except OSError:
        pass
    for _ in range(400):
        found = []
        for p in os.listdir("/proc") if os.path.isdir("/proc") else ():
            try:
                if p.isdigit() and open("/proc/" + p + "/stat").read().rsplit(")", 1)[1].split()[1] == me:
                    found.append(int(p))
            except (OSError, IndexError):
                pass
        for p in found:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            pass
        quiet = 0 if found else quiet + 1
        if quiet >= 3:
            return
        time.sleep(0.005)
child = os.fork()
if child:
    sys.stdin.close()
    os.close(fd)
    def stop(signum, frame):
        try:
            os.kill(child, signal.SIGKILL)  # not reaped yet: still the code's pid
        except OSError:
            pass
        sweep(child)
        os._exit(124)
    signal.signal(signal.SIGTERM, stop)
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except ChildProcessError:
            status = 0
            break
    sweep(child)
    if os.WIFSIGNALED(status):  # ended as the code ended: the same signal
        if os.WTERMSIG(status) != signal.SIGKILL:
            signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
        os.kill(os.getpid(), os.WTERMSIG(status))
    os._exit(os.waitstatus_to_exitcode(status))
os.setsid()  # the code's own session: the keeper's SIGTERM is not sent to it
def say(obj):
    os.write(fd, (json.dumps(obj) + "\n").encode())
fn = None
if req.get("spec"):  # the user's tool, imported before the limits (its own file, not model code)
    target, name = req["spec"].rsplit(":", 1)
    if target.endswith(".py"):
        import importlib.util
        sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
        spec = importlib.util.spec_from_file_location("sandboxed_tool", target)
        module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)
    elif target.endswith(".pkl"):
        import types, cloudpickle
        module = types.SimpleNamespace(**cloudpickle.load(open(target, "rb")))
    else:
        import importlib; module = importlib.import_module(target)
    fn = getattr(module, name)
# Imported now, before the user changes: as nobody, an interpreter installed in a private home
# folder could not read the standard library any more. What the code itself imports comes too.
import ast
wanted = set(req["preload"])
try:
    source = req.get("code") or (open(target).read() if req.get("spec", "").split(":")[0].endswith(".py") else "")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            wanted.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            wanted.add(node.module)
except (SyntaxError, ValueError, OSError):
    pass
for module_name in sorted(wanted) if os.geteuid() == 0 else ():
    try:
        __import__(module_name)
    except BaseException:
        pass
applied = []
if not req["network"] and sys.platform.startswith("linux"):
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(0x40000000) == 0:  # CLONE_NEWNET: only a loopback that is down
        applied.append("network")
mb = 1 << 20
def limit(kind, value, hard=None):
    try:
        resource.setrlimit(kind, (value, value if hard is None else hard))
    except (ValueError, OSError):
        pass
limit(resource.RLIMIT_CORE, 0)
cpu = max(1, int(req["cpu_s"] + 0.999))
limit(resource.RLIMIT_CPU, cpu, cpu + 1)  # SIGXCPU at the soft limit (SIGKILL a second later)
limit(resource.RLIMIT_FSIZE, req["file_size_mb"] * mb)
if sys.platform.startswith("linux"):
    limit(resource.RLIMIT_AS, req["memory_mb"] * mb)
uid = os.geteuid()
if uid == 0:
    os.setgroups([]); os.setgid(65534); os.setuid(65534); uid = 65534; applied.append("user")
if sys.platform.startswith("linux"):
    mine = 0
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                mine += os.stat("/proc/" + p).st_uid == uid
            except OSError:
                pass
    limit(resource.RLIMIT_NPROC, mine + req["max_processes"])
say({"applied": applied})
if fn is not None:
    sys.stdout = sys.stderr
    value = fn(**req["arguments"])
    try:
        say({"value": value})
    except (TypeError, ValueError):
        say({"value": str(value)})
else:
    sys.argv = ["<sandbox>"]
    exec(compile(req["code"], "<sandbox>", "exec"), {"__name__": "__main__"})
'''


def run_python(code: str, *, stdin: str = "", limits: Limits | None = None) -> Result:
    """Run ``code`` as a Python program in a sandboxed child (``Limits``); its output and what went wrong."""
    return _run({"code": code}, stdin, limits or Limits())


def call(spec: str, arguments: dict[str, Any], limits: Limits | None = None) -> Result:
    """Call the function ``spec`` (``file.py:func``, ``module:func`` or a Python API ``.pkl``) with
    ``arguments`` in a sandboxed child; ``Result.value`` is what it returned (JSON, else its ``str``)."""
    return _run({"spec": spec, "arguments": arguments}, "", limits or Limits())


def _run(request: dict[str, Any], stdin: str, limits: Limits) -> Result:
    began = time.monotonic()
    cpu_s = limits.cpu_s if limits.cpu_s is not None else limits.timeout_s
    folder = Path(tempfile.mkdtemp(prefix="grpo-tui-sandbox-"))
    read_fd, write_fd = os.pipe()
    try:
        if os.geteuid() == 0:
            os.chown(folder, NOBODY, NOBODY)
        out, err = open(folder / ".stdout", "w+b"), open(folder / ".stderr", "w+b")  # bounded by file_size_mb
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(folder), "TMPDIR": str(folder),
               "LANG": os.environ.get("LANG", "C.UTF-8"), "PYTHONDONTWRITEBYTECODE": "1"}
        request = {**request, "fd": write_fd, "network": limits.network, "cpu_s": cpu_s, "memory_mb": limits.memory_mb,
                   "file_size_mb": limits.file_size_mb, "max_processes": limits.max_processes, "preload": PRELOAD}
        proc = subprocess.Popen([sys.executable, "-c", _CHILD], stdin=subprocess.PIPE, stdout=out, stderr=err,
                                cwd=folder, env=env, pass_fds=(write_fd,), start_new_session=True)
        os.close(write_fd)
        write_fd = -1
        timed_out = _feed_and_wait(proc, json.dumps(request) + "\n" + stdin, limits.timeout_s)
        said = _read_all(read_fd)
        code = proc.returncode
        stdout, stderr = _text(out), _text(err)
        out.close()
        err.close()
    finally:
        os.close(read_fd)
        if write_fd >= 0:
            os.close(write_fd)
        shutil.rmtree(folder, ignore_errors=True)
    lines = [json.loads(line) for line in said.splitlines() if line.strip()]
    contained = tuple(next((x["applied"] for x in lines if "applied" in x), []))
    value = next((x["value"] for x in lines if "value" in x), None)
    error = _error(code, timed_out, stderr, limits, cpu_s)
    return Result(error is None, code, stdout, stderr, error, value, contained, time.monotonic() - began)


def _feed_and_wait(proc: subprocess.Popen[bytes], data: str, timeout_s: float) -> bool:
    """Send ``data`` to the child's stdin and wait; True when the wall clock ran out (then the whole
    session is killed: the child and whatever it started)."""
    assert proc.stdin is not None
    try:
        proc.stdin.write(data.encode("utf-8", errors="replace"))
        proc.stdin.close()
    except OSError:  # it ended before reading it all
        pass
    try:
        proc.wait(timeout_s)
        _kill_session(proc.pid)  # what it left running ends with it
        return False
    except subprocess.TimeoutExpired:
        proc.terminate()  # the keeper kills the whole tree, whatever session it moved to
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            pass
        _kill_session(proc.pid)
        proc.wait()
        return True


def _kill_session(pid: int) -> None:
    for _ in range(50):  # a fork bomb refills the group while it is being killed
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.01)


def _read_all(fd: int) -> str:
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
        if sum(map(len, chunks)) > 1 << 24:
            break
    return b"".join(chunks).decode("utf-8", errors="replace")


def _text(file: Any) -> str:
    file.seek(0)
    data = file.read(OUTPUT_CHARS * 4).decode("utf-8", errors="replace")
    return data if len(data) <= OUTPUT_CHARS else data[:OUTPUT_CHARS] + f"\n[cut: the first {OUTPUT_CHARS} characters]"


def _error(code: int | None, timed_out: bool, stderr: str, limits: Limits, cpu_s: float) -> str | None:
    """What went wrong, for the model to read; None when nothing did."""
    last = next((line for line in reversed(stderr.splitlines()) if line.strip()), "")
    if timed_out:
        return f"timed out after {limits.timeout_s:g} s (wall clock); the call and everything it started were killed"
    if code == -signal.SIGXCPU or code == -signal.SIGKILL and "MemoryError" not in stderr:
        return f"used more than {cpu_s:g} s of CPU time and was stopped" if code == -signal.SIGXCPU else "was killed"
    if "MemoryError" in last or "Cannot allocate memory" in stderr:
        return f"ran out of memory (memory_mb = {limits.memory_mb}): {last}"
    if "File too large" in stderr:
        return f"wrote a file past the file size limit (file_size_mb = {limits.file_size_mb}): {last}"
    if code:
        return f"exited with code {code}: {last}" if code > 0 else f"was killed by signal {-code}: {last}"
    return None
