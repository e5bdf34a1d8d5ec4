"""``grpo-tui`` command line: run, attach, ls, set, fork, compare, worker, browse, check.

Kept light: heavy imports (Textual, MLX) happen only inside the subcommand that needs them, and
the worker is started as its own process (``python -m grpo_tui.worker``) so this package never
imports it.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from grpo_tui.common import distributed
from grpo_tui.protocol import __version__
from grpo_tui.protocol.config import Config, ConfigError, load_config
from grpo_tui.protocol.layout import RUN_LOG_FILE, STORE_FILE
from grpo_tui.protocol.outcome import Exit

EXIT_CODES = f"""\
exit codes (the same for run, worker and a launch on several ranks; README, "When something goes wrong"):
  {Exit.DONE}  done: the run trained to its end
  {Exit.CRASH}  crash: a bug or the machine (the traceback is in OUTPUT_DIR/{RUN_LOG_FILE}); the dashboard
     restarts the worker from the latest checkpoint
  {Exit.MISTAKE}  a fixable mistake (config, model, data, reward or tool file, a reward function that
     raises or hangs, memory budget, ranks, output folder): one sentence says what to fix; never restarted
  {Exit.NAN_STOP}  stopped after non-finite steps (an emergency checkpoint is kept)
  {Exit.STOPPED}  stopped by the user or a signal, after a checkpoint (--resume latest continues)
  {Exit.UNREWARDED}  stopped after training.silent_patience steps in which no completion earned a reward (the
     task is too hard for the model as it is); a run whose every completion got the run's best
     reward for as many steps solved its task: it ends done (0), its model in final/
  {Exit.DOCTOR}  stopped by the run doctor on a finding as severe as doctor.stop_on (docs/doctor.md)
