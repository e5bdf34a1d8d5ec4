"""``grpo-tui fork RUN_DIR [--from STEP|latest] [--set KEY=VALUE…] [--name NAME] [NEW_DIR]``: a new run
from a checkpoint of another (docs/steering.md, "Fork a run"). No Textual here.

The fork gets a folder of its own: the checkpoint's files (hard links where the file system allows,
copies elsewhere; its ``training_state.json`` written anew), a copy of the parent's store cut to the
parent's run, and a ``config.toml``: the parent's effective config at that step (its file, its
``--set`` items and its live changes) with the fork's ``--set`` items, its own output folder and
``[fork]`` naming the parent. Resuming that checkpoint continues the weights, the optimizer, the
reference, the RNG and the data position; the store's copy gives its charts the parent's steps up to
the branch point. The parent's folder is only read.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
from pathlib import Path
from typing import Any

from grpo_tui.common.live_settings import set_value
from grpo_tui.common.preflight import output_dir_problem
from grpo_tui.common.resume_check import damage, latest_whole, resumable
from grpo_tui.common.run_folder import ownership_problem
from grpo_tui.common.tomlout import dumps
from grpo_tui.protocol.config import Config, ConfigError, apply_override, parse_config
from grpo_tui.protocol.layout import STATE_FILE, TrainingState, encode_state, list_checkpoints
from grpo_tui.protocol.schema import STEP_TABLES


class ForkError(Exception):
    """A fork that cannot be made: one sentence."""


def checkpoint_at(parent: Path, where: str) -> tuple[Path, TrainingState]:
    """The parent's checkpoint ``--from`` names: ``latest`` (what a resume picks) or a step."""
    if where == "latest":
        found = latest_whole(parent)
        if found is None:
            raise ForkError(f"{parent}: no checkpoint to fork from (a run saves them every checkpoint.save_every "
                            "steps and when it stops)")
        return found
    steps = sorted({f.state.step for f in list_checkpoints(parent) if f.state is not None and resumable(f.path, f.state)})
    try:
        step = int(where)
    except ValueError:
        step = -1
    for f in list_checkpoints(parent)[::-1]:
        if f.state is not None and f.state.step == step and resumable(f.path, f.state):
            if (why := damage(f.path)) is not None:  # the fork's resume would set it aside and start at step 0
                whole = [s for s in steps if s != step and (p := _step_path(parent, s)) is not None and damage(p) is None]
                raise ForkError(f"--from {where}: {f.path} is damaged ({why}); fork from another step (whole ones: "
                                f"{', '.join(map(str, whole)) or 'none'})")
            return f.path, f.state
    have = ", ".join(map(str, steps)) or "none"
    raise ForkError(f"--from {where}: {parent} has no checkpoint of that step (it has steps {have}); "
                    "`--from latest` takes the newest")


def _step_path(parent: Path, step: int) -> Path | None:
    return next((f.path for f in list_checkpoints(parent)[::-1]
                 if f.state is not None and f.state.step == step and resumable(f.path, f.state)), None)


def target_problem(parent: Path, child: Path) -> str | None:
    """Why the fork cannot be written at ``child``, in one sentence, or None."""
    if child == parent or parent in child.parents:
        return (f"{child} is inside the parent run {parent}, which a fork only reads; name a folder outside it "
                f"(as {parent.with_name(parent.name + '-fork')})")
    if child in parent.parents:
        return f"{child} holds the parent run {parent}; name a new folder for the fork (NEW_DIR)"
    if child.exists() and not child.is_dir():
        return f"{child} is not a folder; name a new folder for the fork (NEW_DIR)"
    if child.exists() and any(child.iterdir()):
        return f"{child} is not empty; name another folder for the fork (NEW_DIR)"
    return output_dir_problem(child, "NEW_DIR") or ownership_problem(child, key="NEW_DIR")


def effective_config(parent_config: Config, state: TrainingState) -> dict[str, Any]:
    """The parent's config as it trained at ``state``'s step: the checkpoint keeps it (else the
    parent's config with the checkpoint's live changes)."""
    if state.config:
        raw = json.loads(json.dumps(state.config))
    else:
        for change in state.live_changes:
            set_value(parent_config, change.key, change.new)
        raw = parent_config.to_dict()
    if isinstance(runtime := raw.get("runtime"), dict):
        runtime.pop("active_blas", None)  # what a worker found at start, not a key
    return raw


