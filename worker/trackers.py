"""The run reported to the trackers users already use: W&B, Trackio, TensorBoard (``[logging]``,
docs/trackers.md).

Rank 0's process side reports (no MLX here): each logged step under TRL's metric names with
``train/`` in front and each evaluation with ``eval/`` (as transformers' callbacks write them),
the resolved config as hyperparameters, and with ``log_completions`` a table of the logged step's
completions (step, prompt, completion, each reward, advantage) as TRL logs one. A resumed run
continues the same tracker run: its identity is kept in ``<output_dir>/trackers.json``.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Protocol

from grpo_tui.common.install_hint import pip_install
from grpo_tui.common.trl_names import StepWindow, eval_metrics
from grpo_tui.protocol import messages as m
from grpo_tui.protocol.config import Config
from grpo_tui.protocol.outcome import Mistake
from grpo_tui.worker.trainer_contract import Generation, StepOutput

IDENTITY_FILE = "trackers.json"
TENSORBOARD_DIR = "tensorboard"  # under the output folder: `tensorboard --logdir runs/x/tensorboard`


def check_installed(config: Config) -> None:
    """A tracker named in ``logging.report_to`` whose library is missing is a fixable mistake."""
    for name in config.logging.report_to:
        if importlib.util.find_spec(name) is None:
            raise Mistake(
                "config", f"logging.report_to names {name}, which is not installed: {pip_install(name)}"
            )


class Tracker(Protocol):
    def log(self, metrics: dict[str, float], step: int) -> None: ...

    def table(self, key: str, columns: list[str], rows: list[list[Any]], step: int) -> None: ...

    def changed(self, change: m.SettingChanged) -> None: ...

    def alert(self, finding: m.Finding) -> None: ...

    def close(self) -> None: ...


class WandbTracker:
    """W&B; offline with ``WANDB_MODE=offline`` (run files under ``<output_dir>/wandb/``, which
    ``wandb sync`` uploads; a resumed run's files share its id, so they sync into one run)."""

    def __init__(self, project: str, name: str, run_id: str, output_dir: Path, config: dict[str, Any]) -> None:
        import wandb

        self.wandb: Any = wandb  # its Table stubs want list[str | int] columns
        self.run = wandb.init(project=project, name=name, id=run_id, resume="allow", dir=str(output_dir),
                              config=config)  # fmt: skip

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.run.log(metrics, step=step)

    def table(self, key: str, columns: list[str], rows: list[list[Any]], step: int) -> None:
        self.run.log({key: self.wandb.Table(columns=columns, data=rows)}, step=step)

    def changed(self, change: m.SettingChanged) -> None:
        self.run.config.update({change.key: change.new}, allow_val_change=True)
        self.run.log({"live_change": f"{change.key}: {change.old} -> {change.new} ({change.source})",
                      **_numeric(change)}, step=change.step)

    def alert(self, finding: m.Finding) -> None:
        """A warning or critical finding as a W&B alert (``run.alert``: W&B's e-mail or Slack)."""
        if _alerted(finding):
            levels = {"info": self.wandb.AlertLevel.INFO, "warning": self.wandb.AlertLevel.WARN,
                      "critical": self.wandb.AlertLevel.ERROR}
            self.run.alert(title=_alert_title(finding), text=_alert_text(finding), level=levels[finding.severity],
                           wait_duration=0)

    def close(self) -> None:
        self.run.finish()


class TrackioTracker:
    """Trackio; local by default (its database under ``TRACKIO_DIR``, ``trackio show`` opens it)."""

    def __init__(self, project: str, name: str, config: dict[str, Any]) -> None:
        import trackio

        self.trackio = trackio
        trackio.init(project=project, name=name, config=config, resume="allow", embed=False)

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.trackio.log(metrics, step=step)

    def table(self, key: str, columns: list[str], rows: list[list[Any]], step: int) -> None:
        self.trackio.log({key: self.trackio.Table(columns=columns, data=rows)}, step=step)

    def changed(self, change: m.SettingChanged) -> None:
        if numeric := _numeric(change):
            self.trackio.log(numeric, step=change.step)

    def alert(self, finding: m.Finding) -> None:
        """A warning or critical finding as a Trackio alert (its dashboard, its database, a webhook)."""
        if _alerted(finding):
            level = self.trackio.AlertLevel.ERROR if finding.severity == "critical" else self.trackio.AlertLevel.WARN
            self.trackio.alert(title=_alert_title(finding), text=_alert_text(finding), level=level)

    def close(self) -> None:
        self.trackio.finish()


class TensorBoardTracker:
    """TensorBoard event files in ``<output_dir>/tensorboard/`` (written with TensorBoard's own
    writer, no TensorFlow or PyTorch); a resumed run adds a new event file to the same folder."""

    def __init__(self, log_dir: Path, config: dict[str, Any]) -> None:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary
        from tensorboard.plugins.hparams import summary_v2 as hparams
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self.Event, self.Summary = Event, Summary
        self.writer = EventFileWriter(str(log_dir))
        flat = {k: v if isinstance(v, (bool, int, float, str)) else json.dumps(v) for k, v in _flatten(config).items()}
        self.writer.add_event(Event(wall_time=time.time(), step=0, summary=hparams.hparams_pb(flat)))
        self._text("config", "\n".join(f"    {k} = {v}" for k, v in flat.items()), 0)

    def log(self, metrics: dict[str, float], step: int) -> None:
        values = [self.Summary.Value(tag=k, simple_value=v) for k, v in metrics.items()]
        self.writer.add_event(self.Event(wall_time=time.time(), step=step, summary=self.Summary(value=values)))
        self.writer.flush()

    def table(self, key: str, columns: list[str], rows: list[list[Any]], step: int) -> None:
        def cell(value: Any) -> str:
            return str(value).replace("|", "\\|").replace("\n", "<br>")

        lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
        self._text(key, "\n".join(lines), step)
        self.writer.flush()

    def changed(self, change: m.SettingChanged) -> None:
        self._text("live_changes", f"from step {change.step}: {change.key} {change.old} -> {change.new} "
                                   f"({change.source})", change.step)
        self.writer.flush()

    def alert(self, finding: m.Finding) -> None:
        """Every finding, and its clearing, as a text entry under ``doctor`` at its step (no alerts in TensorBoard)."""
        self._text("doctor", _alert_title(finding) + ": " + _alert_text(finding), finding.step)
        self.writer.flush()

    def _text(self, tag: str, text: str, step: int) -> None:
        from tensorboard.compat.proto.summary_pb2 import SummaryMetadata
        from tensorboard.compat.proto.tensor_pb2 import TensorProto
        from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto

        meta = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name="text"))
        tensor = TensorProto(dtype=7, string_val=[text.encode("utf-8")],  # DT_STRING, as tf.summary.text
                             tensor_shape=TensorShapeProto(dim=[TensorShapeProto.Dim(size=1)]))
        value = self.Summary.Value(tag=tag, metadata=meta, tensor=tensor)
        self.writer.add_event(self.Event(wall_time=time.time(), step=step, summary=self.Summary(value=[value])))

    def close(self) -> None:
        self.writer.close()


