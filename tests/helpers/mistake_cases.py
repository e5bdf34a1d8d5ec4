"""The user-mistakes suite's cases: each writes a small run (the shipped tiny-arith model, a few rows)
with one mistake a user makes, and names the one sentence the program must answer with.

``build(folder) -> Setup`` writes the run; ``sentence(folder)`` is the exact sentence (paths inside
``folder`` are part of it). Shared by the CLI half (``grpo-tui worker --plain``) and the dashboard
half (Pilot, the real worker) of tests/faults/test_user_mistakes.py.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_tui.protocol.config import TrainingConfig
from tests.helpers.read_only import make_read_only

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "examples" / "models" / "tiny-arith"
ROWS = [{"prompt": f"What is {a}+{b}?", "answer": str(a + b)} for a, b in [(1, 2), (3, 4), (5, 1), (2, 2)]]


@dataclass
class Setup:
    config: Path
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    undo: list[Callable[[], None]] = field(default_factory=list)  # run after the test (a lock, a mount)


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
    check: bool = False  # grpo-tui check finds it too, without training


def cfg(**kw: Any) -> Callable[[Path], Setup]:
    return lambda f: Setup(write_run(f, **kw))


def _config_error(f: Path, key_text: str) -> str:
    return f"{f / 'config.toml'}: {key_text}"


GOOD_REWARD = "def score(completions, **kwargs):\n    return [0.5] * len(completions)\n"
NO_PROMPT = [{"question": "What is 1+2?", "answer": "3"}] * 4
ON_ERROR = ('fix it, or set on_error = "skip" in its [[rewards]] table if it may fail now and then (a failed call '
            "then scores None and the run goes on)")
CHAT_ROWS = [{"prompt": [{"role": "user", "content": r["prompt"]}], "answer": r["answer"]} for r in ROWS]


def _locked(f: Path) -> Setup:
    config = write_run(f)
    out = f / "out"
    out.mkdir()
    import fcntl

    lock = open(out / ".worker.lock", "a+")  # a live run's lock: held until the test ends
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return Setup(config, undo=[lock.close])


def _read_only(f: Path) -> Setup:
    out = f / "out"
    out.mkdir()
    config = write_run(f)
    return Setup(config, undo=[make_read_only(out)])  # a bind mount as root (root writes any folder)


def _read_only_why() -> str:
    """As root the folder is a read-only mount; for another user, a folder without write permission."""
    return "is on a read-only file system" if os.geteuid() == 0 else "is read-only for this user"


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


def write_checkpoint(f: Path, weights: str, model: dict[str, str] | None = None) -> Path:
    """``out/checkpoint-2`` as a run leaves it: the state, and the weights (tiny-arith's) as ``weights``."""
    from grpo_tui.protocol.layout import TrainingState, write_state

    folder = f / "out" / "checkpoint-2"
    folder.mkdir(parents=True)
    shutil.copy(TINY / "model.safetensors", folder / weights)
    write_state(folder, TrainingState(step=2, epoch=0, step_in_epoch=2, kind="periodic", run_id=1, seed=0, dataset_size=4,
                                       dataset_hash="", config_digest="", total_steps=4, model=model or {}))
    return folder


def _full_checkpoint_with_lora(f: Path) -> Setup:
    write_checkpoint(f, "model.safetensors")
    return Setup(write_run(f, model={"lora": {"rank": 2}}))


def _lora_checkpoint_without_lora(f: Path) -> Setup:
    write_checkpoint(f, "adapters.safetensors")
    return Setup(write_run(f))


def _checkpoint_of_another_model(f: Path) -> Setup:
    write_checkpoint(f, "model.safetensors", {"path": "/elsewhere/other-model", "fingerprint": "0" * 32})
    return Setup(write_run(f))


def _damaged_checkpoint(f: Path) -> Setup:
    weights = write_checkpoint(f, "model.safetensors") / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])  # a copy cut short
    return Setup(write_run(f, checkpoint={"resume": str(weights.parent)}))


