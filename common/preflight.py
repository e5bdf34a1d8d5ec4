"""What can be checked about a run before anything loads, by the worker and by ``grpo-tui check``
(README, "When something goes wrong"): an output folder that cannot hold a run, a model that lives
inside an output folder whose checkpoints a fresh start moves aside, a quantized model with full
fine-tuning, LoRA keys that match no module (read from the weight files' headers, no weights
loaded), reward and tool files that do not compile or tools without type hints or a docstring
(read as source, never run), the data's first rows (``data_check``), and a checkpoint to resume
that is of the other kind (LoRA or full) or of another model (``resume_check``). Each problem is one
sentence naming the key, file or line and what to do; the worker builds the same sentences here.

Only the standard library: ``grpo-tui check`` runs without MLX.
"""

from __future__ import annotations

import ast
import json
import os
import re
from pathlib import Path
from typing import Any

from grpo_tui.common.data_check import ALL_ROWS, data_problems, first_rows
from grpo_tui.common.disk_space import too_little_space
from grpo_tui.common.distributed import rank_count, undealt
from grpo_tui.common.gguf_check import cut_short_sentence, gguf_damage
from grpo_tui.common.install_hint import not_installed
from grpo_tui.common.resume_check import damage, damaged, fit_problem, latest_whole
from grpo_tui.common.reward_names import argument_problem
from grpo_tui.common.run_folder import ownership_problem
from grpo_tui.protocol.config import Config, ConfigError, LoraConfig, ModelConfig
from grpo_tui.protocol.layout import STATE_FILE, parse_checkpoint_dir_name, read_state

_NO_FILES = ("/proc", "/sys", "/dev")  # virtual file systems: nothing can be saved there


def output_dir_problem(output_dir: str | Path, name: str = "checkpoint.output_dir") -> str | None:
    """Why ``checkpoint.output_dir`` (or what ``name`` says) cannot hold a run, or None."""
    path = Path(output_dir)
    key = f"{name}: {path}"
    if path.exists() and not path.is_dir():
        return f"{key} is a file, not a folder; name a folder (it is created if missing)"
    resolved = path.resolve()
    for root in _NO_FILES:
        if resolved == Path(root) or str(resolved).startswith(root + "/"):
            return f"{key} is under {root}, which cannot hold files; choose another folder"
    existing = resolved
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        return f"{key} cannot be created: {existing} is a file; choose another folder"
    if not os.access(existing, os.W_OK | os.X_OK):
        why = "is on a read-only file system" if _read_only_mount(existing) else "is read-only for this user"
        return f"{key} cannot be written ({existing} {why}); choose a folder you can write to"
    return None