class Trackers:
    """Every tracker of ``logging.report_to``; a tracker that fails mid-run is dropped with a
    warning (training goes on: the store keeps everything)."""

    def __init__(self, config: Config, output_dir: Path, resumed: bool, warn: Any = None) -> None:
        self.config = config
        self.window = StepWindow(config.logging.steps)
        self.warn = warn or (lambda message: print(message, file=sys.stderr))
        self.trackers: dict[str, Tracker] = {}
        if not config.logging.report_to:
            return
        check_installed(config)
        identity = _identity(output_dir, config.run_name, resumed)
        hyper = config.to_dict()
        for name in config.logging.report_to:
            try:
                self.trackers[name] = _open(name, config, output_dir, identity, hyper)
            except Exception as exc:  # noqa: BLE001 — e.g. W&B online without a login
                self.close()
                hint = " (run `wandb login`, or set WANDB_MODE=offline)" if name == "wandb" else ""
                raise Mistake("config", f"logging.report_to: {name} could not start: {exc}{hint}") from exc

    def set_total(self, total_steps: int) -> None:
        self.window.total = total_steps

    def resumed(self, step: int, total_tokens: int) -> None:
        """A resumed run: TRL's num_tokens goes on from the tokens of its steps so far."""
        self.window.resume(step, total_tokens)

    def step(self, output: StepOutput) -> None:
        if not self.trackers:
            return
        entry = self.window.add(output.metrics)
        if entry is None:
            return
        step = output.metrics.step
        self._each(lambda t: t.log({f"train/{k}": v for k, v in entry.items()}, step))
        if self.config.logging.log_completions and output.generations:
            columns, rows = completions_table(step, output.generations)
            self._each(lambda t: t.table("completions", columns, rows, step))

    def eval(self, result: m.Eval) -> None:
        both = self.config.eval is not None and self.config.eval.also_sampled
        prefix = "eval_sampled" if both and not result.greedy else "eval"  # the greedy pass keeps TRL's names
        metrics = {f"{prefix}/{k}": v for k, v in eval_metrics(result).items()}
        self._each(lambda t: t.log(metrics, result.step))

    def setting_changed(self, change: m.SettingChanged) -> None:
        self._each(lambda t: t.changed(change))

    def finding(self, finding: m.Finding) -> None:
        """The run doctor's word (docs/doctor.md): W&B and Trackio alerts, TensorBoard text."""
        self._each(lambda t: t.alert(finding))

    def close(self) -> None:
        for name, tracker in list(self.trackers.items()):
            try:
                tracker.close()
            except Exception as exc:  # noqa: BLE001
                self.warn(f"{name}: closing the tracker failed: {type(exc).__name__}: {exc}")
        self.trackers = {}

    def _each(self, action: Any) -> None:
        for name, tracker in list(self.trackers.items()):
            try:
                action(tracker)
            except Exception as exc:  # noqa: BLE001 — a tracker's failure never stops training
                self.warn(f"{name}: reporting failed, no more reports to it this run: {type(exc).__name__}: {exc}")
                del self.trackers[name]


