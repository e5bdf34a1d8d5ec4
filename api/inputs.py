"""What ``GRPOTrainer`` takes, as the run's files and TOML tables: datasets (a ``datasets.Dataset``,
a pandas ``DataFrame``, a list of dicts, a path), reward functions and tools (pickled), PEFT's
``LoraConfig`` (``[model.lora]``, its ``target_modules`` matched by suffix as PEFT matches them)
and ``processing_class`` (the model's own tokenizer)."""

from __future__ import annotations

import json
import os
import re
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from grpo_tui.errors import TrainingError
from grpo_tui.protocol.config import BUILTIN_REWARDS
from grpo_tui.protocol.config_environments import VERIFIERS_REFUSED

Dataset = Any  # a datasets.Dataset, a pandas DataFrame, a list of dicts, or a path / hub id


def local_or_hub(value: str) -> str:
    path = Path(value).expanduser()
    return str(path.resolve()) if path.exists() else value


def reward_table(reward: Any, index: int) -> dict[str, Any]:
    if isinstance(reward, dict):
        return dict(reward)
    if isinstance(reward, str):
        if reward in BUILTIN_REWARDS:
            return {"name": reward}
        if ":" in reward:
            return {"function": reward}
        raise TrainingError(
            f"reward_funcs[{index}]: {reward!r} is not a built-in ({', '.join(BUILTIN_REWARDS)}); pass a function "
            "or 'file.py:func' (reward models are not supported)"
        )
    if callable(reward):
        return {"function": reward}
    raise TrainingError(f"reward_funcs[{index}]: {type(reward).__name__} is not a function, a built-in name or a table")


def with_pickles(tables: list[dict[str, Any]], file: Path, what: str, keep_names: bool = False) -> list[dict[str, Any]]:
    """Tables whose ``function`` is a Python function get ``"<file>:<name>"``, the functions pickled
    into ``file`` (cloudpickle: by value for ``__main__``, notebook cells and closures)."""
    import cloudpickle

    functions: dict[str, Any] = {}
    out = []
    for i, table in enumerate(tables):
        fn = table.get("function")
        if fn is None or isinstance(fn, str):
            if isinstance(fn, str):
                target, _, name = fn.rpartition(":")
                if target.endswith((".py", ".pkl")):
                    table = {**table, "function": f"{Path(target).expanduser().resolve()}:{name}"}
            out.append(table)
            continue
        name = getattr(fn, "__name__", "")
        if not isinstance(name, str) or not name.isidentifier():
            if keep_names:
                raise TrainingError(f"{what}[{i}]: a tool needs a named function (def ...): the model calls it by name")
            name = f"reward_{i}"
        base, n = name, 2
        while name in functions:
            if keep_names:
                raise TrainingError(f"{what}[{i}]: a second function named {name!r}")
            name, n = f"{base}_{n}", n + 1
        functions[name] = fn
        out.append({**table, "function": f"{file}:{name}"})
    if functions:
        try:
            data = cloudpickle.dumps(functions)
        except Exception as exc:  # noqa: BLE001 — e.g. a closure over a lock or an open file
            raise TrainingError(f"{what}: cannot send these functions to the worker ({type(exc).__name__}: {exc})") from None
        file.write_bytes(data)
    return out


def environment_table(factory: Any, out: Path) -> dict[str, Any]:
    """``[environment]`` for TRL's ``environment_factory``: a ``"file.py:Name"`` as it is, a class
    pickled into ``environment.pkl`` (cloudpickle: by value for ``__main__`` and notebook cells)."""
    if isinstance(factory, str):
        return {"class": with_pickles([{"function": factory}], out / "environment.pkl", "environment_factory")[0]["function"]}
    if isinstance(factory, dict):  # TRL's dict of factories: each row's `environment` column picks one
        if not factory or not all(isinstance(k, str) and (callable(f) or isinstance(f, str)) for k, f in factory.items()):
            raise TrainingError("environment_factory: a dict maps each environment's name to its class")
        tables = with_pickles([{"function": f} for f in factory.values()], out / "environment.pkl", "environment_factory")
        return {"classes": {k: t["function"] for k, t in zip(factory, tables)}}
    if not callable(factory):
        raise TrainingError(f"environment_factory: {type(factory).__name__} is not a class")
    [table] = with_pickles([{"function": factory}], out / "environment.pkl", "environment_factory", keep_names=True)
    return {"class": table["function"]}


