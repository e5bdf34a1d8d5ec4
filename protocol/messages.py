"""Every message of the dashboard <-> worker protocol as a msgspec Struct (docs/architecture.md, "Protocol").

Worker -> dashboard messages are variants of ``Event``; dashboard -> worker messages are
variants of ``Command``. Both are tagged unions with tag field ``type`` and snake_case tags. On the
control socket (protocol/control.py) the supervisor adds its own frames to the worker's
(``ViewerFrame``) and takes one more command (``ViewerCommand``). protocol/codec.py reads and
writes every one of them.
Floats that can be NaN/inf are typed ``float | None``: msgspec encodes NaN/inf as ``null``.
"""

from __future__ import annotations

import math
import re
from typing import Any, Literal, Union

import msgspec

PROTOCOL_VERSION = 1

Phase = Literal["loading", "generating", "scoring", "training", "evaluating", "saving", "idle"]
LogLevel = Literal["debug", "info", "warning", "error"]
CheckpointKind = Literal["periodic", "manual", "final", "emergency"]
SampleDisplay = Literal["all", "best_worst", "random"]
FinishReason = Literal["stop", "length", "repetition"]
ToolCallStatus = Literal["ok", "invalid_json", "missing_name"]
SettingSource = Literal["dashboard", "cli", "api", "stdin", "doctor"]  # who asked for a live change


def finite(value: float | None) -> float | None:
    """``value``, or None when it is missing, NaN or infinite (what a ``float | None`` field carries)."""
    return value if value is not None and math.isfinite(value) else None


def mean_of(values: list[float | None]) -> float | None:
    """The mean of the values that are present and not NaN; None when there are none."""
    kept = [v for v in values if v is not None and v == v]
    return sum(kept) / len(kept) if kept else None


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


class _Message(msgspec.Struct, tag_field="type", tag=_snake, kw_only=True):
    pass


# ---------------------------------------------------------------- worker -> dashboard


class Hello(_Message):
    protocol_version: int
    worker_version: str
    pid: int


class Status(_Message):
    phase: Phase
    message: str = ""


class Init(_Message):
    model: str
    model_path: str
    training_type: str = "grpo"
    config: dict[str, Any] = {}
    dataset_size: int = 0
    steps_per_epoch: int = 0
    total_steps: int = 0
    num_epochs: int = 1
    output_dir: str = ""
    ranks: int = 1  # data-parallel ranks (mx.distributed); 1 = a single process
    backend: str = ""  # mx.distributed's backend when ranks > 1
    sample_display: SampleDisplay | None = None  # the mode the worker starts with (None: an older worker)


class DatabasePath(_Message):
    path: str
    run_id: int
    run_name: str


# Steps of history the dashboard keeps (its tiles, main chart and Charts tab) and a resume sends back.
HISTORY_LIMIT = 5000


class Aggregates(msgspec.Struct, kw_only=True):
    """The whole run's totals, older steps than ``resume_state``'s history included."""

    best_reward: float | None = None
    avg_reward: float | None = None
    reward_steps: int = 0  # steps with a finite reward (what avg_reward averages)
    best_loss: float | None = None
    avg_loss: float | None = None
    loss_steps: int = 0
    total_tokens: int = 0
    avg_generation_ms: float | None = None
    avg_training_ms: float | None = None


class ResumeState(_Message):
    step: int
    epoch: int
    total_epochs: int
    step_in_epoch: int
    steps_per_epoch: int
    # the last HISTORY_LIMIT steps as the store keeps them (store.py: every series the Charts tab draws)
    history: list["Step"] = []
    aggregates: Aggregates = msgspec.field(default_factory=Aggregates)
    changes: list["SettingChanged"] = []  # the live changes the run goes on with (docs/steering.md)


class EpochStart(_Message):
    epoch: int
    total_epochs: int
    steps_in_epoch: int


class ClipRatio(msgspec.Struct, kw_only=True):
    low: float | None = 0.0
    high: float | None = 0.0
    region: float | None = 0.0


class RankTiming(msgspec.Struct, kw_only=True):
    """One rank's share of a step (several ranks only)."""

    rank: int
    generation_ms: float
    training_ms: float
    all_reduce_ms: float  # time inside this rank's collectives (gather, all-sums), waiting included


