"""``grpo-tui`` command line: run, worker, browse, check.

Kept light: heavy imports (Textual, MLX) happen only inside the subcommand that needs them, and
the worker is started as its own process (``python -m grpo_tui.worker``) so this package never
imports it.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from grpo_tui.protocol import __version__, distributed
from grpo_tui.protocol.config import Config, ConfigError, load_config
from grpo_tui.protocol.layout import STORE_FILE


def _fail(message: str, code: int = 2) -> int:
    print(f"grpo-tui: {message}", file=sys.stderr)
    return code


def _load(path: str, overrides: list[str] | None = None) -> Config | None:
    try:
        return load_config(path, overrides=overrides or ())
    except ConfigError as exc:
        print(f"grpo-tui: config error: {exc}", file=sys.stderr)
        return None


def cmd_check(args: argparse.Namespace) -> int:
    from grpo_tui.protocol.tomlout import dumps

    config = _load(args.config, args.set)
    if config is None:
        return 2
    from grpo_tui.protocol.recipes import report

    print(f"# {args.config}: valid. Resolved config:")
    for line in report(Path(args.config).read_text(encoding="utf-8")):
        print(f"# {line}")
    print(dumps(config.to_dict()), end="")
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    if _load(args.config, args.set) is None:
        return 2
    argv = [sys.executable, "-m", "grpo_tui.worker", args.config] + (["--plain"] if args.plain else [])
    argv += distributed.forwarded(args) + _sets(args)
    sys.stdout.flush()
    os.execv(sys.executable, argv)
    return 0  # not reached


def cmd_run(args: argparse.Namespace) -> int:
    config = _load(args.config, args.set)
    if config is None:
        return 2
    from grpo_tui.tui.app import run_dashboard

    return run_dashboard(args.config, config, distributed.forwarded(args) + _sets(args))


def cmd_browse(args: argparse.Namespace) -> int:
    if not Path(args.database).is_file():
        return _fail(f"{args.database}: no such file.")
    from grpo_tui.tui.browse import run_browser

    return run_browser(args.database)


def cmd_init(args: argparse.Namespace) -> int:
    from grpo_tui.tui.init_templates import InitError, write_template

    try:
        dest = write_template(args.template, args.directory)
    except InitError as exc:
        return _fail(str(exc))
    files = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file() and p.parent.name != "model")
    print(f"wrote {dest}/: {', '.join(files)} and model/ (a bundled tiny model)")
    print(f"train it: grpo-tui run {dest / 'config.toml'}   (headless: grpo-tui worker {dest / 'config.toml'} --plain)")
    print("its comments say how to switch to a hub model (Qwen/Qwen3-0.6B) and a hub dataset")
    return 0


def add_set_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE",
        help="override one config key, the value read as TOML (repeatable): --set training.learning_rate=1e-5",
    )


def _sets(args: argparse.Namespace) -> list[str]:
    """The ``--set`` items again, as worker arguments."""
    return [arg for item in args.set for arg in ("--set", item)]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="grpo-tui",
        description="Train language models with GRPO on MLX, watched and steered from a terminal dashboard.",
    )
    parser.add_argument("--version", action="version", version=f"grpo-tui {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("run", help="open the dashboard and train (starts the worker)")
    p.add_argument("config", help="path to config.toml")
    distributed.add_arguments(p)
    add_set_argument(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("worker", help="run the headless trainer, printing protocol frames")
    p.add_argument("config", help="path to config.toml")
    p.add_argument("--plain", action="store_true", help="human-readable progress instead of frames")
    distributed.add_arguments(p)
    add_set_argument(p)
    p.set_defaults(func=cmd_worker)

    p = sub.add_parser("browse", help=f"browse a run store ({STORE_FILE}) without training")
    p.add_argument("database", help=f"path to {STORE_FILE}")
    p.set_defaults(func=cmd_browse)

    from grpo_tui.tui.init_templates import TEMPLATES, describe

    p = sub.add_parser("init", help="write a starter run (config, rewards, example rows, a tiny model)",
                       description=f"Templates: {describe()}.")
    p.add_argument("template", choices=list(TEMPLATES), help="math, json or tools")
    p.add_argument("directory", nargs="?", help="where to write it (default: ./TEMPLATE)")
    p.set_defaults(func=cmd_init)

    p = sub.add_parser("check", help="validate a config and print it resolved")
    p.add_argument("config", help="path to config.toml")
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


if __name__ == "__main__":
    sys.exit(main())