def refuse_unsupported(optimizers: tuple[Any, Any], quantization_config: Any, environment: Any) -> None:
    """GRPOTrainer's arguments that the worker does not take, each refused in one sentence."""
    if environment is not None:
        raise TrainingError("environment: " + VERIFIERS_REFUSED)
    if any(o is not None for o in optimizers):
        raise TrainingError("optimizers: the worker builds its AdamW and schedule from args (optim, learning_rate, "
                            "lr_scheduler_type, ...); pass (None, None)")
    if quantization_config is not None:
        raise TrainingError("quantization_config: give a quantized mlx-community model instead (LoRA on it is QLoRA)")


def check_rollout_func(rollout_func: Any, environment_factory: Any) -> Any:
    """TRL's ``rollout_func``, checked: a function or ``"file.py:func"``, not beside ``environment_factory``."""
    if rollout_func is not None and environment_factory is not None:
        raise TrainingError("rollout_func: give rollout_func or environment_factory, not both (a rollout function "
                            "runs its own episodes)")
    if rollout_func is not None and not (callable(rollout_func) or isinstance(rollout_func, str)):
        raise TrainingError(f"rollout_func: {type(rollout_func).__name__} is not a function or a 'file.py:func' string")
    return rollout_func


# ---------------------------------------------------------------- datasets


def with_prompts(dataset: Dataset) -> Dataset:
    """Rows without a ``prompt`` get TRL's empty user message, which ``reset`` fills (an
    environment's own data: TRL's multi-environment rows hold only their ``environment``)."""
    if isinstance(dataset, (str, os.PathLike)) or not isinstance(dataset, Iterable):
        return dataset
    empty = [{"role": "user", "content": ""}]
    return [row if not isinstance(row, dict) or "prompt" in row else {"prompt": empty, **row} for row in dataset]


def dataset_file(dataset: Dataset, file: Path, what: str) -> str:
    """A path or hub id as it is; rows into ``file`` (JSONL), or into ``file`` with ``.parquet`` when
    a value has no JSON form (a datetime, bytes, a Decimal): Parquet keeps its type, so the reward
    functions get what a ``datasets.Dataset`` of the same rows gives TRL's."""
    if isinstance(dataset, (str, os.PathLike)):
        return local_or_hub(str(dataset))
    if _is_dataframe(dataset):
        import datasets

        dataset = datasets.Dataset.from_pandas(dataset, preserve_index=False)
    if isinstance(dataset, dict) or not isinstance(dataset, Iterable):
        raise TrainingError(
            f"{what}: {type(dataset).__name__} — pass a datasets.Dataset (one split), a pandas DataFrame, a list of "
            "dicts or a path"
        )
    rows = []
    for i, row in enumerate(dataset):
        if not isinstance(row, dict):
            raise TrainingError(f"{what}[{i}]: {type(row).__name__} is not a dict (a row with a 'prompt')")
        rows.append(row)
    try:
        text = "".join(json.dumps(row, ensure_ascii=False, default=_json_value) + "\n" for row in rows)
    except _NoJson:
        return _parquet(dataset, rows, file.with_suffix(".parquet"), what)
    file.with_suffix(".parquet").unlink(missing_ok=True)
    if not file.exists() or file.read_text(encoding="utf-8") != text:
        file.write_text(text, encoding="utf-8")
    return str(file)


class _NoJson(TypeError):
    pass


def _json_value(value: Any) -> Any:
    """numpy scalars and arrays (a DataFrame's or a Dataset's row holds them) as JSON values; other
    values without a JSON form go to Parquet instead (``_NoJson``), never silently into strings."""
    numpy = type(value).__module__.startswith("numpy")
    if numpy and getattr(getattr(value, "dtype", None), "kind", None) in ("m", "M"):
        raise _NoJson(type(value).__name__)  # datetime64/timedelta64: tolist() makes nanoseconds plain ints
    if numpy and callable(getattr(value, "tolist", None)):
        return value.tolist()
    raise _NoJson(type(value).__name__)


def _parquet(dataset: Any, rows: list[dict[str, Any]], file: Path, what: str) -> str:
    import datasets

    try:
        table = dataset if isinstance(dataset, datasets.Dataset) else datasets.Dataset.from_list(rows)
        table.to_parquet(str(file))
    except Exception as exc:  # noqa: BLE001 — pyarrow's own message names the value
        raise TrainingError(f"{what}: its rows cannot be written for the worker ({type(exc).__name__}: {exc}); "
                            "give values that JSON or Parquet can hold") from None
    return str(file)


def _is_dataframe(value: Any) -> bool:
    return type(value).__name__ == "DataFrame" and type(value).__module__.startswith("pandas")


# ---------------------------------------------------------------- PEFT


_PEFT_REFUSED: dict[str, Any] = {"use_dora": False, "use_rslora": False, "modules_to_save": None, "bias": "none",
                                 "layers_pattern": None, "rank_pattern": {}, "alpha_pattern": {},
                                 "target_parameters": None, "lora_bias": False, "trainable_token_indices": None,
                                 "layer_replication": None, "use_qalora": False}
