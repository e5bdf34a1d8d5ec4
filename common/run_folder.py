"""A run folder is its owner's (docs/security.md, "The run folder"): the worker, ``run --detach``,
``check`` and ``fork`` refuse an output folder that another local user owns or may write to (a
shared, world-writable folder such as ``/tmp`` itself included), where that user could plant a link
named ``run.jsonl`` that makes the run append to one of the owner's files; and every file a run
writes is opened without following a link (``O_NOFOLLOW``) and, where it is new, created
exclusively (``O_EXCL``), so a link planted anyway is refused, never written through.

``GRPO_TUI_SHARED_OUTPUT=1`` allows a folder that others may write to (a team's shared folder); links
are refused all the same. Only the standard library.
"""

from __future__ import annotations

import grp
import os
import pwd
import stat
from pathlib import Path
from typing import BinaryIO

SHARED_ENV = "GRPO_TUI_SHARED_OUTPUT"


class LinkedFile(OSError):
    """A file a run writes is a link, or another user's: the message is the sentence to show."""


def _shared_allowed() -> bool:
    return os.environ.get(SHARED_ENV, "") == "1"


def _others_in_group(gid: int) -> bool:
    """Users besides this one may be in group ``gid`` (a user's private group has none)."""
    try:
        group = grp.getgrgid(gid)
        me = pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return True
    return gid != os.getgid() or any(name != me for name in group.gr_mem)


def ownership_problem(output_dir: str | Path, key: str = "checkpoint.output_dir") -> str | None:
    """Why another local user could write into ``output_dir`` (or into the folder it is to be
    created in), or None."""
    path = Path(output_dir).absolute()
    advice = f"choose a folder of your own (or, for a team's shared folder, set {SHARED_ENV}=1)"
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    try:
        info = existing.stat()
    except OSError:
        return None  # output_dir_problem says why it cannot be used
    if not stat.S_ISDIR(info.st_mode):
        return None
    uid = os.getuid()
    if existing == path:
        if info.st_uid != uid:
            try:
                owner = pwd.getpwuid(info.st_uid).pw_name
            except KeyError:
                owner = f"uid {info.st_uid}"
            return f"{key}: {path} belongs to another user ({owner}), who could plant links in it; {advice}"
        if _shared_allowed():
            return None
        mode = stat.S_IMODE(info.st_mode)
        if mode & stat.S_IWOTH or (mode & stat.S_IWGRP and _others_in_group(info.st_gid)):
            return (f"{key}: {path} can be written by other users (mode {mode:o}), who could plant links in it; "
                    f"{advice}, or make it yours alone: chmod go-w {path}")
        return None
    # to be created inside ``existing``: a world-writable folder without the sticky bit lets others
    # replace what we create there (a sticky one such as /tmp does not)
    mode = stat.S_IMODE(info.st_mode)
    if not _shared_allowed() and mode & stat.S_IWOTH and not mode & stat.S_ISVTX:
        return (f"{key}: {path} would be created in {existing}, which every user may write to (mode {mode:o}) "
                f"and replace what is in it; {advice}")
    return None


def link_sentence(path: Path) -> str:
    return (f"{path} is a link; a run never writes through a link, which another user could have planted: remove it "
            "and start again")


def _refuse_link(path: Path, exc: OSError) -> LinkedFile:
    return LinkedFile(exc.errno, link_sentence(path))


def open_append(path: Path, mode: int = 0o644) -> BinaryIO:
    """``path`` for appending, created if missing, never through a link and never another user's."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno == 40 or path.is_symlink():  # ELOOP: the last part is a link
            raise _refuse_link(path, exc) from None
        raise
    info = os.fstat(fd)
    if info.st_uid != os.getuid() or not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise LinkedFile(1, f"{path} is not a file of yours; a run only writes its own files: remove it and start again")
    return os.fdopen(fd, "ab", buffering=0)


def write_new(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Write ``path`` as a new file (a stale one, or a link in its place, is removed first, never followed)."""
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def refuse_link(path: Path) -> None:
    """Raise ``LinkedFile`` if ``path`` is a link (a file that a library, SQLite among them, opens itself)."""
    if path.is_symlink():
        raise _refuse_link(path, OSError(40, "link"))