"""


def _fail(message: str, code: int = 2) -> int:
    print(f"grpo-tui: {message}", file=sys.stderr)
    return code


def _load(path: str, overrides: list[str] | None = None, resume: str | None = None) -> Config | None:
    try:
        config = load_config(path, overrides=overrides or ())
    except ConfigError as exc:
        print(f"grpo-tui: config error: {exc}", file=sys.stderr)
        return None
    if resume is not None and resume.lower() not in ("latest", "false", "no", "none", "off") and not os.path.isdir(resume):
        print(f"grpo-tui: --resume: {resume!r} is not a checkpoint folder; name a checkpoint-N, final or "
              'emergency-N folder, or use "latest"', file=sys.stderr)
        return None
    return config


def _resume_args(args: argparse.Namespace) -> list[str]:
    return ["--resume", args.resume] if getattr(args, "resume", None) else []


def cmd_check(args: argparse.Namespace) -> int:
    from grpo_tui.common.tomlout import dumps

    config = _load(args.config, args.set)
    if config is None:
        return 2
    from grpo_tui.common.preflight import check_problems
    from grpo_tui.protocol.recipes import report

    if problems := check_problems(config, args.config):  # what the worker would stop on, found without training
        for problem in problems:
            print(f"grpo-tui: {problem}", file=sys.stderr)
        return Exit.MISTAKE

    print(f"# {args.config}: valid. Resolved config:")
    from grpo_tui.common.data_check import first_rows, small_data_note

    rows = first_rows(config.data.path, config.data.split)
    if rows and (note := small_data_note(len(rows), config.training.batch_size, config.data.path)) is not None:
        print(f"# note: {note}")
    from grpo_tui.common.disk_space import checkpoint_space_note

    if (note := checkpoint_space_note(config)) is not None:
        print(f"# note: {note}")
    for line in report(Path(args.config).read_text(encoding="utf-8-sig")):
        print(f"# {line}")
    if note := _live_changes_at_resume(config, args.set):  # and the config printed is the one it resumes with
        print(f"# {note}")
    print(dumps(config.to_dict()), end="")
    if args.probe:
        from grpo_tui.tui.probe_report import run_probe

        return run_probe(args.config, args.probe, args.set, config)
    return 0


def _live_changes_at_resume(config: Config, overrides: list[str]) -> str | None:
    """``resume = "latest"`` goes on with the live changes its checkpoint kept (docs/steering.md): said
    as the worker says it, and applied to ``config``."""
    from grpo_tui.common.live_settings import carried, resume_note, set_value
    from grpo_tui.common.resume_check import latest_whole

    found = latest_whole(Path(config.checkpoint.output_dir)) if config.checkpoint.resume == "latest" else None
    kept = carried(found[1].live_changes, overrides) if found is not None else []
    note = resume_note(kept, config)
    for change in kept:
        set_value(config, change.key, change.new)
    return note


def cmd_worker(args: argparse.Namespace) -> int:
    config = _load(args.config, args.set, args.resume)
    if config is None:
        return Exit.MISTAKE
    from grpo_tui.tui.headless import run_headless

    argv = [sys.executable, "-m", "grpo_tui.worker", args.config] + (["--plain"] if args.plain else [])
    argv += distributed.forwarded(args) + _sets(args) + _resume_args(args)
    sys.stdout.flush()
    return run_headless(argv, config.checkpoint.output_dir)


def runnable(args: argparse.Namespace) -> Config | None:
    """``run``'s config, or None when it says a mistake itself: a config that does not load, or an
    output folder that cannot hold the run (its supervisor lives there, so no dashboard would open)."""
    config = _load(args.config, args.set, args.resume)
    if config is None:
        return None
    from grpo_tui.common.preflight import folder_problems

    if problems := folder_problems(config):
        for problem in problems:
            print(f"grpo-tui: {problem}", file=sys.stderr)
        return None
    return config


def cmd_run(args: argparse.Namespace) -> int:
    config = runnable(args)
    if config is None:
        return Exit.MISTAKE
    from grpo_tui.tui.launcher import live_run

    if (busy := live_run(config.checkpoint.output_dir)) is not None:  # with or without --detach: one line
        return _fail(f"{busy}.")
    if args.detach:
        return _run_detached(args.config, config, distributed.forwarded(args) + _sets(args) + _resume_args(args))
    if (why := no_screen()) is not None:  # no dashboard can be drawn: the --plain lines, as `grpo-tui worker` prints them
        print(f"grpo-tui: {why}, so no dashboard can be drawn; showing the --plain lines instead", file=sys.stderr)
        args.plain = True
        return cmd_worker(args)
    from grpo_tui.tui.app import run_dashboard

    return run_dashboard(args.config, config, distributed.forwarded(args) + _sets(args) + _resume_args(args))


def no_screen() -> str | None:
    """Why this process has no terminal to draw a dashboard on (TERM=dumb, or stdin or stdout not
    a terminal), or None."""
    if os.environ.get("TERM") == "dumb":
        return "TERM=dumb"
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        return "stdin or stdout is not a terminal"
    return None


def _run_detached(config_path: str, config: Config, worker_args: list[str]) -> int:
    """``run --detach``: start the run's supervisor in its own session and return at once."""
    from grpo_tui.tui.launcher import DidNotStart, RunLive, start_in_background

    out = str(Path(config.checkpoint.output_dir).resolve())
    try:
        proc = start_in_background(config_path, config, worker_args)
    except (RunLive, OSError) as exc:
        return _fail(f"{exc}.")
    except DidNotStart as exc:
        return _fail(f"the run did not start: {exc}", 1)
    print(f"Training in the background (supervisor pid {proc.pid}). Run folder: {out}")
    print(f"Attach: grpo-tui attach {shlex.quote(out)}")
    return 0


def attach_target(run_dir: str | None) -> tuple[Path, Config] | str:
    """The run folder and config ``grpo-tui attach [RUN_DIR]`` opens, or why not (one sentence)."""
    from grpo_tui.tui.runs import config_for, newest_live

    if run_dir is None:
        newest = newest_live(Path.cwd())
        if newest is None:
            return f"no live run under {Path.cwd()}; give a run folder (`grpo-tui ls` lists them)."
        folder = newest.folder
    else:
        folder = Path(run_dir).resolve()
        if not folder.is_dir():
            return f"{run_dir}: no such folder."
    config = config_for(folder)
    if config is None:
        return f"{folder}: not a run folder (no run.jsonl and no .control/); `grpo-tui ls` lists runs."
    return folder, config


