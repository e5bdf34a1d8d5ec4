"""``grpo-tui init --from-mlx-node FILE.json [DIR]``: a grpo-tui config from an mlx-node trainer config.

mlx-node's ``GRPOTrainerConfig`` (``@mlx-node/trl``, camelCase keys) is read as JSON; every key it
has is written out explicitly, the file's value or else mlx-node's default, so that no default of
ours replaces one of theirs silently. ``KEYS`` is the one table of how each key maps; docs/from-mlx-
node.md explains each row (a test holds the two together).
"""

from __future__ import annotations

import json
import math
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_tui.tui.init_templates import InitError


@dataclass(frozen=True)
class Key:
    ours: str | None  # "section.key" in grpo-tui's TOML, or None: no counterpart
    default: Any  # mlx-node's default: DEFAULT_GRPO_CONFIG's, else its engine's documented one (None: none)
    note: str = ""  # what differs, said in the written config


KEYS: dict[str, Key] = {
    "modelPath": Key("model.path", None),
    "modelName": Key(None, None, "a label for mlx-node's logs; grpo-tui names the model by model.path (its folder or hub id)"),
    "modelConfig": Key(None, None, "the architecture comes from the model folder's config.json"),
    "learningRate": Key("training.learning_rate", 1e-6,
                        "mlx-node's GRPO engine steps param - lr*grad; grpo-tui uses AdamW, where the same rate moves "
                        "the weights much further: start at or below mlx-node's value"),
    "gradientAccumulationSteps": Key("training.gradient_accumulation_steps", 1,
                                     "mlx-node sums N whole batches before one update; here batch_size holds all "
                                     "N batches' prompts and the step is split into N micro-batches (one update per step)"),
    "gradientClipNorm": Key("training.max_grad_norm", 1.0),
    "weightDecay": Key("training.weight_decay", 0.01),
    "numEpochs": Key("training.num_epochs", 1),
    "batchSize": Key("training.batch_size", 1, "times gradientAccumulationSteps: the prompts of one update"),
    "groupSize": Key("grpo.group_size", 4),
    "clipEpsilon": Key("grpo.epsilon", 0.2),
    "klCoef": Key("grpo.beta", 0.0),
    "lossType": Key("grpo.loss_type", "grpo"),
    "advantageNormalization": Key("grpo.scale_rewards", True, "true: divide by the group's std (\"group\"); false: \"none\""),
    "maxCompletionLength": Key("generation.max_completion_length", 256, "bounds generation and training alike, as mlx-node's"),
    "maxNewTokens": Key(None, None, "older mlx-node's name of maxCompletionLength, taken as it"),
    "maxCompletionLengthForTraining": Key(None, 1024, "grpo-tui trains every generated token (max_completion_length bounds both)"),
    "temperature": Key("generation.temperature", 0.8),
    "topP": Key("generation.top_p", 0.95),
    "topK": Key("generation.top_k", None),
    "repetitionPenalty": Key("generation.repetition_penalty", 1.1,
                             "above 1 the rollout takes mlx-lm's BatchGenerator instead of the fast compiled one; "
                             "repetition_stop_ngram/count end looping completions without it"),
    "presencePenalty": Key(None, None, "no presence penalty here: repetition_penalty, or repetition_stop_ngram/count"),
    "frequencyPenalty": Key(None, None, "no frequency penalty here: repetition_penalty, or repetition_stop_ngram/count"),
    "enableThinking": Key("generation.enable_thinking", True, "mlx-node's engine thinks unless told not to; grpo-tui's default is false"),
    "tools": Key(None, None, "tools are [[tools]] tables of Python functions (docs/agents.md): rewrite each JavaScript tool in Python"),
    "rewardType": Key(None, None, "rewards are [[rewards]] tables: built-ins by name, Python functions by file"),
    "rewardFunction": Key(None, None, "a JavaScript function: write it in Python as [[rewards]] function = \"rewards.py:name\""),
    "rewardModelPath": Key(None, None, "a judge model is [[rewards]] judge = { model = ..., prompt = ... }"),
    "rewardTimeout": Key("rewards.timeout_s", 60000, "milliseconds in mlx-node, seconds per [[rewards]] table here (0: no limit)"),
    "gradientClipValue": Key(None, 1.0, "no element-wise clamp here: max_grad_norm clips the global norm"),
    "optimizerType": Key(None, "adamw", "grpo-tui trains with AdamW only"),
    "adamwBeta1": Key("training.adam_beta1", 0.9),
    "adamwBeta2": Key("training.adam_beta2", 0.999),
    "adamwEps": Key("training.adam_epsilon", 1e-8),
    "gradientCheckpointing": Key("training.gradient_checkpointing", True,
                                 "mlx-node's engine checkpoints unless told not to: the same numbers, less memory, slower"),
    "lmHeadChunkSize": Key(None, 2, "sequences per LM-head chunk; grpo-tui's memory switches are training.logprob_batch_size, "
                                    "vocab_chunk_size and memory_limit_gb (docs/config.md, \"Memory\")"),
    "forwardChunkSize": Key("training.logprob_batch_size", None, "sequences per forward and backward pass"),
    "vocabChunkSize": Key(None, None, "mlx-node splits the vocabulary; grpo-tui's training.vocab_chunk_size splits the positions "
                                      "(docs/config.md, \"Memory\")"),
    "useParallelBatchGeneration": Key(None, None, "grpo-tui always generates the whole batch at once"),
    "logInterval": Key("logging.steps", 1),
    "saveInterval": Key("checkpoint.save_every", 100),
    "evalInterval": Key(None, 100, "with held-out rows (data.eval_path), add [eval] every = N: without them no evaluation runs"),
    "outputDir": Key(None, None, "written as checkpoint.output_dir under the new folder, so mlx-node's checkpoints are never resumed or pruned"),
    "logConsole": Key(None, True, "grpo-tui run shows the dashboard; grpo-tui worker --plain prints a line per step"),
    "logJsonl": Key(None, True, "every event always goes to <output_dir>/run.jsonl"),
    "runName": Key("name", None),
    "maxCheckpoints": Key("checkpoint.keep_last", 3),
    "device": Key(None, None, "MLX's default device runs (Metal on a Mac, the CPU or CUDA on Linux)"),
    "resumeFromCheckpoint": Key("checkpoint.resume", None, "an mlx-node checkpoint cannot be resumed here: this starts fresh"),
    "tuiMode": Key(None, None, "grpo-tui run is the dashboard; the worker always speaks its protocol to it"),
    "outputStore": Key("store.enabled", False, "grpo-tui always records every generation (outputStore.localPath is "
                                                "store.path); `grpo-tui browse` opens mlx-node's outputs.db too"),
}