def _read_only_mount(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def model_inside_output_problem(config: Config) -> str | None:
    """A fresh start (``resume = false``) moves the output folder's checkpoints aside: a model that
    is one of them (``runs/x/final``) would be moved away from under ``model.path``."""
    if config.checkpoint.resume is not False:
        return None
    model, out = Path(config.model.path).resolve(), Path(config.checkpoint.output_dir).resolve()
    if out not in model.parents:
        return None
    top = model.relative_to(out).parts[0]
    if parse_checkpoint_dir_name(top) is None:
        return None
    return (f"model.path {config.model.path} is inside checkpoint.output_dir {config.checkpoint.output_dir}, whose "
            "checkpoints resume = false moves aside into previous-.../; copy the model out of it, or set "
            "checkpoint.output_dir to another folder")


def not_a_checkpoint(resume: str) -> str:
    return (f"checkpoint.resume: {resume} is not a complete checkpoint (no valid {STATE_FILE}); name a checkpoint-N, "
            'final or emergency-N folder, or use "latest"')


def resume_problem(config: Config, config_path: str) -> str | None:
    """``checkpoint.resume`` naming a folder that is not a checkpoint or a damaged one, or the
    checkpoint a resume picks not fitting the config (``resume_check.fit_problem``): ``resume_check``
    decides, as in the worker."""
    resume = config.checkpoint.resume
    if resume is False:
        return None
    if resume == "latest":
        found = latest_whole(Path(config.checkpoint.output_dir))
    else:
        path = Path(str(resume))
        if (state := read_state(path)) is None:
            return not_a_checkpoint(str(resume))
        if (why := damage(path)) is not None:
            return damaged(str(resume), why, config_path)
        found = path, state
    if found is None:
        return None
    return fit_problem(*found, config.model.lora is not None, config.model.path, config_path)


def folder_problems(config: Config) -> list[str]:
    out = config.checkpoint.output_dir
    first = output_dir_problem(out) or ownership_problem(out) or too_little_space(out)
    return [p for p in (first, model_inside_output_problem(config)) if p]


# ---------------------------------------------------------------- the model


def quantization(model_config: dict[str, Any]) -> dict[str, Any] | None:
    """mlx's quantization block (``{"bits", "group_size", ...}``) or a Hugging Face one, if any."""
    found = model_config.get("quantization") or model_config.get("quantization_config")
    return found if isinstance(found, dict) else None


def quantized_full_finetune(model: ModelConfig, model_config: dict[str, Any]) -> ConfigError | None:
    """Full fine-tuning of a quantized model would train only its few unquantized tensors (norms,
    biases): a config error that names the fix."""
    q = quantization(model_config)
    if q is None or model.lora is not None or model.dequantize:
        return None
    bits = q.get("bits")
    kind = f"{bits}-bit quantized" if bits else "quantized"
    return ConfigError(
        "model.lora",
        f"{model.path!r} is a {kind} model, and full fine-tuning would train only its few unquantized "
        "tensors; add a [model.lora] table to train LoRA adapters on the quantized base (QLoRA), or set "
        "model.dequantize = true to fine-tune all of it in float32",
    )


def lora_keys_match_nothing(lora: LoraConfig, blocks: int, names: list[str]) -> ConfigError:
    """``names``: the linear modules of the last block, as mlx-lm names them inside a block."""
    return ConfigError(
        "model.lora.keys", f"{list(lora.keys or [])} match no linear module of the last {blocks} blocks, so nothing "
        f"would train; use names like {', '.join(repr(n) for n in sorted(names)[:6])}",
    )


_BLOCK_WEIGHT = re.compile(r"(?:^|\.)layers\.(\d+)\.(.+)\.weight$")


def _tensor_shapes(folder: Path) -> dict[str, list[int]]:
    """Every tensor's name and shape, from the safetensors headers (no weights read)."""
    shapes: dict[str, list[int]] = {}
    for file in sorted(folder.glob("*.safetensors")):
        with open(file, "rb") as handle:
            length = int.from_bytes(handle.read(8), "little")
            header = json.loads(handle.read(length))
        shapes.update({k: v.get("shape", []) for k, v in header.items() if k != "__metadata__" and isinstance(v, dict)})
    return shapes


def lora_keys_problem(model: ModelConfig) -> ConfigError | None:
    """``[model.lora] keys`` that match no module of the blocks that get adapters, read from a
    local model folder's weight headers (a hub id or a GGUF file: the worker checks at load)."""
    lora, folder = model.lora, Path(model.path)
    if lora is None or lora.keys is None or not (folder / "config.json").is_file():
        return None
    blocks: dict[int, dict[str, int]] = {}
    try:
        for name, shape in _tensor_shapes(folder).items():
            if (found := _BLOCK_WEIGHT.search(name)) is not None:
                blocks.setdefault(int(found.group(1)), {})[found.group(2)] = len(shape)
    except (OSError, ValueError, TypeError, AttributeError):
        return None  # the worker names a damaged weight file
    if not blocks:
        return None
    count = max(blocks) + 1
    adapted = count if lora.layers == -1 else min(lora.layers, count)
    candidates = {n for i in range(count - adapted, count) for n, ndim in blocks.get(i, {}).items() if ndim >= 2}
    if candidates & set(lora.keys):
        return None
    return lora_keys_match_nothing(lora, adapted, [n for n, ndim in blocks.get(count - 1, {}).items() if ndim == 2])


def no_config_json(folder: Path) -> str:
    return f"model folder {str(folder)!r} has no config.json, so it is not a model"


def no_weights(folder: Path) -> str:
    return f"model folder {str(folder)!r} has no weights (no *.safetensors file); copy the model's weight files into it"


HUB_TIMEOUT_S = 5.0  # how long check waits for the hub to answer before calling it unreachable
# What a Hugging Face tokenizer is read from (mlx-lm's own download patterns hold these)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tiktoken.model", "vocab.json", "vocab.txt", "spiece.model")


def model_files_problem(folder: Path) -> str | None:
    """A local model folder (with config.json) without tokenizer files, or with a weight file cut
    short or longer than its header says (``resume_check.damage``: headers only, no weights read)."""
    if not any((folder / name).is_file() for name in TOKENIZER_FILES) and not any(folder.glob("*.tiktoken")):
        return (f"model folder {str(folder)!r} has no tokenizer files (none of {', '.join(TOKENIZER_FILES)}); copy "
                "the tokenizer files that came with the model into it")
    if (why := damage(folder)) is not None:
        return (f"model folder {str(folder)!r} is damaged: {why}; copy or download the model's weight files "
                "again (a copy that was cut short, or a full disk while it was written)")
    return None


def offline_and_not_cached(path: str, cache: str) -> str:
    return (f"model {path!r} was not found: it is not a local folder, the Hugging Face cache ({cache}) "
            "has no snapshot of it, and HF_HUB_OFFLINE=1 forbids downloading it")


def hub_cache() -> Path:
    """The Hugging Face hub cache, found as huggingface_hub finds it (this module imports no more
    than the standard library)."""
    if cache := os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE"):
        return Path(cache).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface")
    return Path(home).expanduser() / "hub"


def hub_offline() -> bool:
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return value.upper() in ("1", "ON", "YES", "TRUE")


def unreachable_and_not_cached(path: str, cache: str, endpoint: str) -> str:
    return (f"model {path!r} was not found: it is not a local folder, the Hugging Face cache ({cache}) has no "
            f"snapshot of it, and the hub ({endpoint}) cannot be reached to download it; connect this machine to the "
            "network, or download the model elsewhere and set model.path to its folder")


def hub_endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")


def hub_unreachable(timeout_s: float = HUB_TIMEOUT_S) -> bool:
    """True when no answer comes from the hub at all (no network, a proxy or firewall in the way): any
    HTTP answer, an error status included, means a download could be tried."""
    import urllib.error
    import urllib.request

    try:
        urllib.request.urlopen(urllib.request.Request(hub_endpoint(), method="HEAD"), timeout=timeout_s).close()
    except urllib.error.HTTPError:
        return False
    except (OSError, ValueError):  # URLError, a timeout, a refused connection, a malformed HF_ENDPOINT
        return True
    return False


def hub_model_problem(path: str) -> str | None:
    """A hub id that the worker could not get: no snapshot of it in the cache, and offline
    (HF_HUB_OFFLINE) or no answer from the hub. Otherwise a missing snapshot is downloaded: only the
    worker can tell whether that works (a private or misspelled id)."""
    if Path(path).expanduser().exists() or path.count("/") != 1 or path.startswith(("/", ".", "~")):
        return None
    cache = hub_cache()
    if any((cache / f"models--{path.replace('/', '--')}" / "snapshots").glob("*/config.json")):
        return None
    if hub_offline():
        return offline_and_not_cached(path, str(cache))
    if hub_unreachable():
        return unreachable_and_not_cached(path, str(cache), hub_endpoint())
    return None


def model_problems(config: Config) -> list[str]:
    """A local model folder without config.json or weights, its quantization and LoRA keys, from
    config.json and the weight headers (a GGUF file: the worker checks it); a hub id offline that the
    cache does not hold."""
    if (hub := hub_model_problem(config.model.path)) is not None:
        return [hub]
    folder = Path(config.model.path)
    ggufs = [folder] if folder.is_file() and folder.suffix == ".gguf" else sorted(folder.glob("*.gguf")) if folder.is_dir() else []
    for file in ggufs:
        if (why := gguf_damage(file)) is not None:
            return [cut_short_sentence(file, why)]
    if folder.is_dir() and not ggufs:
        if not (folder / "config.json").is_file():
            return [no_config_json(folder)]
        if not any(folder.glob("*.safetensors")):
            return [no_weights(folder)]
        if (files := model_files_problem(folder)) is not None:
            return [files]
    try:
        model_config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []  # not a local folder (a hub id, a GGUF file), or one the worker names at load
    if not isinstance(model_config, dict):
        return []
    problems = [quantized_full_finetune(config.model, model_config), lora_keys_problem(config.model)]
    return [str(p) for p in problems if p is not None]


# ---------------------------------------------------------------- reward and tool files


def syntax_error(exc: SyntaxError) -> str:
    """A Python file that does not compile: the file, the line and what is wrong."""
    return f"{exc.filename}, line {exc.lineno}: syntax error ({exc.msg}); fix that line"


def no_type_hint(param: str, function: str) -> str:
    return (f"parameter {param!r} of {function} has no type hint; annotate it (e.g. {param}: int or str), since the "
            "model is told each parameter's type")


def no_docstring(key: str, function: str, where: str) -> str:
    return (f"{key}: {function} in {where} has no docstring; add one that says what the tool does (the model reads "
            "it as the tool's description, and its Args: section describes each parameter)")


def undescribed_parameter(param: str, function: str) -> str:
    return (f"parameter {param!r} of {function} has no description in its docstring; add a line '{param}: what it is' "
            "under 'Args:' (the model reads it, and TRL needs it too)")


def _undescribed(fn: ast.FunctionDef | ast.AsyncFunctionDef, params: list[str]) -> str | None:
    """The first parameter that the docstring's ``Args:`` section does not describe (the rule of
    transformers' ``get_json_schema``, which the worker applies: engine/scoring/tool_schema.py)."""
    doc = ast.get_docstring(fn) or ""
    args = doc.split("Args:", 1)[1] if "Args:" in doc else ""
    return next((p for p in params if not re.search(rf"^\s*{re.escape(p)}\s*(\([^)]*\))?\s*:", args, re.M)), None)


def _source(path: str) -> ast.Module | SyntaxError | None:
    try:
        return ast.parse(Path(path).read_text(encoding="utf-8-sig"), filename=path)
    except SyntaxError as exc:
        return exc
    except (OSError, ValueError):
        return None


def code_problems(config: Config) -> list[str]:
    """Reward and tool files (``file.py:func``) that do not compile, and tools without a docstring,
    a type hint on a parameter or its description, read from the source without running it."""
    problems: list[str] = []
    for key, spec, tool in [*((f"reward {r.function}", r.function, False) for r in config.rewards),
                            *((f"tools[{i}].function: {t.function}", t.function, True) for i, t in enumerate(config.tools))]:
        if spec is None or not spec.rsplit(":", 1)[0].endswith(".py"):
            continue
        where, name = spec.rsplit(":", 1)
        tree = _source(where)
        if isinstance(tree, SyntaxError):
            problems.append(f"{key}: {syntax_error(tree)}")
            continue
        if not tool or tree is None:
            continue
        fn = _defined(tree, name)
        if fn is None:
            continue  # made some other way (a decorator, an assignment): the worker imports it
        params = [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]
        if not (ast.get_docstring(fn) or "").strip():
            problems.append(no_docstring(key.split(": ")[0], name, where))
        elif (untyped := next((p.arg for p in params if p.annotation is None), None)) is not None:
            problems.append(f"{key.split(': ')[0]}: {where}: {no_type_hint(untyped, name)}")
        elif (undescribed := _undescribed(fn, [p.arg for p in params])) is not None:
            problems.append(f"{key.split(': ')[0]}: {where}: {undescribed_parameter(undescribed, name)}")
    return problems


# Imports a user's file in a child process (so a file that misbehaves on import cannot take check
# down) and says, on its last line, whether the function is there or why the import failed.
_IMPORT_CHILD = r"""
import importlib.util, json, sys
path, name = sys.argv[1], sys.argv[2]
spec = importlib.util.spec_from_file_location("grpo_tui_check_import", path)
module = importlib.util.module_from_spec(spec)
sys.modules["grpo_tui_check_import"] = module
try:
    spec.loader.exec_module(module)
except BaseException as exc:
    try:
        text = str(exc)
    except Exception:
        text = ""
    print("\n" + json.dumps({"error": f"{type(exc).__name__}: {text}" if text else type(exc).__name__}))
else:
    print("\n" + json.dumps({"callable": callable(getattr(module, name, None))}))
"""
IMPORT_TIMEOUT_S = 120.0


def import_problem(spec: str) -> str | None:
    """``file.py:func`` imported in a child process as the worker imports it: why it cannot be used
    (the worker's words: "cannot import FILE: ERROR", "'func' is not a function in FILE"), or None."""
    import subprocess
    import sys

    where, name = spec.rsplit(":", 1)
    try:
        done = subprocess.run([sys.executable, "-B", "-c", _IMPORT_CHILD, where, name], capture_output=True, text=True,
                              timeout=IMPORT_TIMEOUT_S, stdin=subprocess.DEVNULL)
        said = json.loads(done.stdout.strip().splitlines()[-1])
    except subprocess.TimeoutExpired:
        return f"{spec}: importing {where} did not finish within {IMPORT_TIMEOUT_S:g} s"
    except (OSError, ValueError, IndexError):
        return None  # the child died without a word: the worker says what it finds
    if "error" in said:
        return f"{spec}: cannot import {where}: {said['error']}"
    if not said.get("callable"):
        return f"{spec}: {name!r} is not a function in {where}"
    return None


def import_problems(config: Config, *, tools: bool) -> list[str]:
    """The tool and ``[environment]`` files (``tools``) or the reward files that do not import, or
    lack their function (a class)."""
    env = config.environment
    classes = [] if env is None else [("environment.class: ", env.class_)] if env.class_ is not None else \
        [("environment.rollout_func: ", env.rollout_func)] if env.rollout_func is not None else \
        [(f"environment.classes.{n}: ", s) for n, s in env.classes.items()]
    specs = ([(f"tools[{i}].function: ", t.function) for i, t in enumerate(config.tools)] + classes if tools
             else [("reward ", r.function) for r in config.rewards if r.function is not None])
    for key, spec in specs:
        if spec.rsplit(":", 1)[0].endswith(".py") and (problem := import_problem(spec)) is not None:
            return [key + problem]
    return []


def _defined(tree: ast.Module, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    return next((n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name), None)


def reward_argument_problems(config: Config) -> list[str]:
    """A custom reward (``file.py:func``, read as source) with a named parameter that nothing fills:
    not TRL's, not a column of the data, not an extra, not its ``params`` (``reward_names``). Only
    when every row of the data was read (else a column may be further down)."""
    d = config.data
    try:
        rows = first_rows(d.path, d.split)
    except ValueError:  # data_problems said it
        return []
    if not rows or len(rows) >= ALL_ROWS:
        return []
    columns = {k for _, row in rows for k in row if k != d.prompt_column}
    if d.answer_column != "answer" and d.answer_column in columns:
        columns.add("answer")  # the worker's alias (data.answer_column)
    for reward in config.rewards:
        spec = reward.function
        if spec is None or not spec.rsplit(":", 1)[0].endswith(".py"):
            continue
        path, name = spec.rsplit(":", 1)
        tree = _source(path)
        fn = _defined(tree, name) if isinstance(tree, ast.Module) else None
        if fn is None:
            continue
        args = fn.args
        positional = [*args.posonlyargs, *args.args]
        defaults = len(args.defaults)
        named = [(a.arg, i >= len(positional) - defaults) for i, a in enumerate(positional) if a not in args.posonlyargs]
        named += [(a.arg, d is not None) for a, d in zip(args.kwonlyargs, args.kw_defaults)]
        line = min([fn.lineno, *(dec.lineno for dec in fn.decorator_list)])  # as the code object says
        label = reward.label
        if problem := argument_problem(label, f"{path}:{line}", named, columns, set(reward.params), d.path):
            return [problem]
    return []


def package_problems(config: Config) -> list[str]:
    """An optional library the config names and this Python lacks (the worker's sentence)."""
    import importlib.util

    if config.data.reasoning_gym is not None:
        what = "data.reasoning_gym"
    elif (i := next((i for i, r in enumerate(config.rewards) if r.name == "reasoning_gym"), None)) is not None:
        what = f"rewards[{i}] (reasoning_gym)"
    else:
        return []
    try:
        found = importlib.util.find_spec("reasoning_gym") is not None
    except ImportError:
        found = False
    return [] if found else [not_installed(what, "reasoning-gym")]


def check_problems(config: Config, config_path: str = "config.toml") -> list[str]:
    """Everything ``grpo-tui check`` finds without training, in the order the worker meets it
    (``config_path``: the config as the user named it, for the commands the sentences print)."""
    count = rank_count(config)
    ranks = undealt(config.training.gradient_accumulation_steps, count) if count is not None else None
    resume = resume_problem(config, config_path)
    return ([str(ranks)] if ranks else []) or folder_problems(config) or ([resume] if resume else []) or \
        code_problems(config) or package_problems(config) or import_problems(config, tools=True) or data_problems(config) or \
        import_problems(config, tools=False) or reward_argument_problems(config) or model_problems(config)