def cmd_attach(args: argparse.Namespace) -> int:
    if args.set:  # a run's config is fixed when it starts; attach only watches and steers it
        return _fail(
            f"attach takes no --set ({args.set[0]}): a run keeps the config and overrides it was started with, "
            "and attach shows it so; to change a live setting: grpo-tui set RUN_DIR KEY=VALUE; any other key: stop "
            "the run (q, then y) and start it again with grpo-tui run CONFIG --resume latest --set KEY=VALUE."
        )
    target = attach_target(args.run_dir)
    if isinstance(target, str):
        return _fail(target)
    folder, config = target
    for other in args.compare:
        if not Path(other).is_dir():
            return _fail(f"--compare {other}: no such folder; name a run's output folder (`grpo-tui ls` lists runs).")
    from grpo_tui.tui.priority import yield_cpu

    yield_cpu()  # attach starts nothing: the dashboard yields to training from its first import on
    if args.web:  # each browser tab runs its own `grpo-tui attach FOLDER`
        from grpo_tui.tui.web import serve

        return serve(folder, host=args.host, port=args.port, token=args.token)
    from grpo_tui.tui.app import run_dashboard

    return run_dashboard(str(folder / "config.toml"), config, attach_dir=str(folder), compare=args.compare)


def cmd_ls(args: argparse.Namespace) -> int:
    from grpo_tui.tui.runs import find_runs, format_runs

    root = Path(args.dir)
    if not root.is_dir():
        return _fail(f"{args.dir}: no such folder.")
    runs = find_runs(root)
    if not runs:
        print(f"no runs under {root.resolve()}")
        return 0
    print("\n".join(format_runs(runs, root)))
    return 0


def cmd_set(args: argparse.Namespace) -> int:
    from grpo_tui.tui.live_settings_command import set_live

    return set_live(args.run_dir, args.items)


def cmd_fork(args: argparse.Namespace) -> int:
    from grpo_tui.tui.fork import ForkError, make_fork

    try:
        config_path = make_fork(args.run_dir, args.start, args.set, args.name, args.new_dir)
    except ForkError as exc:
        return _fail(str(exc))
    config = _load(str(config_path))
    if config is None or config.fork is None:
        return Exit.MISTAKE
    print(f"Forked {config.fork.parent} at step {config.fork.step} into {config_path.parent}: its first step is "
          f"{config.fork.step + 1}")
    if args.detach:  # the fork's --set items win over the parent's live changes its checkpoint carries
        return _run_detached(str(config_path), config, _sets(args))
    from grpo_tui.tui.app import run_dashboard

    return run_dashboard(str(config_path), config, _sets(args))


def cmd_compare(args: argparse.Namespace) -> int:
    from grpo_tui.tui.compare import run_compare

    return run_compare(args.run_dirs, args.json)


def cmd_doctor(args: argparse.Namespace) -> int:
    from grpo_tui.tui.doctor_report import run_doctor

    return run_doctor(Path(args.run_dir), args.json)


def cmd_browse(args: argparse.Namespace) -> int:
    database = Path(args.database)
    if database.is_dir():  # a run folder: its store (store.path may put it elsewhere)
        from grpo_tui.tui.runs import store_of

        if not (store := store_of(database)).is_file():
            return _fail(f"{database}: a folder without {STORE_FILE}; name a run's output folder or its {STORE_FILE}.")
        database = store
    if not database.is_file():
        return _fail(f"{args.database}: no such file.")
    from grpo_tui.tui.browse import run_browser

    return run_browser(str(database))


def cmd_init(args: argparse.Namespace) -> int:
    from grpo_tui.tui.init_templates import InitError, write_template

    if args.from_mlx_node is not None:
        return _init_from_mlx_node(args)
    if args.data is not None:
        return _fail("--data goes with --from-mlx-node: a template brings its own rows.")
    if args.template is None:
        return _fail("name a template (`grpo-tui init math`) or an mlx-node config (`grpo-tui init --from-mlx-node FILE.json`).")
    try:
        dest = write_template(args.template, args.directory)
    except InitError as exc:
        return _fail(str(exc))
    files = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file() and p.parent.name != "model")
    print(f"wrote {dest}/: {', '.join(files)} and model/ (a bundled tiny model)")
    config = shlex.quote(str(dest / "config.toml"))
    print(f"train it: `grpo-tui run {config}`   (headless: `grpo-tui worker {config} --plain`)")
    dataset = "" if args.template == "reasoning-gym" else " and a hub dataset"  # its tasks are generated
    print(f"its comments say how to switch to a hub model (Qwen/Qwen3-0.6B){dataset}")
    return 0


