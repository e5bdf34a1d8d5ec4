"""The user-mistakes suite's cases: each writes a small run (the shipped tiny-arith model, a few rows)
with one mistake a user makes, and names the one sentence the program must answer with.

``build(folder) -> Setup`` writes the run; ``sentence(folder)`` is the exact sentence (paths inside
``folder`` are part of it). Shared by the CLI half (``grpo-tui worker --plain``) and the dashboard
half (Pilot, the real worker) of tests/faults/test_user_mistakes.py.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_tui.protocol.config import TrainingConfig

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "examples" / "models" / "tiny-arith"
ROWS = [{"prompt": f"What is {a}+{b}?", "answer": str(a + b)} for a, b in [(1, 2), (3, 4), (5, 1), (2, 2)]]


@dataclass
class Setup:
    config: Path
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)


def jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def toml_value(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + "}"
    return json.dumps(value)


def write_run(folder: Path, *, rewards: str = '[[rewards]]\nname = "length"\n', top: str = "",
              **sections: dict[str, Any]) -> Path:
    """A 2-step run in ``folder`` (group 2, 8-token completions) with ``sections`` overriding keys."""
    values: dict[str, dict[str, Any]] = {
        "model": {"path": str(TINY)},
        "data": {"path": str(jsonl(folder / "data.jsonl", ROWS))},
        "grpo": {"group_size": 2},
        "generation": {"max_completion_length": 8},
        "training": {"batch_size": 2, "max_steps": 2, "seed": 0},
        "checkpoint": {"output_dir": str(folder / "out"), "save_every": 0},
    }
    for section, overrides in sections.items():
        values.setdefault(section, {}).update(overrides)
    text = top + rewards
    for section, table in values.items():
        body = "".join(f"{k} = {toml_value(v)}\n" for k, v in table.items() if not isinstance(v, dict) or k == "params")
        text += f"\n[{section}]\n" + body
        for k, v in table.items():
            if isinstance(v, dict):
                text += f"\n[{section}.{k}]\n" + "".join(f"{kk} = {toml_value(vv)}\n" for kk, vv in v.items())
    path = folder / "config.toml"
    path.write_text(text)
    return path


def model_copy(folder: Path, name: str = "model", **config_changes: Any) -> Path:
    """A copy of tiny-arith whose config.json has ``config_changes`` (None deletes a key)."""
    dest = folder / name
    shutil.copytree(TINY, dest)
    cfg = json.loads((dest / "config.json").read_text())
    for key, value in config_changes.items():
        if value is None:
            cfg.pop(key, None)
        else:
            cfg[key] = value
    (dest / "config.json").write_text(json.dumps(cfg))
    return dest


def reward_file(folder: Path, body: str, name: str = "my_rewards.py") -> Path:
    path = folder / name
    path.write_text(body)
    return path


def custom_reward(folder: Path, body: str, func: str = "score") -> str:
    path = reward_file(folder, body)
    return f'[[rewards]]\nfunction = "{path}:{func}"\n'


def tool_table(folder: Path, body: str, func: str = "add") -> str:
    path = folder / "my_tools.py"
    path.write_text(body)
    return f'[[rewards]]\nname = "length"\n[[tools]]\nfunction = "{path}:{func}"\n'


@dataclass
class Case:
    id: str
    kind: str  # what the mistake is about (protocol.outcome.MistakeKind), for the report
    build: Callable[[Path], Setup]
    sentence: Callable[[Path], str]
    code: int = 2
    dashboard: bool = True  # also through the dashboard (the config loads; the worker says it)
    root_can: bool = False  # root may do it anyway (writing a read-only folder): skipped as root


def cfg(**kw: Any) -> Callable[[Path], Setup]:
    return lambda f: Setup(write_run(f, **kw))


def _config_error(f: Path, key_text: str) -> str:
    return f"{f / 'config.toml'}: {key_text}"


GOOD_REWARD = "def score(completions, **kwargs):\n    return [0.5] * len(completions)\n"
NO_PROMPT = [{"question": "What is 1+2?", "answer": "3"}] * 4


def _locked(f: Path) -> Setup:
    config = write_run(f)
    out = f / "out"
    out.mkdir()
    import fcntl

    lock = open(out / ".worker.lock", "a+")  # a live run's lock: held while this test process lives
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    _HELD.append(lock)
    return Setup(config)


_HELD: list[Any] = []


def _read_only(f: Path) -> Setup:
    out = f / "out"
    out.mkdir()
    out.chmod(0o555)
    return Setup(write_run(f))


def _a_file(f: Path) -> Setup:
    (f / "out").write_text("not a folder")
    return Setup(write_run(f))


def _model_in_output(f: Path) -> Setup:
    out = f / "out"
    out.mkdir()
    model = shutil.copytree(TINY, out / "final")  # an earlier run's final weights, trained on afresh
    return Setup(write_run(f, model={"path": str(model)}, checkpoint={"output_dir": str(out), "resume": False}))


def _not_a_checkpoint(f: Path) -> Setup:
    (f / "somewhere").mkdir()
    return Setup(write_run(f, checkpoint={"resume": str(f / "somewhere")}))


def _resume_flag_not_a_folder(f: Path) -> Setup:
    return Setup(write_run(f), args=["--resume", str(f / "nowhere")])


CASES: list[Case] = [
    # ---- config
    Case("unknown-key", "config", cfg(training={"learnin_rate": 0.1}),
         lambda f: _config_error(f, "training.learnin_rate: unknown key (expected one of: "
                                    f"{', '.join(TrainingConfig.__struct_fields__)})")),
    Case("bad-value", "config", cfg(grpo={"loss_type": "dpo"}),
         lambda f: _config_error(f, "grpo.loss_type: 'dpo' is not one of grpo, bnpo, dr_grpo, dapo")),
    Case("missing-data-file", "data", cfg(data={"path": "no-such.jsonl"}),
         lambda f: _config_error(f, f"data.path: 'no-such.jsonl' does not exist (looked at {f / 'no-such.jsonl'})")),
    # ---- model
    Case("model-not-found", "model", cfg(model={"path": "/nonexistent/models/x"}),
         lambda f: _config_error(f, "model.path: '/nonexistent/models/x' does not exist (looked at /nonexistent/models/x)")),
    Case("model-folder-empty", "model", lambda f: Setup(write_run(f, model={"path": str(_mkdir(f / "empty"))})),
         lambda f: f"model folder '{f / 'empty'}' has no config.json, so it is not a model"),
    Case("model-no-weights", "model", lambda f: Setup(write_run(f, model={"path": str(_no_weights(f))})),
         lambda f: f"model folder '{f / 'model'}' has no weights (no *.safetensors file); copy the model's weight files into it"),
    Case("unsupported-architecture", "model",
         lambda f: Setup(write_run(f, model={"path": str(model_copy(f, model_type="zebra_lm"))})),
         lambda f: f"model type 'zebra_lm' ({f / 'model' / 'config.json'}) is not supported by mlx-lm {_mlx_lm()}, which "
                   "has no mlx_lm.models.zebra_lm module; a newer mlx-lm may add it"),
    Case("hub-id-offline", "model", lambda f: Setup(write_run(f, model={"path": "nobody-here/no-such-model"}),
                                                     env={"HF_HUB_OFFLINE": "1", "HF_HOME": str(f / "hf")}),
         lambda f: f"model 'nobody-here/no-such-model' was not found: it is not a local folder, the Hugging Face cache "
                   f"({f / 'hf' / 'hub'}) has no snapshot of it, and HF_HUB_OFFLINE=1 forbids downloading it"),
    Case("quantized-full-finetune", "model",
         lambda f: Setup(write_run(f, model={"path": str(model_copy(f, quantization={"group_size": 64, "bits": 4}))})),
         lambda f: f"model.lora: '{f / 'model'}' is a 4-bit quantized model, and full fine-tuning would train only its few "
                   "unquantized tensors; add a [model.lora] table to train LoRA adapters on the quantized base (QLoRA), or set "
                   "model.dequantize = true to fine-tune all of it in float32"),
    # ---- data
    Case("empty-data-file", "data", lambda f: Setup(write_run(f, data={"path": str(_text(f / "d.jsonl", ""))})),
         lambda f: f"{f / 'd.jsonl'}: the dataset is empty"),
    Case("blank-lines-data", "data", lambda f: Setup(write_run(f, data={"path": str(_text(f / "d.jsonl", "\n\n  \n"))})),
         lambda f: f"{f / 'd.jsonl'}: the dataset is empty"),
    Case("no-prompt-column", "data", lambda f: Setup(write_run(f, data={"path": str(jsonl(f / "d.jsonl", NO_PROMPT))})),
         lambda f: f"{f / 'd.jsonl'}:1: no 'prompt' column (the row has 'question', 'answer')"),
    Case("bad-json-line", "data",
         lambda f: Setup(write_run(f, data={"path": str(_text(f / "d.jsonl", json.dumps(ROWS[0]) + "\n{oops\n"))})),
         lambda f: f"{f / 'd.jsonl'}:2: not valid JSON (Expecting property name enclosed in double quotes: line 1 column 2 (char 1))"),
    Case("mixed-formats", "data", lambda f: Setup(write_run(f, data={"path": str(jsonl(f / "d.jsonl", [
        ROWS[0], {"prompt": [{"role": "user", "content": "What is 1+1?"}], "answer": "2"}]))})), lambda f: ""),
    Case("eval-in-another-format", "data", lambda f: Setup(write_run(f, data={
        "path": str(jsonl(f / "d.jsonl", [{"prompt": [{"role": "user", "content": r["prompt"]}], "answer": r["answer"]} for r in ROWS])),
        "eval_path": str(jsonl(f / "e.jsonl", ROWS))}, eval={"every": 1, "limit": 2})), lambda f: ""),
    Case("latin1-byte", "data", lambda f: Setup(write_run(f, data={"path": str(_bytes(f / "d.jsonl",
        (json.dumps(ROWS[0]) + "\n").encode() + b'{"prompt": "caf\xe9", "answer": "1"}\n'))})),
         lambda f: f"{f / 'd.jsonl'}:2: not UTF-8 (byte 0xe9 at column 16); save the file as UTF-8"),
    Case("null-prompt", "data", lambda f: Setup(write_run(f, data={"path": str(jsonl(f / "d.jsonl",
        ROWS + [{"prompt": None, "answer": "1"}]))})),
         lambda f: f"{f / 'd.jsonl'}:5: the 'prompt' column is null; give every row a prompt (or remove the row)"),
    # ---- rewards
    Case("reward-file-missing", "reward", lambda f: Setup(write_run(f, rewards=f'[[rewards]]\nfunction = "{f}/nope.py:score"\n')),
         lambda f: _config_error(f, f"rewards[0].function: '{f}/nope.py' does not exist (looked at {f}/nope.py)")),
    Case("reward-syntax-error", "reward", lambda f: Setup(write_run(f, rewards=custom_reward(f, "def score(completions, **kw)\n    return []\n"))), lambda f: ""),
    Case("reward-function-missing", "reward", lambda f: Setup(write_run(f, rewards=custom_reward(f, GOOD_REWARD, "scorer"))),
         lambda f: f"reward {f / 'my_rewards.py'}:scorer: 'scorer' is not a function in {f / 'my_rewards.py'}"),
    Case("reward-wrong-signature", "reward", lambda f: Setup(write_run(f, rewards=custom_reward(f, "def score(completions):\n    return [0.0] * len(completions)\n"))),
         lambda f: "reward function 'score' cannot take the arguments TRL passes (got an unexpected keyword argument 'prompts'); "
                   "give it the parameters it uses and **kwargs, e.g. def score(completions, **kwargs)"),
    Case("reward-wrong-count", "reward", lambda f: Setup(write_run(f, rewards=custom_reward(f, "def score(completions, **kw):\n    return [0.0]\n"))),
         lambda f: "reward function 'score' returned 1 scores for 4 completions; return one number (or None) per completion"),
    Case("reward-strings", "reward", lambda f: Setup(write_run(f, rewards=custom_reward(f, "def score(completions, **kw):\n    return ['1'] * len(completions)\n"))),
         lambda f: "reward function 'score' returned '1' for completion 0; return numbers (or None), not str"),
    Case("reward-overflow", "reward", lambda f: Setup(write_run(f, rewards=custom_reward(f, "def score(completions, **kw):\n    return [1e300] * len(completions)\n"))),
         lambda f: "reward function 'score' returned 1e+300 for completion 0, which overflows float32 (the training's precision, "
                   "at most 3.4e38); scale the reward down"),
    Case("builtin-reward-unknown-param", "reward", lambda f: Setup(write_run(f, rewards='[[rewards]]\nname = "length"\nparams = {target_len = 5}\n')),
         lambda f: _config_error(f, "rewards[0].params: 'target_len' is not a parameter of the built-in reward 'length' (it "
                                    "takes: target, max_completion_length)")),
    # ---- tools
    Case("tool-file-missing", "tool", lambda f: Setup(write_run(f, rewards=f'[[rewards]]\nname = "length"\n[[tools]]\nfunction = "{f}/nope.py:add"\n')),
         lambda f: _config_error(f, f"tools[0].function: '{f}/nope.py' does not exist (looked at {f}/nope.py)")),
    Case("tool-not-callable", "tool", lambda f: Setup(write_run(f, rewards=tool_table(f, "add = 3\n"))),
         lambda f: f"tools[0].function: {f / 'my_tools.py'}:add: 'add' is not a function in {f / 'my_tools.py'}"),
    Case("tool-no-type-hints", "tool", lambda f: Setup(write_run(f, rewards=tool_table(f, 'def add(a, b):\n    """Add."""\n    return a + b\n'))),
         lambda f: "tools[0].function: parameter 'a' of add has no type hint"),
    Case("tool-no-docstring", "tool", lambda f: Setup(write_run(f, rewards=tool_table(f, "def add(a: int, b: int) -> int:\n    return a + b\n"))), lambda f: ""),
    # ---- output folder
    Case("output-locked", "output", _locked,
         lambda f: f"another worker is already training in {f / 'out'}; stop it first, or set checkpoint.output_dir to another folder"),
    Case("output-read-only", "output", _read_only,
         lambda f: f"checkpoint.output_dir: {f / 'out'} cannot be written ({f / 'out'} is read-only for this user); choose a "
                   "folder you can write to", root_can=True),
    Case("output-is-a-file", "output", _a_file,
         lambda f: f"checkpoint.output_dir: {f / 'out'} is a file, not a folder; name a folder (it is created if missing)"),
    Case("output-under-proc", "output", cfg(checkpoint={"output_dir": "/proc/grpo-tui-run"}),
         lambda f: "checkpoint.output_dir: /proc/grpo-tui-run is under /proc, which cannot hold files; choose another folder"),
    Case("model-inside-output-fresh-start", "output", _model_in_output,
         lambda f: f"model.path {f / 'out' / 'final'} is inside checkpoint.output_dir {f / 'out'}, whose checkpoints "
                   "resume = false moves aside into previous-.../; copy the model out of it, or set checkpoint.output_dir "
                   "to another folder"),
    # ---- ranks, memory, LoRA
    Case("ranks-zero", "ranks", lambda f: Setup(write_run(f), args=["--ranks", "0"]),
         lambda f: "distributed.ranks: 0 (from --ranks) must be at least 1"),
    Case("backend-not-installed", "ranks", lambda f: Setup(write_run(f), args=["--ranks", "2", "--backend", "mpi"],
                                                            env={"PATH": str(Path(sys.executable).parent)}),
         lambda f: "distributed.backend: 'mpi' needs mpirun (Open MPI), which is not installed here; use the ring backend "
                   "(the default) or install Open MPI"),
    Case("memory-budget-too-small", "memory", cfg(training={"memory_limit_gb": 0.001}),
         lambda f: "training.memory_limit_gb: 0.001 GB is too little for this model: even with the memory switches a step "
                   "needs about 0.1 GB (the weights, gradients and AdamW state alone are 0.0 GB); the smallest budget that "
                   "works is memory_limit_gb = 0.2"),
    Case("lora-keys-match-nothing", "config", cfg(model={"lora": {"keys": ["self_attn.nothing"]}}),
         lambda f: "model.lora.keys: ['self_attn.nothing'] match no linear module of the last 2 blocks, so nothing would "
                   "train; use names like 'mlp.down_proj', 'mlp.gate_proj', 'mlp.up_proj', 'self_attn.k_proj', "
                   "'self_attn.o_proj', 'self_attn.q_proj'"),
    # ---- resume
    Case("resume-not-a-checkpoint", "resume", _not_a_checkpoint,
         lambda f: f"checkpoint.resume: {f / 'somewhere'} is not a complete checkpoint (no valid training_state.json); "
                   'name a checkpoint-N, final or emergency-N folder, or use "latest"'),
    Case("resume-flag-not-a-folder", "resume", _resume_flag_not_a_folder,
         lambda f: f"--resume: '{f / 'nowhere'}' is not a checkpoint folder; name a checkpoint-N, final or emergency-N "
                   'folder, or use "latest"', dashboard=False),
]


def _mlx_lm() -> str:
    from importlib.metadata import version

    return version("mlx-lm")


def _mkdir(path: Path) -> Path:
    path.mkdir()
    return path


def _text(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _bytes(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _no_weights(f: Path) -> Path:
    dest = model_copy(f)
    for p in dest.glob("model*.safetensors*"):
        p.unlink()
    return dest
