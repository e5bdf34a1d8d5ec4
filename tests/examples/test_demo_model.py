"""The bundled offline demo: the tiny-arith model, its data, and the example reward module."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import socket
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
MODEL_DIR = EXAMPLES / "models" / "tiny-arith"
TRAIN = EXAMPLES / "data" / "arith.jsonl"
EVAL = EXAMPLES / "data" / "arith_eval.jsonl"


def _import(name: str):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _no_network(*args, **kwargs):
    raise AssertionError("loading the demo model tried to open a network connection")


@pytest.fixture(scope="module")
def loaded():
    from mlx_lm import load

    # Offline for real: any connection attempt during the load fails the test.
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setattr(socket.socket, "connect", _no_network)
        return load(str(MODEL_DIR))


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_model_folder_is_small_and_complete():
    files = {p.name: p.stat().st_size for p in MODEL_DIR.iterdir()}
    for name in ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]:
        assert name in files, f"{name} missing from {MODEL_DIR}"
    assert ".keep" not in files
    assert sum(files.values()) < 10 * 1024 * 1024
    config = json.loads((MODEL_DIR / "config.json").read_text())
    assert config["model_type"] == "qwen3"


def test_chat_template_renders_qwen_style_turns(loaded):
    _, tokenizer = loaded
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 12+30?"},
    ]
    expected = (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nWhat is 12+30?<|im_end|>\n<|im_start|>assistant\n"
    )
    for thinking in (True, False):
        text = tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=False, enable_thinking=thinking
        )
        assert text == expected
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    assert tokenizer.decode(ids) == expected
    no_prompt = tokenizer.apply_chat_template(messages[1:], tokenize=False)
    assert not no_prompt.endswith("assistant\n")


def test_greedy_generation_uses_the_answer_format(loaded):
    from mlx_lm import generate

    model, tokenizer = loaded
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 41+27?"}], add_generation_prompt=True
    )
    text = generate(model, tokenizer, prompt, max_tokens=16)
    assert text.startswith("<answer>") and text.rstrip().endswith("</answer>"), text


def test_held_out_accuracy_leaves_room_for_grpo(loaded):
    eval_arith = _import("eval_arith")
    model, tokenizer = loaded
    acc, fmt = eval_arith.accuracy(model, tokenizer, eval_arith.load_rows(EVAL, 200), seed=0)
    assert fmt > 0.8, f"answer format only {fmt:.0%}"
    assert 0.05 < acc < 0.8, f"held-out accuracy {acc:.0%} is outside the demo's band"


def test_data_files_are_disjoint_and_well_formed():
    train, held_out = _rows(TRAIN), _rows(EVAL)
    assert len(train) >= 1000 and 100 <= len(held_out) <= 500
    for row in train + held_out:
        assert set(row) >= {"prompt", "answer"}
        assert isinstance(row["prompt"], str) and isinstance(row["answer"], str)
        int(row["answer"])
    assert not {r["prompt"] for r in train} & {r["prompt"] for r in held_out}


def test_eval_answers_are_right_for_their_prompts():
    eval_arith = _import("eval_arith")
    for row in _rows(EVAL):
        expression = row["prompt"].removeprefix("What is ").removesuffix("?")
        assert eval(expression, {}) == int(row["answer"])  # noqa: S307 - digits and +/- only
        assert eval_arith.is_correct(f"<answer>{row['answer']}</answer>", row["answer"])
    assert not eval_arith.is_correct("68", "68")  # no tags, no credit


def test_example_rewards():
    rewards = _import("rewards")
    prompts = ["What is 1+1?"] * 3
    completions = ["<answer>2</answer>", "<answer>3</answer>", "x" * 200]
    assert rewards.brevity(prompts, completions, answer=["2"] * 3) == [1.0, 1.0, 0.0]
    scores = asyncio.run(rewards.integer_answer(prompts, completions, answer=["2", "2", "two"]))
    assert scores == [1.0, 0.0, None]


def test_the_agent_demo_model_calls_its_calculator_and_its_data_are_disjoint():
    agent_demo = _import("agent_demo")
    train = [json.loads(line)["prompt"] for line in (EXAMPLES / "data" / "mul.jsonl").read_text().splitlines()]
    held_out = [json.loads(line) for line in (EXAMPLES / "data" / "mul_eval.jsonl").read_text().splitlines()]
    assert len(train) == 2000 and len(held_out) == 200 and not set(train) & {r["prompt"] for r in held_out}
    assert all(eval(r["prompt"][8:-1]) == int(r["answer"]) for r in held_out)
    # 32 rows, sampled as the worker samples: some call the tool (the start GRPO needs), some guess
    accuracy, called = agent_demo.evaluate(EXAMPLES / "models" / "tiny-agent", EXAMPLES / "data" / "mul_eval.jsonl",
                                           32, 1.0, 0)
    assert 0.05 <= called <= 0.7 and accuracy <= called