def _numeric(change: m.SettingChanged) -> dict[str, float]:
    """A live change of a number as a series (``live/<key>``) a chart can mark."""
    value = change.new
    return {f"live/{change.key}": float(value)} if isinstance(value, (int, float)) and not isinstance(value, bool) else {}


def _alerted(finding: m.Finding) -> bool:
    """What becomes an alert: a finding that begins or worsens to warning or critical (not info, not its clearing)."""
    return not finding.cleared and finding.severity != "info"


def _alert_title(finding: m.Finding) -> str:
    what = "cleared" if finding.cleared else finding.severity
    return f"grpo-tui doctor: {finding.name} ({what}) at step {finding.step}"


def _alert_text(finding: m.Finding) -> str:
    text = finding.message if finding.cleared else f"since step {finding.since}: {finding.message}"
    return text + (f" | suggested live change: {finding.suggestion}" if finding.suggestion else "")


def completions_table(step: int, generations: list[Generation]) -> tuple[list[str], list[list[Any]]]:
    """TRL's completions table: step, prompt, completion, each reward function's score, advantage."""
    names = list(dict.fromkeys(k for g in generations for k in g.reward_details))
    columns = ["step", "prompt", "completion", *names, "advantage"]
    rows = [[str(step), g.prompt, g.raw_completion, *[g.reward_details.get(n) for n in names], g.advantage]
            for g in generations]
    return columns, rows


def _identity(output_dir: Path, run_name: str, resumed: bool) -> dict[str, str]:
    """The tracker run's id and name: the saved ones when the run resumes, else new ones."""
    path = output_dir / IDENTITY_FILE
    if resumed:
        try:
            saved = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(saved.get("id"), str) and isinstance(saved.get("name"), str):
                return saved
        except (OSError, ValueError):
            pass
    run_id = uuid.uuid4().hex[:8]
    identity = {"id": run_id, "name": f"{run_name}-{run_id}"}
    path.write_text(json.dumps(identity) + "\n", encoding="utf-8")
    return identity


def _open(name: str, config: Config, output_dir: Path, identity: dict[str, str], hyper: dict[str, Any]) -> Tracker:
    project = config.logging.project
    if name == "wandb":
        return WandbTracker(project, identity["name"], identity["id"], output_dir, hyper)
    if name == "trackio":
        return TrackioTracker(project, identity["name"], hyper)
    return TensorBoardTracker(output_dir / TENSORBOARD_DIR, hyper)


def _flatten(value: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, item in value.items():
        if isinstance(item, dict) and item:
            out.update(_flatten(item, f"{prefix}{key}."))
        elif item is not None:
            out[f"{prefix}{key}"] = item
    return out
