"""Config fuzz: any TOML gives a valid ``Config`` or exactly one ``ConfigError`` with a key path.

Generated documents (random tables, mutations of the quickstart, syntax garbage) go through
``parse_config``; a few go through ``grpo-tui check`` as a user would run it. Never another
exception, never a traceback, always one line.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grpo_tui.protocol.config import _DATA_SUFFIXES, _HUB_ID, Config, ConfigError, load_config, parse_config
from grpo_tui.common.tomlout import dumps

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
QUICKSTART = EXAMPLES / "quickstart.toml"
QUICK = tomllib.loads(QUICKSTART.read_text())
FILE = "fuzz.toml"
FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
KNOWN = sorted({k for v in QUICK.values() if isinstance(v, dict) for k in v} | set(QUICK) | {
    "lora", "rank", "alpha", "layers", "function", "timeout_s", "on_error", "params", "eval_path",
    "system_prompt", "max_steps", "nan_patience", "store", "enabled", "runtime", "blas", "resume",
    "importance_sampling_level", "num_iterations", "top_p", "top_k", "min_p",
})


# ------------------------------------------------------------------ a TOML writer for the fuzzer


def toml_str(text: str) -> str:
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")  # TOML forbids a raw DEL


toml_key = toml_str


def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (dt.datetime, dt.date, dt.time)):
        return v.isoformat()
    if isinstance(v, str):
        return toml_str(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return "{" + ", ".join(f"{toml_key(k)} = {toml_value(x)}" for k, x in v.items()) + "}"


def to_toml(doc: dict[str, Any]) -> str:
    return "".join(f"{toml_key(k)} = {toml_value(v)}\n" for k, v in doc.items())


# ------------------------------------------------------------------ strategies

# Odd unicode on purpose: control characters, RTL marks, emoji, combining marks, surrogates excluded.
odd_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)
keys = st.one_of(st.sampled_from(KNOWN), odd_text)
numbers = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.sampled_from([0, -1, 1, 2, 2**31, -(2**63)]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 1e-300, 1e300, float("nan"), float("inf"), -1.5, 1.5]),
)
scalars = st.one_of(
    numbers,
    st.booleans(),
    odd_text,
    st.sampled_from(["latest", "dapo", "grpo", "accuracy", "best_worst", "examples/rewards.py:brevity", ""]),
    st.datetimes(min_value=dt.datetime(1, 1, 1), max_value=dt.datetime(9999, 1, 1)),
    st.dates(),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=4)),
    max_leaves=12,
)
documents = st.dictionaries(keys, values, max_size=6)


@st.composite
def quickstart_mutations(draw: st.DrawFn) -> dict[str, Any]:
    """The quickstart with 1-3 edits: a value replaced, a key deleted or an unknown key added."""
    doc = json.loads(json.dumps(QUICK))  # deep copy of plain data
    for _ in range(draw(st.integers(1, 3))):
        table_name = draw(st.sampled_from(sorted(doc)))
        table = doc[table_name]
        if isinstance(table, list) and table:
            table = table[draw(st.integers(0, len(table) - 1))]
        kind = draw(st.sampled_from(["replace", "number", "delete", "unknown", "top"]))
        if kind == "top" or not isinstance(table, dict) or not table:
            if kind == "delete":
                del doc[table_name]
            else:
                doc[table_name] = draw(values)
            continue
        key = draw(st.sampled_from(sorted(table)))
        if kind == "replace":
            table[key] = draw(values)
        elif kind == "number":
            table[key] = draw(numbers)
        elif kind == "delete":
            del table[key]
        else:
            table[draw(keys)] = draw(values)
    return doc


@st.composite
def garbled_quickstart(draw: st.DrawFn) -> str:
    """The quickstart text with random characters inserted, deleted or replaced."""
    text = QUICKSTART.read_text()
    for _ in range(draw(st.integers(1, 5))):
        i = draw(st.integers(0, len(text)))
        junk = draw(st.one_of(st.sampled_from(list("[]{}=\"'#\n.,\\ \x00\x7f")), odd_text))
        cut = draw(st.integers(0, 3))
        text = text[:i] + junk + text[i + cut:]
    return text


# ------------------------------------------------------------------ the property


def check(text: str) -> Config | None:
    """Either a sane Config or one ConfigError that says where; anything else fails the test."""
    try:
        config = parse_config(text, base_dir=EXAMPLES, file=FILE)
    except ConfigError as exc:
        message = str(exc)
        assert "\n" not in message and "\r" not in message, message
        assert message.startswith(f"{FILE}: "), message
        if exc.key:
            assert message.startswith(f"{FILE}: {exc.key}: "), message
            assert exc.detail.strip(), message
        else:  # only a file-level problem may lack a key path
            assert "TOML syntax error" in exc.detail, message
        return None
    assert isinstance(config, Config)
    assert_sane(config)
    return config


def assert_sane(config: Config) -> None:
    floats = [v for v in _walk(config) if isinstance(v, float)]
    assert all(math.isfinite(v) for v in floats), floats
    assert config.rewards and config.grpo.group_size >= 2 and config.training.batch_size >= 1
    assert config.training.batch_size % config.training.gradient_accumulation_steps == 0
    assert 0 < config.generation.top_p <= 1 and config.generation.temperature > 0
    # a local dataset file, or a Hugging Face dataset id (read by the worker, needs no local file)
    hub_id = _HUB_ID.fullmatch(config.data.path) and not config.data.path.lower().endswith(_DATA_SUFFIXES)
    assert Path(config.data.path).is_file() or hub_id
    # `grpo-tui check` prints the resolved config; what it prints must read back as the same config.
    again = parse_config(dumps(config.to_dict()), file=FILE)
    # json: nan == nan; sorted keys: a TOML writer puts a table's scalars before its sub-tables
    assert json.dumps(again.to_dict(), sort_keys=True) == json.dumps(config.to_dict(), sort_keys=True)


def _walk(value: Any):
    if hasattr(value, "__struct_fields__"):
        for name in value.__struct_fields__:
            if name != "params":
                yield from _walk(getattr(value, name))
    elif isinstance(value, list):
        for item in value:
            yield from _walk(item)
    else:
        yield value


@FUZZ
@given(documents)
def test_random_documents(doc):
    check(to_toml(doc))


@FUZZ
@given(quickstart_mutations())
def test_quickstart_mutations(doc):
    check(to_toml(doc))


@FUZZ
@given(st.one_of(garbled_quickstart(), st.text(max_size=200)))
def test_syntax_garbage(text):
    check(text)


@FUZZ
@given(st.dictionaries(odd_text, values, max_size=5), odd_text, odd_text)
def test_valid_configs_with_odd_text_print_back(params, name, system_prompt):
    doc = json.loads(json.dumps(QUICK))
    doc["rewards"][1]["params"] = {"tags": params}  # a built-in's own key (another is a config error)
    doc["name"], doc["data"]["system_prompt"] = name, system_prompt
    assert check(to_toml(doc)) is not None


def test_the_quickstart_itself_passes_the_property():
    assert check(QUICKSTART.read_text()) is not None
    assert check(to_toml(QUICK)) is not None


# Cases the fuzzer found; each used to escape as another exception or pass as a valid config.
Q = QUICKSTART.read_text()
REGRESSIONS = [
    ("a = " + "[" * 3000 + "]" * 3000, "", "nested too deeply"),  # was RecursionError
    ("a = " + "{b = " * 3000 + "1" + "}" * 3000, "", "nested too deeply"),
    (re.sub(r"learning_rate = \S+", "learning_rate = nan", Q), "training.learning_rate", "nan is not a finite"),
    (Q.replace("temperature = 1.0", "temperature = inf"), "generation.temperature", "inf is not a finite"),
    (Q.replace("weight = 0.2", "weight = -inf"), "rewards[1].weight", "-inf is not a finite number"),
    (Q.replace('"models/tiny-arith"', '"mo\\u0000del"'), "model.path", "is not a usable path"),  # ValueError
    (Q.replace('"models/tiny-arith"', '"' + "x" * 5000 + '"'), "model.path", "is not a usable path"),  # OSError
    (Q.replace("[grpo]", '[grpo]\n"é-x" = 1'), 'grpo."é-x"', "unknown key"),  # key was missing from the path
    (Q.replace("[grpo]", '[grpo]\n"" = 1'), 'grpo.""', "unknown key"),
]


@pytest.mark.parametrize("text, key, detail", REGRESSIONS, ids=[str(i) for i in range(len(REGRESSIONS))])
def test_regressions(text, key, detail):
    with pytest.raises(ConfigError) as info:
        parse_config(text, base_dir=EXAMPLES, file=FILE)
    assert info.value.key == key
    assert detail in info.value.detail
    check(text)


# ------------------------------------------------------------------ through the CLI

CLI_CASES = {
    "syntax": b"[grpo\nloss_type = 'dapo'\n",
    "binary": bytes(range(256)) * 4,
    "nan": re.sub(rb"learning_rate = \S+", b"learning_rate = nan", QUICKSTART.read_bytes()),
    "wrong-type": QUICKSTART.read_bytes().replace(b"group_size = 8", b'group_size = "eight"'),
    "unknown-key": QUICKSTART.read_bytes() + "[grpo.\"\\u202e\"]\nx = 1\n".encode(),
    "deep": b"a = " + b"[" * 5000 + b"]" * 5000 + b"\n",
    "nul-path": QUICKSTART.read_bytes().replace(b'"models/tiny-arith"', b'"models/\\u0000"'),
    "missing-required": QUICKSTART.read_bytes().replace(b'path = "data/arith.jsonl"', b""),
}


@pytest.mark.parametrize("name", sorted(CLI_CASES))
def test_cli_check_says_one_line(name, tmp_path):
    # Written next to the quickstart's folder layout so relative paths resolve the same way.
    (tmp_path / "models").symlink_to(EXAMPLES / "models")
    (tmp_path / "data").symlink_to(EXAMPLES / "data")
    config = tmp_path / f"{name}.toml"
    config.write_bytes(CLI_CASES[name])
    out = subprocess.run(
        [sys.executable, "-m", "grpo_tui.tui.cli", "check", str(config)],
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode != 0
    assert "Traceback" not in out.stderr
    assert out.stderr.count("\n") == 1, out.stderr
    assert out.stderr.startswith("grpo-tui: config error: ") and f"{name}.toml" in out.stderr
    assert out.stdout == ""


def test_load_config_on_odd_files(tmp_path):
    for content in (b"\xff\xfe\x00garbage", b"", b"\x00" * 10):
        path = tmp_path / "odd.toml"
        path.write_bytes(content)
        with pytest.raises(ConfigError) as info:
            load_config(path)
        assert "odd.toml" in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(ConfigError):
        load_config(tmp_path)  # a directory


def test_check_output_quotes_odd_params_keys_and_del():
    # `grpo-tui check` used to print `{ a b = 1 }` and a raw DEL, which TOML readers reject.
    text = Q.replace("weight = 0.2", 'weight = 0.2\nparams = {tags = {"a b" = 1, "x.y" = {"" = ["\\u007f"]}}}')
    config = check(text)
    assert config is not None and config.rewards[1].params == {"tags": {"a b": 1, "x.y": {"": ["\x7f"]}}}