# The step's ``extra_metrics`` the worker computes itself, under TRL's names: the loss types' own
# figures, and (by prefix) the batch's figures only TRL's log shows, tools, dynamic sampling, the
# judge. Every other key is what a reward function logged with ``log_metric``.
LOSS_METRICS = ("cispo_clip_ratio", "vespo/phi_seq_mean", "entropy_coef", "policy_loss", "clip_ratio/low_min",
                "clip_ratio/high_max", "sampling/importance_sampling_ratio/mean", "sampling/importance_sampling_ratio/min",
                "sampling/importance_sampling_ratio/max", "async/is_clipped")
WORKER_METRIC_PREFIXES = ("rewards/", "completions/", "tools/", "sampling/", "judge/", "curriculum/", "async/")


def logged_by_rewards(name: str) -> bool:
    """Whether an ``extra_metrics`` key is a reward function's ``log_metric`` (not the worker's own)."""
    return name not in LOSS_METRICS and not name.startswith(WORKER_METRIC_PREFIXES)


class Step(_Message):
    step: int
    epoch: int
    loss: float | None = None
    reward: float | None = None
    reward_std: float | None = None
    frac_reward_zero_std: float | None = None
    rewards: dict[str, float | None] = {}
    advantage_std: float | None = None
    kl: float | None = None
    entropy: float | None = None
    clip_ratio: ClipRatio = msgspec.field(default_factory=ClipRatio)
    completion_mean_length: float | None = None
    completion_min_length: float | None = None
    completion_max_length: float | None = None
    completion_clipped_ratio: float | None = None
    # every completion's total reward this step (the distribution view: collapse, saturation)
    completion_rewards: list[float | None] = []
    num_tokens: int = 0
    generation_ms: float | None = None
    scoring_ms: float | None = None
    training_ms: float | None = None
    generation_tokens_per_s: float | None = None
    training_tokens_per_s: float | None = None
    grad_norm: float | None = None
    learning_rate: float | None = None
    peak_memory_mb: float | None = None
    active_memory_mb: float | None = None
    gradients_applied: bool = True
    skipped_reason: str | None = None
    extra_metrics: dict[str, float] = {}  # what reward functions logged with log_metric, step means
    ranks: list[RankTiming] = []  # per rank, with several ranks
    slowest_rank: int | None = None  # the rank with the longest generation + training
    all_reduce_bytes: int = 0  # sent by one rank through collectives this step
    # of the completions' trained tokens under the policy that sampled them (the first pass): exp of
    # the mean token negative log-likelihood, and the share of tokens that were its most likely one
    perplexity: float | None = None
    token_accuracy: float | None = None


class ToolCall(msgspec.Struct, kw_only=True):
    """A ``<tool_call>`` block parsed from one completion."""

    index: int
    name: str | None = None
    arguments: Any = None
    status: ToolCallStatus = "ok"
    error: str | None = None
    raw: str = ""