def _init_from_mlx_node(args: argparse.Namespace) -> int:
    from grpo_tui.tui.from_mlx_node import write_converted
    from grpo_tui.tui.init_templates import InitError

    if args.directory is not None:
        return _fail(f"one folder only: `grpo-tui init --from-mlx-node {args.from_mlx_node} DIR` (got {args.template} and {args.directory}).")
    try:
        dest, unmapped = write_converted(args.from_mlx_node, args.template, args.data)
    except InitError as exc:
        return _fail(str(exc))
    config = shlex.quote(str(dest / "config.toml"))
    print(f"wrote {dest / 'config.toml'}: every mlx-node setting written out (docs/from-mlx-node.md)")
    for line in unmapped:
        print(f"not carried over: {line}")
    if args.data is None:
        print(f"mlx-node's config names no dataset: set [data] path in {dest / 'config.toml'}, or convert with --data ROWS.jsonl")
    print(f"check it: `grpo-tui check {config}`   train it: `grpo-tui run {config}`")
    return 0


class IntermixedParser(argparse.ArgumentParser):
    """A subcommand's parser that takes its positionals anywhere among its options
    (``fork RUN --from 10 --set K=V NEW_DIR --detach``)."""

    _inside = False

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        if self._inside:  # parse_known_intermixed_args calls back here for each of its two passes
            return super().parse_known_args(args, namespace)
        self._inside = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._inside = False


def add_set_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE",
        help="override one config key, the value read as TOML (repeatable): --set training.learning_rate=1e-5",
    )


def _sets(args: argparse.Namespace) -> list[str]:
    """The ``--set`` items again, as worker arguments."""
    return [arg for item in args.set for arg in ("--set", item)]