# B starts at zero with these, so the adapted model starts as the base one, as mlx-lm's LoRA does
_PEFT_INITS = (True, "gaussian")
_PEFT_TASKS = (None, "CAUSAL_LM")


def lora_table(peft: Any, model_path: str) -> dict[str, Any]:
    """``peft.LoraConfig`` (or a dict of its names, or ``[model.lora]``'s own) as ``[model.lora]``:
    every block of the model, as PEFT adapts; ``target_modules`` matched by suffix on the model's
    module names (``"q_proj"`` is ``self_attn.q_proj``), a string as PEFT's regular expression,
    ``"all-linear"`` every linear module of a block; None: PEFT's ``q_proj``, ``v_proj``."""
    kind = getattr(getattr(peft, "peft_type", None), "value", getattr(peft, "peft_type", None))
    if not isinstance(peft, dict) and kind not in (None, "LORA"):  # a PromptTuningConfig is not LoRA with defaults
        raise TrainingError(f"peft_config: {type(peft).__name__} ({kind}) is not supported here; LoRA (LoraConfig) is")
    items = dict(peft) if isinstance(peft, dict) else {k: v for k, v in vars(peft).items() if not k.startswith("_")}
    task = getattr(items.get("task_type"), "value", items.get("task_type"))
    if task not in _PEFT_TASKS:
        raise TrainingError(f"peft_config: task_type {task!r} — only CAUSAL_LM (a language model) trains here")
    for key, allowed in _PEFT_REFUSED.items():
        value = items.get(key, allowed)
        if value not in (allowed, None, {}, [], False) or (key == "bias" and value not in ("none", None)):
            raise TrainingError(f"peft_config: {key}={value!r} is not supported here (plain LoRA is)")
    if items.get("init_lora_weights", True) not in _PEFT_INITS:
        raise TrainingError(f"peft_config: init_lora_weights={items['init_lora_weights']!r} is not supported here; "
                            "give True or \"gaussian\" (the adapter starts at zero)")
    own = {"rank", "alpha", "dropout", "keys", "layers"}
    table: dict[str, Any] = {k: v for k, v in items.items() if k in own and v is not None}
    names = {"r": "rank", "lora_alpha": "alpha", "lora_dropout": "dropout"}
    for key, name in names.items():
        if items.get(key) is not None:
            table[name] = items[key]
    if "rank" in table:
        table["rank"] = int(table["rank"])
    is_peft = any(k in items for k in ("r", "lora_alpha", "target_modules", "task_type"))
    if is_peft:
        table.setdefault("layers", _peft_layers(items.get("layers_to_transform"), model_path))
        keys = _match_modules(items.get("target_modules"), model_path)
        if keys is not None and items.get("exclude_modules"):
            keys = _exclude(keys, items["exclude_modules"])
        if keys is not None:
            table["keys"] = keys
    return table


def _peft_layers(value: Any, model_path: str) -> int:
    if value is None:
        return -1  # PEFT adapts every block
    wanted = sorted({value} if isinstance(value, int) else set(value))
    count = _block_count(model_path)
    if count is not None and wanted == list(range(count - len(wanted), count)):
        return len(wanted)  # the last N blocks: [model.lora] layers = N
    raise TrainingError(f"peft_config: layers_to_transform={value!r} — only the last N blocks can be chosen here "
                        f"(e.g. {list(range(max((count or 2) - 2, 0), count or 2))})")


def _match_modules(targets: Any, model_path: str) -> list[str] | None:
    modules = _block_linears(model_path)
    if targets is None:
        targets = ["q_proj", "v_proj"]  # PEFT's default for Llama- and Qwen-style models
        if modules is not None and not any(_suffix(m, t) for m in modules for t in targets):
            return None  # another architecture: mlx-lm's own default
    if modules is None:  # not a local folder (a hub id not yet downloaded): names as given
        return sorted(targets) if not isinstance(targets, str) else None if targets == "all-linear" else [targets]
    if isinstance(targets, str) and re.fullmatch(r"[A-Za-z_][\w.]*", targets) and targets != "all-linear":
        targets = [targets]  # one module name (TRL's ModelConfig makes a one-name list a string)
    if isinstance(targets, str):
        if targets == "all-linear":
            return sorted(modules)
        pattern = re.compile(targets)
        keys = [m for m in modules if pattern.fullmatch(m) or pattern.fullmatch(f"model.layers.0.{m}")]
    else:
        keys = [m for m in modules if any(_suffix(m, str(t)) for t in targets)]
    if not keys:
        raise TrainingError(f"peft_config: target_modules {targets!r} match no linear module of the model's blocks "
                            f"({', '.join(sorted(modules))})")
    return sorted(keys)