# Older mlx-node names -> the newer key they are taken as.
ALIASES = {"maxNewTokens": "maxCompletionLength"}
# Keys without a counterpart whose value is what grpo-tui does anyway: not said to be left behind.
FITS = {"optimizerType": "adamw"}

SECTIONS = ("model", "data", "grpo", "generation", "training", "checkpoint", "logging", "store")


def convert(source: Path, data: str | None = None) -> tuple[str, list[str]]:
    """The TOML text for mlx-node config ``source``, and one line for each key that has no counterpart."""
    try:
        raw = json.loads(source.read_text())
    except FileNotFoundError:
        raise InitError(f"{source}: no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InitError(f"{source} is not an mlx-node config in JSON ({exc}): write the GRPOTrainerConfig object with JSON.stringify") from None
    if not isinstance(raw, dict):
        raise InitError(f"{source} holds a JSON {type(raw).__name__}, not an mlx-node GRPOTrainerConfig object")
    unknown = [name for name in raw if name not in KEYS]
    if unknown:
        raise InitError(f"{source}: {', '.join(map(repr, unknown))} {'is not a GRPOTrainerConfig key' if len(unknown) == 1 else 'are not GRPOTrainerConfig keys'} "
                        f"of mlx-node (known: {', '.join(KEYS)})")
    unmapped: list[str] = []
    said = {name: name for name in raw}  # the name the file gave each value under
    for old, new in ALIASES.items():
        if old in raw and new in raw:
            unmapped.append(f"{old}: {new} is given too, and taken")
        elif old in raw:
            raw[new], said[new] = raw[old], old
    values = {name: raw.get(name, key.default) for name, key in KEYS.items()}
    tables: dict[str, list[str]] = {s: [] for s in SECTIONS}
    top: list[str] = []
    rewards_lines: list[str] = []
    for name, key in KEYS.items():
        value, given = values[name], name in raw
        origin = f"mlx-node {said.get(name, name)} = {json.dumps(value)}" + ("" if given else " (its default)")
        if name in ALIASES:
            continue
        if key.ours is None:
            if given and FITS.get(name, unmapped) != value:
                unmapped.append(f"{name}: {key.note}")
            continue
        if value is None:
            continue
        written = _ours(name, value, values, source)
        section, _, field = key.ours.rpartition(".")
        line = f"{field} = {_toml(written)}  # {origin}" + (f"; {key.note}" if key.note else "")
        if section == "rewards":  # every [[rewards]] table below takes it
            rewards_lines.append(line)
        else:
            (tables[section] if section else top).append(line)
    store = raw.get("outputStore")
    if isinstance(store, dict) and store.get("localPath"):
        local = str((source.parent / str(store["localPath"])).expanduser().resolve())
        tables["store"].append(f"# path = {_toml(local)}  # mlx-node outputStore.localPath: that file holds mlx-node's "
                               "store, which grpo-tui only reads (browse); for one store of many runs name a new file")
    name = str(values["runName"] or "grpo")
    tables["data"] += [f"path = {_toml(data or 'train.jsonl')}  # mlx-node's config names no dataset: rows with "
                       "prompt (text or chat messages) and answer"]
    tables["checkpoint"] += [f"output_dir = {_toml('runs/' + _slug(name))}"
                             + (f"  # mlx-node outputDir = {json.dumps(values['outputDir'])}" if values["outputDir"] else "")]
    if values["modelPath"] is None:
        tables["model"] += ['path = "MODEL"  # mlx-node\'s config names no modelPath: an mlx-lm folder, GGUF file or hub id']
    text = (f"# Converted from {source.name} by `grpo-tui init --from-mlx-node` (docs/from-mlx-node.md).\n"
            "# Every mlx-node setting is written out, the file's value or else mlx-node's default.\n")
    text += "".join(line + "\n" for line in top)
    text += "".join(table + "".join(line + "\n" for line in rewards_lines) for table in REWARDS)
    for section in SECTIONS:
        if tables[section]:
            text += f"\n[{section}]\n" + "".join(line + "\n" for line in tables[section])
    return text, unmapped


# mlx-node's GSM8K example scores with correctnessReward (2.0 for the right <answer>) and format
# rewards (0.5 each); these are grpo-tui's built-ins closest to that pair.
REWARDS = (
    """
[[rewards]]
name = "accuracy"  # 1.0 for the dataset's answer (mlx-node's correctnessReward pays 2.0: the weight)
weight = 2.0
""",
    """
[[rewards]]
name = "xml_format"  # one <answer>...</answer> and nothing after it (mlx-node's strict/soft format rewards)
weight = 0.5
""",
)


def _ours(name: str, value: Any, values: dict[str, Any], source: Path) -> Any:
    if name == "modelPath":
        local = (source.parent / str(value)).expanduser()
        return str(local.resolve()) if local.exists() else str(value)  # else a hub id
    if name == "advantageNormalization":
        return "group" if value else "none"
    if name == "batchSize":
        return int(value) * int(values["gradientAccumulationSteps"] or 1)
    if name == "resumeFromCheckpoint":
        return False
    if name == "outputStore":
        return True
    if name == "rewardTimeout":
        return value / 1000
    return value


def _toml(value: Any) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        raise InitError(f"{value} is not a number a config can hold")
    return json.dumps(value)  # strings, numbers and booleans are written alike in JSON and TOML


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in name).strip("-") or "grpo"


def write_converted(source: str, directory: str | None, data: str | None) -> tuple[Path, list[str]]:
    """Write ``DIR/config.toml`` converted from ``source``; returns the folder and the unmapped keys."""
    path = Path(source).expanduser()
    dest = Path(directory if directory is not None else "from-mlx-node").expanduser()
    if (dest / "config.toml").exists():
        again = shlex.join(["grpo-tui", "init", "--from-mlx-node", source, "DIR", *(["--data", data] if data else [])])
        raise InitError(f"{dest / 'config.toml'} already exists: give a new folder (`{again}`)")
    data_path = str(Path(data).expanduser().resolve()) if data is not None else None
    text, unmapped = convert(path, data_path)
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "config.toml").write_text(text)
    return dest, unmapped