def _add_steering(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """``set`` and ``fork`` (docs/steering.md)."""
    p = sub.add_parser("set", help="change settings of a running run from its next step on (docs/steering.md)",
                       description="Each KEY=VALUE is read as --set reads it and checked the same way; it applies "
                                   "at the next step boundary. Prints the step it applies from (exit 0), or why "
                                   "not (exit 2).")
    p.add_argument("run_dir", help="the run's output folder")
    p.add_argument("items", nargs="+", metavar="KEY=VALUE", help="e.g. training.learning_rate=5e-6")
    p.set_defaults(func=cmd_set)

    plain, sub._parser_class = sub._parser_class, IntermixedParser  # NEW_DIR after the options, as people type it
    p = sub.add_parser("fork", help="start a new run from a checkpoint of a run, with changes (docs/steering.md)",
                       description="The new run starts from the checkpoint (weights, optimizer, RNG, data position) "
                                   "with the parent's effective config and the --set changes (any key but the model); "
                                   "its first step is STEP+1 and its charts hold the parent's steps up to there. The "
                                   "parent's folder is only read.")
    p.add_argument("run_dir", help="the parent run's output folder")
    p.add_argument("new_dir", nargs="?", default=None, help="the fork's output folder (default: RUN_DIR-fork-STEP)")
    p.add_argument("--from", dest="start", default="latest", metavar="STEP|latest",
                   help="the checkpoint's step (default: latest, what a resume picks)")
    p.add_argument("--name", default=None, help="the fork's run name (default: the parent's name-fork-STEP)")
    p.add_argument("--detach", action="store_true", help="start it in the background and return at once")
    add_set_argument(p)
    p.set_defaults(func=cmd_fork)
    sub._parser_class = plain

    p = sub.add_parser("compare", help="runs side by side: figures and config differences (docs/steering.md)",
                       description="For each run: steps, wall time, last and best reward, last and best eval accuracy; "
                                   "then every config key that differs, live changes shown at their step. Exit 2 when "
                                   "a folder is not a run.")
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="two or more runs' output folders")
    p.add_argument("--json", action="store_true", help="the same as JSON")
    p.set_defaults(func=cmd_compare)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="grpo-tui",
        description="Train language models with GRPO on MLX, watched and steered from a terminal dashboard.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    resume_help = ('continue from a checkpoint: "latest" (the newest periodic or final one), a checkpoint '
                   'folder\'s path, or "false" (overrides checkpoint.resume)')
    parser.add_argument("--version", action="version", version=f"grpo-tui {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("run", help="start a run and open its dashboard", epilog=EXIT_CODES,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("config", help="path to config.toml")
    p.add_argument("--resume", metavar="PATH|latest", help=resume_help)
    p.add_argument("--detach", action="store_true", help="start the run in the background and return at once")
    distributed.add_arguments(p)
    add_set_argument(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("attach", help="open the dashboard of a run (a live one is steerable, a finished one read-only)")
    p.add_argument("run_dir", nargs="?", default=None, help="the run's output folder (default: the newest live run here)")
    p.add_argument("--web", action="store_true", help="serve the dashboard to a browser (textual-serve)")
    p.add_argument("--host", default="127.0.0.1", help="address to serve on with --web (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port to serve on with --web (default 8000)")
    p.add_argument("--token", default=None, help="with --web: require ?token=TOKEN (default: a random one off 127.0.0.1)")
    p.add_argument("--compare", nargs="+", default=[], metavar="OTHER_DIR",
                   help="draw these runs over the charts, each in its colour (C in the dashboard picks them too)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help=argparse.SUPPRESS)  # refused, with why
    p.set_defaults(func=cmd_attach)

    p = sub.add_parser("ls", help="list the runs under a folder: status, step, pid, start, reward")
    p.add_argument("dir", nargs="?", default=".", help="folder to search (default: here)")
    p.set_defaults(func=cmd_ls)

    _add_steering(sub)

    p = sub.add_parser("doctor", help="what the run doctor finds in a run, finished or live (docs/doctor.md)",
                       description="Replays the run's steps from its store through the doctor's rules. Exit codes: "
                                   "0 nothing above info, 10 a warning holds, 11 a critical finding holds, 2 no such run.")
    p.add_argument("run_dir", help="the run's output folder")
    p.add_argument("--json", action="store_true", help="the findings as JSON")
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser("worker", help="run the headless trainer, printing protocol frames", epilog=EXIT_CODES,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("config", help="path to config.toml")
    p.add_argument("--plain", action="store_true", help="human-readable progress instead of frames")
    p.add_argument("--resume", metavar="PATH|latest", help=resume_help)
    distributed.add_arguments(p)
    add_set_argument(p)
    p.set_defaults(func=cmd_worker)

    p = sub.add_parser("browse", help=f"browse a run store ({STORE_FILE}) without training")
    p.add_argument("database", help=f"path to {STORE_FILE}, or a run's output folder")
    p.set_defaults(func=cmd_browse)

    from grpo_tui.tui.init_templates import TEMPLATES, describe

    p = sub.add_parser("init", help="write a starter run (config, rewards, example rows, a tiny model)",
                       description=f"Templates: {describe()}.")
    p.add_argument("template", nargs="?", help=f"{', '.join(TEMPLATES)} (with --from-mlx-node: the folder to write)")
    p.add_argument("directory", nargs="?", help="where to write it (default: ./TEMPLATE)")
    p.add_argument("--from-mlx-node", metavar="FILE.json", help="convert an mlx-node GRPOTrainerConfig (JSON) instead")
    p.add_argument("--data", metavar="ROWS", help="with --from-mlx-node: the training rows the config reads")
    p.set_defaults(func=cmd_init)

    p = sub.add_parser("check", help="validate a config and print it resolved")
    p.add_argument("config", help="path to config.toml")
    p.add_argument("--probe", nargs="?", type=int, const=16, default=0, metavar="N",
                   help="also load the model, sample N prompts (default 16) and time a step: will it learn? (docs/doctor.md)")
    add_set_argument(p)
    p.set_defaults(func=cmd_check)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `grpo-tui check cfg.toml | head -1`: the reader had enough
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
        return 0


if __name__ == "__main__":
    sys.exit(main())