def _exclude(keys: list[str], excluded: Any) -> list[str]:
    """PEFT's ``exclude_modules``: names by suffix, or a string as a regular expression."""
    if isinstance(excluded, str):
        pattern = re.compile(excluded)
        left = [k for k in keys if not (pattern.fullmatch(k) or pattern.fullmatch(f"model.layers.0.{k}"))]
    else:
        left = [k for k in keys if not any(_suffix(k, str(e)) for e in excluded)]
    if not left:
        raise TrainingError(f"peft_config: exclude_modules {excluded!r} leaves no module of target_modules to adapt")
    return left


def _suffix(module: str, target: str) -> bool:
    return module == target or module.endswith("." + target)


def _weights(model_path: str) -> dict[str, list[int]] | None:
    """Every tensor's name and shape, from the safetensors headers of a local model folder."""
    folder = Path(model_path)
    files = sorted(folder.glob("*.safetensors")) if folder.is_dir() else []
    if not files:
        return None
    shapes: dict[str, list[int]] = {}
    for file in files:
        with open(file, "rb") as f:
            (size,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(size))
        shapes.update({k: v["shape"] for k, v in header.items() if k != "__metadata__"})
    return shapes


_BLOCK = re.compile(r"^(?:.*\.)?layers\.(\d+)\.(.+)\.weight$")


def _block_linears(model_path: str) -> set[str] | None:
    weights = _weights(model_path)
    if weights is None:
        return None
    return {match.group(2) for name, shape in weights.items() if (match := _BLOCK.match(name)) and len(shape) == 2}


def _block_count(model_path: str) -> int | None:
    weights = _weights(model_path)
    if weights is None:
        return None
    blocks = {int(match.group(1)) for name in weights if (match := _BLOCK.match(name))}
    return max(blocks) + 1 if blocks else None


# ---------------------------------------------------------------- processing_class


def check_processing_class(tokenizer: Any, model_path: str) -> None:
    """The worker loads the model folder's own tokenizer: a path to it or a tokenizer loaded from it
    is that one (a changed ``pad_token`` does not matter: the worker pads itself); another one, or
    a changed chat template, is refused in one sentence rather than ignored."""
    if tokenizer is None:
        return
    if isinstance(tokenizer, (str, os.PathLike)):
        source = str(tokenizer)
    else:
        source = str(getattr(tokenizer, "name_or_path", "") or "")
        if not hasattr(tokenizer, "encode") and not hasattr(getattr(tokenizer, "tokenizer", None), "encode"):
            raise TrainingError(f"processing_class: {type(tokenizer).__name__} is not a tokenizer or a path to one")
    if source and local_or_hub(source) != local_or_hub(model_path) and not _same_tokenizer(tokenizer, model_path):
        raise TrainingError(f"processing_class: a tokenizer from {source!r}, not the model's ({model_path}); the "
                            "worker uses the model folder's own tokenizer — save yours into the model folder")
    template = getattr(tokenizer, "chat_template", None)
    config_file = Path(model_path) / "tokenizer_config.json"
    if isinstance(template, str) and config_file.exists():
        own = json.loads(config_file.read_text(encoding="utf-8")).get("chat_template")
        jinja = Path(model_path) / "chat_template.jinja"
        own = own if own is not None or not jinja.exists() else jinja.read_text(encoding="utf-8")
        if own is not None and own != template:
            raise TrainingError("processing_class: its chat_template differs from the model folder's; the worker "
                                "uses the folder's — save the tokenizer into the model folder (save_pretrained)")


def _same_tokenizer(tokenizer: Any, model_path: str) -> bool:
    """Loaded from elsewhere, yet the model folder's tokenizer: the same vocabulary and chat template
    (an mlx-community conversion's tokenizer beside the original model's, say)."""
    if not Path(model_path).is_dir():
        return False
    try:
        from transformers import AutoTokenizer

        theirs = (AutoTokenizer.from_pretrained(str(tokenizer), local_files_only=True)
                  if isinstance(tokenizer, (str, os.PathLike)) else tokenizer)
        ours = AutoTokenizer.from_pretrained(model_path, local_files_only=True)
        return bool(theirs.get_vocab() == ours.get_vocab() and theirs.chat_template == ours.chat_template)
    except Exception:  # noqa: BLE001 — not loadable here: not shown to be the same
        return False


__all__ = ["check_processing_class", "check_rollout_func", "dataset_file", "environment_table", "local_or_hub", "lora_table", "refuse_unsupported", "reward_table",
           "with_pickles", "with_prompts"]