class Turn(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One turn of an agent completion (``[[tools]]``, ``[environment]``): what the model wrote, a
    tool's result, or an environment's reply (``respond``: a ``user`` turn)."""

    role: Literal["assistant", "tool", "user"]
    content: str  # the model's text; a tool's result, or the error text the model was shown
    name: str | None = None  # tool turns: the function called
    arguments: Any = None  # tool turns: the arguments as parsed
    error: str | None = None  # tool turns: why the call failed (unknown tool, invalid JSON, ...)
    seconds: float | None = None  # tool turns: how long the call ran
    unread: bool = False  # tool turns: the call ran, but its result did not fit in the completion (never read)


class ScoredCompletion(msgspec.Struct, kw_only=True):
    """One completion, scored, as the engine hands it over, the store keeps it and the dashboard
    shows it: these fields are declared here once. The worker's ``Generation`` (worker/trainer_contract.py)
    adds what only the store keeps; a ``Sample`` frame adds where it sits in its step."""

    prompt: str
    completion: str  # the answer text, thinking removed
    reward: float | None = None  # weighted sum over reward functions
    reward_details: dict[str, float | None] = {}  # per reward function (unweighted), None = not applicable
    advantage: float | None = None
    num_tokens: int = 0
    finish_reason: FinishReason = "stop"
    thinking: str | None = None
    tool_calls: list[ToolCall] = []
    reward_notes: dict[str, str] = {}  # per reward function, what it noted (log_extra), e.g. schema errors
    turns: list[Turn] = []  # agent completions only: the conversation turn by turn


SCORED_COMPLETION_FIELDS: tuple[str, ...] = ScoredCompletion.__struct_fields__


class Sample(_Message, ScoredCompletion):
    """One chosen completion of a step, for the Samples tab: a ``ScoredCompletion`` and its place."""

    step: int
    index: int  # in the step: prompt position * group size + place in its group
    group: int  # the prompt's position in the step's batch
    display: SampleDisplay | None = None  # the sample display mode that chose this sample


class Eval(_Message):
    """A held-out evaluation (``[eval]``), after ``step`` steps (0: before the first update)."""

    step: int
    rewards: dict[str, float | None] = {}  # each reward function's mean
    reward: float | None = None  # the weighted total's mean
    accuracy: float | None = None  # the accuracy reward's mean, when one is configured
    pass_at_k: float | None = None  # num_samples > 1: prompts with at least one correct sample
    num_prompts: int = 0
    num_samples: int = 1
    greedy: bool = True
    completion_mean_length: float | None = None
    clipped_ratio: float | None = None
    seconds: float = 0.0


class Checkpoint(_Message):
    path: str
    step: int
    kind: CheckpointKind


class EpochEnd(_Message):
    epoch: int
    mean_loss: float | None = None
    mean_reward: float | None = None
    seconds: float = 0.0


class Log(_Message):
    level: LogLevel
    message: str
    time: float = 0.0


class Paused(_Message):
    step: int


class Resumed(_Message):
    step: int


class StepBarrier(_Message):
    """A worker started with ``control.STEP_BARRIER_ENV`` has done ``step`` (its frame, evaluations
    and checkpoint) and waits, paused, for its follower's ``resume`` or ``stop``."""

    step: int


class SampleDisplayChanged(_Message):
    """The worker's answer to ``set_sample_display``: the mode it uses from now on. Every viewer shows
    the worker's mode (this, the ``init`` frame's and each sample's), never its own."""

    mode: SampleDisplay


class SettingChanged(_Message):
    """A live change (``set_setting``) the worker applied at a step boundary: steps ``step`` and
    later run with ``key`` = ``new`` (docs/steering.md). ``total_steps``: the run's length after it
    (a change of ``training.max_steps``); ``id``: the asking command's."""

    step: int
    key: str
    old: Any = None
    new: Any = None
    source: SettingSource = "dashboard"
    time: float = 0.0
    total_steps: int | None = None
    id: str = ""


class SettingRefused(_Message):
    """The answer to a ``set_setting`` that cannot apply: ``message`` is the sentence (what
    ``--set`` would say of a bad value, or what can change); nothing in the run changed."""

    key: str
    value: str
    message: str
    source: SettingSource = "dashboard"
    id: str = ""


Severity = Literal["info", "warning", "critical"]


class Evidence(msgspec.Struct, kw_only=True):
    """Where a finding shows in the store: its steps, and its generations as (step, prompt_index,
    group_index) of the run (the Database tab filters on them)."""

    steps: list[int] = []
    generations: list[tuple[int, int, int]] = []
    finish_reason: str | None = None  # the generations share this finish reason (truncation)


class Finding(_Message):
    """The run doctor's word (docs/doctor.md): ``name`` holds at ``severity`` since step ``since``
    (now ``step``), with the ``numbers`` behind it, its ``evidence`` and, where one fits, a live
    change that treats it (``suggestion``: ``KEY=VALUE`` as ``grpo-tui set`` takes it). ``cleared``:
    it no longer holds."""

    name: str
    severity: Severity
    step: int
    since: int
    message: str
    numbers: dict[str, float] = {}
    evidence: Evidence = msgspec.field(default_factory=Evidence)
    suggestion: str | None = None
    cleared: bool = False


class Complete(_Message):
    """``trained``: the steps this worker trained (0: the run had already reached its end; None: an
    older worker that did not say)."""

    total_steps: int
    seconds: float
    status: Literal["completed", "stopped"]
    trained: int | None = None


class Error(_Message):
    """``fatal``: the worker ends after this frame. ``exit_code`` (fatal only): how it ends
    (``protocol/outcome.py``: 1 crash, 2 fixable mistake, 3 NaN stop); ``kind``: a mistake's kind
    (``config``, ``data``, ...); ``log_path``: the run's log, where the traceback is kept."""

    message: str
    fatal: bool = False
    traceback: str | None = None
    exit_code: int | None = None
    kind: str | None = None
    log_path: str | None = None


Event = Union[
    Hello,
    Status,
    Init,
    DatabasePath,
    ResumeState,
    EpochStart,
    Step,
    Sample,
    Eval,
    Checkpoint,
    EpochEnd,
    Log,
    Paused,
    Resumed,
    StepBarrier,
    SampleDisplayChanged,
    SettingChanged,
    SettingRefused,
    Finding,
    Complete,
    Error,
]

# ---------------------------------------------------------------- dashboard -> worker


class Pause(_Message):
    pass


class Resume(_Message):
    pass


class Stop(_Message):
    pass


class SaveCheckpoint(_Message):
    pass


class SetSampleDisplay(_Message):
    mode: SampleDisplay


class SetSetting(_Message):
    """Change ``key`` (a dotted path, as ``--set`` reads it) to ``value`` (TOML text) from the next
    step on; answered by ``setting_changed`` (once applied) or ``setting_refused``. ``id`` comes
    back in the answer, so the one who asked finds it among every viewer's frames."""

    key: str
    value: str
    source: SettingSource = "dashboard"
    id: str = ""
    # one ``grpo-tui set`` of several items: the worker checks them together, when all ``batch_size``
    # of ``batch`` have come, and applies all of them or none
    batch: str = ""
    batch_size: int = 1


Command = Union[Pause, Resume, Stop, SaveCheckpoint, SetSampleDisplay, SetSetting]

EVENT_TYPES: tuple[type, ...] = Event.__args__  # type: ignore[attr-defined]
COMMAND_TYPES: tuple[type, ...] = Command.__args__  # type: ignore[attr-defined]


# ---------------------------------------------------------------- supervisor <-> viewer (the control socket)
# A viewer receives ``welcome`` first (the supervisor has registered it), then the worker's frames,
# ``stderr_line`` for each stderr line and ``worker_exit`` when the worker ends; besides the
# worker's commands it may send ``restart`` (answer a crash countdown).


class Welcome(_Message):
    """The first line a viewer gets: it is registered and receives every frame from now on.

    The worker's frames before it are the first ``frames`` lines of ``run.jsonl`` from byte
    ``jsonl_offset`` (where this run began: the worker mirrors every frame there, in order). The
    next ``stderr_tail`` lines are the last of the ``stderr_lines`` stderr lines so far."""

    supervisor_pid: int
    worker_pid: int = 0
    jsonl_offset: int = 0
    frames: int = 0
    stderr_lines: int = 0
    stderr_tail: int = 0
    restarts: int = 0


class StderrLine(_Message):
    line: str


class WorkerExit(_Message):
    """The worker ended. ``restart_in_s`` is set when the supervisor restarts it after that many
    seconds (attempt ``attempt`` of ``max_restarts``); ``final`` when the run is over."""

    code: int
    reason: str = ""
    restart_in_s: float | None = None
    attempt: int = 0
    max_restarts: int = 0
    restart_on_crash: bool = True
    final: bool = False
    retry: bool = False  # a fixable mistake: a viewer may retry once it is fixed (``restart``), or end the run


class WorkerStarted(_Message):
    """The supervisor started a worker (its first frame, ``hello``, follows)."""

    pid: int


class Restart(_Message):
    """A viewer's answer to a crash countdown or a mistake: restart (retry) now, or cancel (the run ends)."""

    now: bool


SupervisorFrame = Union[Welcome, WorkerStarted, StderrLine, WorkerExit]
ViewerFrame = Union[Event, Welcome, WorkerStarted, StderrLine, WorkerExit]  # supervisor -> viewer
ViewerCommand = Union[Command, Restart]  # viewer -> supervisor