def make_fork(parent_dir: str, where: str, sets: list[str], name: str | None, new_dir: str | None) -> Path:
    """Write the fork's folder; its ``config.toml``'s path. Raises ``ForkError``."""
    from grpo_tui.tui.runs import config_for, store_of

    parent = Path(parent_dir).resolve()
    config = config_for(parent) if parent.is_dir() else None
    if config is None:
        raise ForkError(f"{parent_dir}: not a run folder (`grpo-tui ls` lists runs)")
    path, state = checkpoint_at(parent, where)
    raw = effective_config(config, state)
    for item in sets:
        if item.partition("=")[0].strip().startswith("model."):
            raise ForkError(f"--set {item}: a fork keeps its parent's model (its weights are that model's); "
                            "train another model in a new run")
        try:
            apply_override(raw, item, "--set")
        except ConfigError as exc:
            raise ForkError(str(exc.detail)) from None
    child = Path(new_dir).resolve() if new_dir else parent.with_name(f"{parent.name}-fork-{state.step}")
    if (problem := target_problem(parent, child)) is not None:
        raise ForkError(problem)
    raw["name"] = name or child.name  # named as its folder, in every list and chart
    raw["checkpoint"].update(output_dir=str(child), resume="latest")
    raw["store"].pop("path", None)  # its own store: a shared one is the parent's
    raw["fork"] = {"parent": str(parent), "run_id": state.run_id, "step": state.step}
    text = dumps(raw)
    try:
        parse_config(text, base_dir=child, file=str(child / "config.toml"), check_paths=False)
    except ConfigError as exc:
        raise ForkError(str(exc)) from None
    try:
        child.mkdir(parents=True, exist_ok=True)
        _link_checkpoint(path, child / f"checkpoint-{state.step}", state)
        if (store := store_of(parent)).is_file():
            _copy_store(store, child / "outputs.db", state.run_id, state.step, raw)
        (child / "config.toml").write_text(text, encoding="utf-8")
    except OSError as exc:  # a full disk, a folder that vanished or turned read-only meanwhile
        raise ForkError(f"{child} cannot be written ({exc.strerror or exc}); name a folder you can write to") from None
    return child / "config.toml"


def _link_checkpoint(source: Path, dest: Path, state: TrainingState) -> None:
    """The checkpoint's files in the fork's folder (hard links: no second copy of the weights); its
    state anew, as a periodic checkpoint (a ``final`` one goes on when the fork trains longer)."""
    dest.mkdir()
    for item in source.iterdir():
        if item.name == STATE_FILE:
            continue
        if item.is_dir():
            shutil.copytree(item, dest / item.name)
            continue
        try:
            os.link(item, dest / item.name)
        except OSError:  # another file system, or links not allowed
            shutil.copy2(item, dest / item.name)
    (dest / STATE_FILE).write_bytes(encode_state(TrainingState(**{**_fields(state), "kind": "periodic"})))


def _fields(state: TrainingState) -> dict[str, Any]:
    return {f: getattr(state, f) for f in state.__struct_fields__}


def _copy_store(source: Path, dest: Path, run_id: int, step: int, raw: dict[str, Any]) -> None:
    """The parent's store, read-only, cut to its run up to the branch point (the fork resumes it from
    there; a viewer comparing the fork sees none of the parent's later steps), named and configured
    as the fork."""
    # A closed store (no -wal beside it) is read as immutable: SQLite then writes no -shm or -wal of
    # its own beside the parent's file. A live one is read as any viewer reads it.
    live = source.with_name(source.name + "-wal").exists()
    uri = f"file:{source}?mode=ro" + ("" if live else "&immutable=1")
    with contextlib.closing(sqlite3.connect(uri, uri=True)) as src, \
            contextlib.closing(sqlite3.connect(dest)) as out:
        src.backup(out)
        out.execute("PRAGMA foreign_keys=ON")
        out.execute("DELETE FROM runs WHERE id != ?", (run_id,))
        for table in STEP_TABLES:
            out.execute(f"DELETE FROM {table} WHERE run_id = ? AND step > ?", (run_id, step))
        out.execute("UPDATE runs SET name=?, config=? WHERE id=?", (raw["name"], json.dumps(raw), run_id))
        out.commit()