def _cut_short_gguf(f: Path) -> Path:
    """A GGUF file whose one tensor (1,024 float32 values) stops after 100 of its 4,096 bytes."""
    import struct

    def text(value: bytes) -> bytes:
        return struct.pack("<Q", len(value)) + value

    header = b"GGUF" + struct.pack("<IQQ", 3, 1, 1) + text(b"general.architecture") + struct.pack("<I", 8) + text(b"llama")
    header += text(b"token_embd.weight") + struct.pack("<IQIQ", 1, 1024, 0, 0)
    header += b"\0" * (-len(header) % 32)
    (path := f / "model.gguf").write_bytes(header + b"\0" * 100)
    return path


def _resume_flag_not_a_folder(f: Path) -> Setup:
    return Setup(write_run(f), args=["--resume", str(f / "nowhere")])


CASES: list[Case] = [
    # ---- config
    Case("unknown-key", "config", cfg(training={"learnin_rate": 0.1}),
         lambda f: _config_error(f, "training.learnin_rate: unknown key (expected one of: "
                                    f"{', '.join(TrainingConfig.__struct_fields__)})"), check=True),
    Case("bad-value", "config", cfg(grpo={"loss_type": "dpo"}),
         lambda f: _config_error(f, "grpo.loss_type: 'dpo' is not one of grpo, bnpo, dr_grpo, dapo, cispo, sapo, luspo, vespo"), check=True),
    Case("reused-generation-with-dynamic-sampling", "config",
         cfg(training={"steps_per_generation": 2}, grpo={"dynamic_sampling": True}),
         lambda f: _config_error(f, "training.steps_per_generation: 2 reuses one generation over several steps, while "
                                    "grpo.dynamic_sampling rolls out more prompts within a step: set steps_per_generation = 1 "
                                    "or dynamic_sampling = false"), check=True),
    Case("async-weights-too-rare", "config", cfg(**{"async": {"max_staleness": 1, "weight_sync_steps": 3}}),
         lambda f: _config_error(f, "async.weight_sync_steps: 3 needs max_staleness of at least 2: weights that arrive "
                                    "every 3 steps leave the generator that many steps behind; lower weight_sync_steps "
                                    "or raise max_staleness"), check=True),
    Case("missing-data-file", "data", cfg(data={"path": "no-such.jsonl"}),
         lambda f: _config_error(f, f"data.path: 'no-such.jsonl' does not exist (looked at {f / 'no-such.jsonl'})"), check=True),
    # ---- model
    Case("model-not-found", "model", cfg(model={"path": "/nonexistent/models/x"}),
         lambda f: _config_error(f, "model.path: '/nonexistent/models/x' does not exist (looked at /nonexistent/models/x)"), check=True),
    Case("model-folder-empty", "model", lambda f: Setup(write_run(f, model={"path": str(_mkdir(f / "empty"))})),
         lambda f: f"model folder '{f / 'empty'}' has no config.json, so it is not a model", check=True),
    Case("model-no-weights", "model", lambda f: Setup(write_run(f, model={"path": str(_no_weights(f))})),
         lambda f: f"model folder '{f / 'model'}' has no weights (no *.safetensors file); copy the model's weight files into it", check=True),
    Case("model-no-tokenizer", "model", lambda f: Setup(write_run(f, model={"path": str(_without(model_copy(f), "tokenizer*", "special_tokens_map.json"))})),
         lambda f: f"model folder '{f / 'model'}' has no tokenizer files (none of tokenizer.json, tokenizer.model, "
                   "tiktoken.model, vocab.json, vocab.txt, spiece.model); copy the tokenizer files that came with the "
                   "model into it", check=True),
    Case("model-weights-truncated", "model", lambda f: Setup(write_run(f, model={"path": str(_truncated(model_copy(f)))})),
         lambda f: f"model folder '{f / 'model'}' is damaged: model.safetensors is {4096:,} bytes where its header says "
                   f"{(TINY / 'model.safetensors').stat().st_size:,}; copy or download the model's weight files again (a copy "
                   "that was cut short, or a full disk while it was written)", check=True),
    Case("model-gguf-truncated", "model", lambda f: Setup(write_run(f, model={"path": str(_cut_short_gguf(f))})),
         lambda f: f"GGUF file '{f / 'model.gguf'}' is cut short ({(f / 'model.gguf').stat().st_size:,} bytes where its "
                   f"header says {(f / 'model.gguf').stat().st_size - 100 + 4096:,}); copy or download it again (a copy "
                   "that was cut short, or a full disk while it was written)", check=True),
    Case("unsupported-architecture", "model",
         lambda f: Setup(write_run(f, model={"path": str(model_copy(f, model_type="zebra_lm"))})),
         lambda f: f"model type 'zebra_lm' ({f / 'model' / 'config.json'}) is not supported by mlx-lm {_mlx_lm()}, which "
                   "has no mlx_lm.models.zebra_lm module; a newer mlx-lm may add it"),
    Case("hub-id-offline", "model", lambda f: Setup(write_run(f, model={"path": "nobody-here/no-such-model"}),
                                                     env={"HF_HUB_OFFLINE": "1", "HF_HOME": str(f / "hf")}),
         lambda f: f"model 'nobody-here/no-such-model' was not found: it is not a local folder, the Hugging Face cache "
                   f"({f / 'hf' / 'hub'}) has no snapshot of it, and HF_HUB_OFFLINE=1 forbids downloading it", check=True),
    Case("hub-id-unreachable", "model", lambda f: Setup(write_run(f, model={"path": "nobody-here/no-such-model"}),
                                                         env={"HF_ENDPOINT": "http://127.0.0.1:9", "HF_HOME": str(f / "hf"),
                                                              "HF_HUB_OFFLINE": "0"}),
         lambda f: f"model 'nobody-here/no-such-model' was not found: it is not a local folder, the Hugging Face cache "
                   f"({f / 'hf' / 'hub'}) has no snapshot of it, and the hub (http://127.0.0.1:9) cannot be reached to "
                   "download it; connect this machine to the network, or download the model elsewhere and set model.path "
                   "to its folder", check=True),
    Case("quantized-full-finetune", "model",
         lambda f: Setup(write_run(f, model={"path": str(model_copy(f, quantization={"group_size": 64, "bits": 4}))})),
         lambda f: f"model.lora: '{f / 'model'}' is a 4-bit quantized model, and full fine-tuning would train only its few "
                   "unquantized tensors; add a [model.lora] table to train LoRA adapters on the quantized base (QLoRA), or set "
                   "model.dequantize = true to fine-tune all of it in float32", check=True),
    # ---- data
    Case("empty-data-file", "data", lambda f: Setup(write_run(f, data={"path": str(_text(f / "d.jsonl", ""))})),
         lambda f: f"{f / 'd.jsonl'}: the dataset is empty", check=True),
    Case("blank-lines-data", "data", lambda f: Setup(write_run(f, data={"path": str(_text(f / "d.jsonl", "\n\n  \n"))})),
         lambda f: f"{f / 'd.jsonl'}: the dataset is empty", check=True),
    Case("no-prompt-column", "data", lambda f: Setup(write_run(f, data={"path": str(jsonl(f / "d.jsonl", NO_PROMPT))})),
         lambda f: f"{f / 'd.jsonl'}:1: no 'prompt' column (the row has 'question', 'answer')", check=True),
    Case("bad-json-line", "data",
         lambda f: Setup(write_run(f, data={"path": str(_text(f / "d.jsonl", json.dumps(ROWS[0]) + "\n{oops\n"))})),
         lambda f: f"{f / 'd.jsonl'}:2: not valid JSON (Expecting property name enclosed in double quotes: line 1 column 2 (char 1))", check=True),
    Case("mixed-formats", "data", lambda f: Setup(write_run(f, data={"path": str(jsonl(f / "d.jsonl", [
        ROWS[0], {"prompt": [{"role": "user", "content": "What is 1+1?"}], "answer": "2"}]))})),
         lambda f: f"{f / 'd.jsonl'}:2: the 'prompt' column is a list of chat messages (conversational format), but "
                   f"{f / 'd.jsonl'}:1 has a string (standard format); write every row of {f / 'd.jsonl'} in one format "
                   "(reward functions get prompts and completions in the data's format)", check=True),
    Case("eval-in-another-format", "data", lambda f: Setup(write_run(f, data={
        "path": str(jsonl(f / "d.jsonl", CHAT_ROWS)), "eval_path": str(jsonl(f / "e.jsonl", ROWS))}, eval={"every": 1, "limit": 2})),
         lambda f: f"the eval set {f / 'e.jsonl'} has string prompts (TRL's standard format), but the training set "
                   f"{f / 'd.jsonl'} has lists of chat messages (TRL's conversational format); the same reward functions "
                   f"score both, so convert {f / 'e.jsonl'} to the conversational format", check=True),
    Case("accuracy-without-answer-column", "data", lambda f: Setup(write_run(f, rewards='[[rewards]]\nname = "accuracy"\n',
        data={"path": str(jsonl(f / "d.jsonl", [{"prompt": r["prompt"], "solution": r["answer"]} for r in ROWS]))})),
         lambda f: f"the 'accuracy' reward compares completions with the 'answer' column, which no row of {f / 'd.jsonl'} "
                   "has (its columns: 'solution'); set data.answer_column to the column that holds the answers", check=True),
    Case("answer-column-nowhere", "data", cfg(data={"answer_column": "solution"}),
         lambda f: f"data.answer_column = 'solution', but no row of {f / 'data.jsonl'} has that column (its columns: "
                   "'answer'); set data.answer_column to the column that holds the answers", check=True),
    Case("row-not-an-object", "data", lambda f: Setup(write_run(f, data={"path": str(_text(f / "d.jsonl", json.dumps(ROWS[0]) + "\n[1, 2]\n"))})),
         lambda f: f"{f / 'd.jsonl'}:2: a row must be a JSON object, not list", check=True),
    Case("latin1-byte", "data", lambda f: Setup(write_run(f, data={"path": str(_bytes(f / "d.jsonl",
        (json.dumps(ROWS[0]) + "\n").encode() + b'{"prompt": "caf\xe9", "answer": "1"}\n'))})),
         lambda f: f"{f / 'd.jsonl'}:2: not UTF-8 (byte 0xe9 at column 16); save the file as UTF-8", check=True),
    Case("null-prompt", "data", lambda f: Setup(write_run(f, data={"path": str(jsonl(f / "d.jsonl",
        ROWS + [{"prompt": None, "answer": "1"}]))})),
         lambda f: f"{f / 'd.jsonl'}:5: the 'prompt' column is null; give every row a prompt (or remove the row)", check=True),
    Case("hub-dataset-unreachable", "data", lambda f: Setup(write_run(f, data={"path": "nobody-here/no-such-dataset"}),
                                                         env={"HF_ENDPOINT": "http://127.0.0.1:9", "HF_HOME": str(f / "hf")}),
         lambda f: "nobody-here/no-such-dataset: the Hugging Face Hub at http://127.0.0.1:9 cannot be reached (Connection "
                   "refused), and the Hugging Face cache has no copy of this dataset; connect to the network, or set "
                   "data.path to a local file (JSONL, JSON, CSV, Parquet or a saved dataset folder)"),
    # every row's shape, as the worker reads it (check too, every row)
    Case("prompt-empty-string", "data", lambda f: Setup(write_run(f, data={"path": str(jsonl(f / "d.jsonl", ROWS + [{"prompt": "", "answer": "1"}]))})),
         lambda f: f"{f / 'd.jsonl'}:5: the 'prompt' column is empty; give every row a prompt (or remove the row)", check=True),
    Case("prompt-empty-list", "data", lambda f: Setup(write_run(f, data={"path": str(jsonl(f / "d.jsonl", CHAT_ROWS + [{"prompt": [], "answer": "1"}]))})),
         lambda f: f"{f / 'd.jsonl'}:5: column 'prompt' must be a string or a list of {{role, content}} messages, not an empty list", check=True),
    Case("prompt-an-int", "data", lambda f: Setup(write_run(f, data={"path": str(jsonl(f / "d.jsonl", ROWS + [{"prompt": 7, "answer": "1"}]))})),
         lambda f: f"{f / 'd.jsonl'}:5: column 'prompt' must be a string or a list of {{role, content}} messages, not int 7", check=True),
    Case("prompt-role-bot", "data", lambda f: Setup(write_run(f, data={"path": str(jsonl(f / "d.jsonl", CHAT_ROWS[:3] + [{"prompt": [{"role": "bot", "content": "hi"}], "answer": "1"}]))})),
         lambda f: f"{f / 'd.jsonl'}:4: message 0 of column 'prompt' has the role 'bot'; the roles are system, user, assistant, tool "
                   "(fix the row, or map the role when you build the data)", check=True),
    Case("prompt-message-without-content", "data", lambda f: Setup(write_run(f, data={"path": str(jsonl(f / "d.jsonl", CHAT_ROWS[:3] + [{"prompt": [{"role": "user"}], "answer": "1"}]))})),
         lambda f: f"{f / 'd.jsonl'}:4: column 'prompt' must be a string or a list of {{role, content}} messages, not a list holding "
                   '{"role": "user"}', check=True),
    # ---- rewards
    Case("reward-file-missing", "reward", lambda f: Setup(write_run(f, rewards=f'[[rewards]]\nfunction = "{f}/nope.py:score"\n')),
         lambda f: _config_error(f, f"rewards[0].function: '{f}/nope.py' does not exist (looked at {f}/nope.py)"), check=True),
    Case("reward-syntax-error", "reward", lambda f: Setup(write_run(f, rewards=custom_reward(f, "import math\n\ndef score(completions, **kw)\n    return []\n"))),
         lambda f: f"reward {f / 'my_rewards.py'}:score: {f / 'my_rewards.py'}, line 3: syntax error (expected ':'); fix that line",
         check=True),
    Case("reward-import-fails", "reward", lambda f: Setup(write_run(f, rewards=custom_reward(f, "import no_such_module_here\n" + GOOD_REWARD))),
         lambda f: f"reward {f / 'my_rewards.py'}:score: cannot import {f / 'my_rewards.py'}: ModuleNotFoundError: No module "
                   "named 'no_such_module_here'", check=True),
    Case("reward-returns-a-number", "reward", lambda f: Setup(write_run(f, rewards=custom_reward(f, "def score(completions, **kw):\n    return 1.0\n"))),
         lambda f: "reward function 'score' returned a float, not a list of 4 numbers (one per completion)"),
    Case("reward-function-missing", "reward", lambda f: Setup(write_run(f, rewards=custom_reward(f, GOOD_REWARD, "scorer"))),
         lambda f: f"reward {f / 'my_rewards.py'}:scorer: 'scorer' is not a function in {f / 'my_rewards.py'}", check=True),
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
    # user code that fails while scoring: the user's to fix, the sentence names its line and on_error
    Case("reward-raises-on-chat-completions", "reward", lambda f: Setup(write_run(f, data={"path": str(jsonl(f / "d.jsonl", CHAT_ROWS))},
        rewards=custom_reward(f, "import re\n\ndef score(completions, **kw):\n    return [float(bool(re.match('<think>', c))) for c in completions]\n"))),
         lambda f: "reward function 'score' raised TypeError: expected string or bytes-like object, got 'list' at "
                   f"{f / 'my_rewards.py'}:4; {ON_ERROR}"),
    Case("reward-past-timeout", "reward", lambda f: Setup(write_run(f, rewards=custom_reward(f, "import time\n\ndef score(completions, **kw):\n"
        "    while True:\n        time.sleep(0.01)\n") + "timeout_s = 0.5\n")),
         lambda f: f"reward function 'score' did not return within timeout_s = 0.5 s (it was at {f / 'my_rewards.py'}:5); "
                   'make it faster or raise timeout_s, or set on_error = "skip" in its [[rewards]] table if it may hang '
                   "now and then (a timed-out call then scores None and the run goes on)"),
    Case("reward-sys-exit", "reward", lambda f: Setup(write_run(f, rewards=custom_reward(f, "import sys\n\ndef score(completions, **kw):\n    sys.exit(0)\n"))),
         lambda f: f"reward function 'score' called sys.exit(0) at {f / 'my_rewards.py'}:4, which would end the run; {ON_ERROR}"),
    Case("reward-keyboard-interrupt", "reward", lambda f: Setup(write_run(f, rewards=custom_reward(f, "def score(completions, **kw):\n    raise KeyboardInterrupt\n"))),
         lambda f: f"reward function 'score' raised KeyboardInterrupt at {f / 'my_rewards.py'}:2; {ON_ERROR}"),
    # the rule for names: columns first, then the extras; an argument that is neither is named
    Case("reward-argument-answer-without-column", "reward", lambda f: Setup(write_run(f,
        data={"path": str(jsonl(f / "d.jsonl", [{"prompt": r["prompt"], "solution": r["answer"]} for r in ROWS]))},
        rewards=custom_reward(f, "def correct(prompts, completions, answer, **kw):\n    return [float(a in c) for c, a in zip(completions, answer)]\n", "correct"))),
         lambda f: f"reward function 'correct' ({f / 'my_rewards.py'}:1) takes 'answer', which no row of {f / 'd.jsonl'} has "
                   "(its columns: 'solution'); name the parameter after the column that holds what it compares with, or "
                   "completion_answer for the completion's text after thinking (grpo-tui's extra of that name)", check=True),
    Case("reward-argument-no-such-column", "reward", lambda f: Setup(write_run(f,
        rewards=custom_reward(f, "import math\n\ndef correct(completions, answers, **kw):\n    return [0.0] * len(completions)\n", "correct"))),
         lambda f: f"reward function 'correct' ({f / 'my_rewards.py'}:3) takes 'answers', which is neither a column of "
                   f"{f / 'data.jsonl'} (its columns: 'answer') nor an argument grpo-tui passes (prompts, completions, "
                   "completion_ids, trainer_state, finish_reason, thinking, completion_answer, tool_calls, num_tokens, "
                   "prompt_tokens, num_tool_calls, failed_tool_calls, environments, log_metric, log_extra); name a column, or give the "
                   "parameter a default", check=True),
    Case("builtin-reward-unknown-param", "reward", lambda f: Setup(write_run(f, rewards='[[rewards]]\nname = "length"\nparams = {target_len = 5}\n')),
         lambda f: _config_error(f, "rewards[0].params: 'target_len' is not a parameter of the built-in reward 'length' (it "
                                    "takes: target, max_completion_length, min_length, max_length, unit)"), check=True),
    # ---- tools
    Case("tool-file-missing", "tool", lambda f: Setup(write_run(f, rewards=f'[[rewards]]\nname = "length"\n[[tools]]\nfunction = "{f}/nope.py:add"\n')),
         lambda f: _config_error(f, f"tools[0].function: '{f}/nope.py' does not exist (looked at {f}/nope.py)"), check=True),
    Case("tool-not-callable", "tool", lambda f: Setup(write_run(f, rewards=tool_table(f, "add = 3\n"))),
         lambda f: f"tools[0].function: {f / 'my_tools.py'}:add: 'add' is not a function in {f / 'my_tools.py'}", check=True),
    Case("tool-no-type-hints", "tool", lambda f: Setup(write_run(f, rewards=tool_table(f, 'def add(a, b):\n    """Add."""\n    return a + b\n'))),
         lambda f: f"tools[0].function: {f / 'my_tools.py'}: parameter 'a' of add has no type hint; annotate it (e.g. a: int "
                   "or str), since the model is told each parameter's type", check=True),
    Case("tool-no-docstring", "tool", lambda f: Setup(write_run(f, rewards=tool_table(f, "def add(a: int, b: int) -> int:\n    return a + b\n"))),
         lambda f: f"tools[0].function: add in {f / 'my_tools.py'} has no docstring; add one that says what the tool does "
                   "(the model reads it as the tool's description, and its Args: section describes each parameter)", check=True),
    Case("tool-undescribed-parameter", "tool",
         lambda f: Setup(write_run(f, rewards=tool_table(f, 'def add(a: int, b: int) -> int:\n    """Add.\n\n    Args:\n        a: One.\n    """\n    return a + b\n'))),
         lambda f: f"tools[0].function: {f / 'my_tools.py'}: parameter 'b' of add has no description in its docstring; add a "
                   "line 'b: what it is' under 'Args:' (the model reads it, and TRL needs it too)", check=True),
    Case("tool-syntax-error", "tool", lambda f: Setup(write_run(f, rewards=tool_table(f, "def add(a: int, b: int) -> int\n    return a + b\n"))),
         lambda f: f"tools[0].function: {f / 'my_tools.py'}:add: {f / 'my_tools.py'}, line 1: syntax error (expected ':'); "
                   "fix that line", check=True),
    # ---- output folder
    Case("output-locked", "output", _locked,
         lambda f: f"another worker is already training in {f / 'out'}; stop it first, or set checkpoint.output_dir to another folder"),
    Case("output-read-only", "output", _read_only,
         lambda f: f"checkpoint.output_dir: {f / 'out'} cannot be written ({f / 'out'} {_read_only_why()}); "
                   "choose a folder you can write to", check=True),
    Case("output-is-a-file", "output", _a_file,
         lambda f: f"checkpoint.output_dir: {f / 'out'} is a file, not a folder; name a folder (it is created if missing)", check=True),
    Case("output-under-proc", "output", cfg(checkpoint={"output_dir": "/proc/grpo-tui-run"}),
         lambda f: "checkpoint.output_dir: /proc/grpo-tui-run is under /proc, which cannot hold files; choose another folder", check=True),
    Case("model-inside-output-fresh-start", "output", _model_in_output,
         lambda f: f"model.path {f / 'out' / 'final'} is inside checkpoint.output_dir {f / 'out'}, whose checkpoints "
                   "resume = false moves aside into previous-.../; copy the model out of it, or set checkpoint.output_dir "
                   "to another folder", check=True),
    # ---- ranks, memory, LoRA
    Case("ranks-batch-not-dealt-out", "ranks", lambda f: Setup(write_run(f), args=["--ranks", "2"]),
         lambda f: "training.gradient_accumulation_steps: 1 micro-batches cannot be dealt out evenly to 2 ranks (the "
                   "micro-batch is the unit of distribution; use a multiple of the rank count)"),
    Case("ranks-zero", "ranks", lambda f: Setup(write_run(f), args=["--ranks", "0"]),
         lambda f: "distributed.ranks: 0 (from --ranks) must be at least 1"),
    Case("backend-not-installed", "ranks", lambda f: Setup(write_run(f, training={"gradient_accumulation_steps": 2}),
                                                            args=["--ranks", "2", "--backend", "mpi"],
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
                   "'self_attn.o_proj', 'self_attn.q_proj'", check=True),
    # ---- resume
    Case("resume-not-a-checkpoint", "resume", _not_a_checkpoint,
         lambda f: f"checkpoint.resume: {f / 'somewhere'} is not a complete checkpoint (no valid training_state.json); "
                   'name a checkpoint-N, final or emergency-N folder, or use "latest"', check=True),
    Case("resume-full-finetune-with-lora", "resume", _full_checkpoint_with_lora,
         lambda f: f"{f / 'out' / 'checkpoint-2'} is a full fine-tuning checkpoint (model.safetensors, no LoRA adapters), "
                   f"but {f / 'config.toml'} has a [model.lora] table; remove [model.lora] to resume it, or start again "
                   f"(`grpo-tui run {f / 'config.toml'} --set checkpoint.resume=false`: the old checkpoints are set aside)", check=True),
    Case("resume-lora-without-lora", "resume", _lora_checkpoint_without_lora,
         lambda f: f"{f / 'out' / 'checkpoint-2'} holds LoRA adapters (adapters.safetensors), but {f / 'config.toml'} has "
                   f"no [model.lora] table; add the one it was trained with to resume it, or start again (`grpo-tui run "
                   f"{f / 'config.toml'} --set checkpoint.resume=false`: the old checkpoints are set aside)", check=True),
    Case("resume-another-model", "model", _checkpoint_of_another_model,
         lambda f: f"{f / 'out' / 'checkpoint-2'} was trained from the model /elsewhere/other-model, but model.path is now "
                   f"{TINY} (another model); to train it, start again (`grpo-tui run {f / 'config.toml'} --set "
                   "checkpoint.resume=false`: the old checkpoints are set aside) or set another checkpoint.output_dir", check=True),
    Case("resume-damaged-checkpoint", "resume", _damaged_checkpoint,
         lambda f: f"checkpoint.resume: {f / 'out' / 'checkpoint-2'} is damaged (model.safetensors is cut short (100 bytes)); "
                   f"resume from another checkpoint or start again: `grpo-tui run {f / 'config.toml'} --set "
                   "checkpoint.resume=false`", check=True),
    Case("resume-flag-not-a-folder", "resume", _resume_flag_not_a_folder,
         lambda f: f"--resume: '{f / 'nowhere'}' is not a checkpoint folder; name a checkpoint-N, final or emergency-N "
                   'folder, or use "latest"'),
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


def _without(folder: Path, *patterns: str) -> Path:
    for pattern in patterns:
        for p in folder.glob(pattern):
            p.unlink()
    return folder


def _truncated(folder: Path) -> Path:
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:4096])  # a download cut short
    return folder


def _no_weights(f: Path) -> Path:
    dest = model_copy(f)
    for p in dest.glob("model*.safetensors*"):
        p.unlink()
    return dest
