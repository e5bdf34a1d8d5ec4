"""End to end on the realistic model (Qwen3 + the real Qwen BPE): mlx-lm opens and runs it, the
worker engine's rollouts decode real BPE (characters split across tokens, emoji, CJK), thinking is
split on the real ``<think>``/``</think>`` tokens, tool calls are parsed, the store holds what the
tokenizer decodes, and the checkpoints of full and LoRA runs open with ``mlx_lm.load``."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.plans import stock_plan
from tests.real_models import engine
from tests.real_models.scripted import build_scripted_model, compose

ROOT = Path(__file__).resolve().parents[2]
PROMPTS = ["Say hello in 中文 🎉", "Écris « bonjour »", "What is 2 + 3?", "1+1 in 日本語?"]
ANSWERS = ["你好", "bonjour", "5", "2"]

# After the generation prompt "<|im_start|>assistant\n" (enable_thinking on), the scripted model
# thinks with a CJK character and an emoji written one byte per token, closes </think>, answers
# and calls a tool, then stops with <|im_end|>.
START = 198  # "\n", the prompt's last token
THINKING = "Adding one and two 世界 🎉🫠"
ANSWER = 'Calling.<tool_call>{"name":"add","arguments":{"a":1,"b":2}}</tool_call>'
RAW = f"<think>{THINKING}</think>\n\n{ANSWER}"


def script() -> list[int]:
    return compose(START, 151667, "Adding one and two ", ("bytes", "世"), "界 🎉", ("bytes", "🫠"), 151668,
                   "\n\nCalling.", 151657, '{"name":"add","arguments":{"a":1,"b":2}}', 151658, 151645)  # fmt: skip


@pytest.fixture(scope="module")
def scripted_dir(qwen_bpe_dir, tmp_path_factory):
    return build_scripted_model(qwen_bpe_dir, tmp_path_factory.mktemp("scripted"), START, script())


def query(db: Path, sql: str, *args) -> list[tuple]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


def write_run(folder: Path, model: Path, *, steps: int = 2, max_tokens: int = 12, thinking: bool = False,
              lora: bool = False, system: str | None = "Réponds brièvement.") -> Path:  # fmt: skip
    data = folder / "data.jsonl"
    data.write_text("".join(json.dumps({"prompt": p, "answer": a}, ensure_ascii=False) + "\n"
                            for p, a in zip(PROMPTS, ANSWERS)), encoding="utf-8")  # fmt: skip
    # A reward that differs between completions, so advantages and the updates are not zero.
    (folder / "rewards.py").write_text("def varied(prompts, completions, **kw):\n"
                                       "    return [len(set(c)) / 10 for c in completions]\n")
    text = f'[[rewards]]\nfunction = {json.dumps(str(folder / "rewards.py") + ":varied")}\n'
    text += f'\n[model]\npath = {json.dumps(str(model))}\n'
    if lora:
        text += "\n[model.lora]\nrank = 4\nalpha = 8\nlayers = -1\n"
    text += f'\n[data]\npath = {json.dumps(str(data))}\nseed = 0\n'
    if system:
        text += f"system_prompt = {json.dumps(system, ensure_ascii=False)}\n"
    text += "\n[grpo]\ngroup_size = 2\n"
    text += f"\n[generation]\nmax_completion_length = {max_tokens}\nenable_thinking = {str(thinking).lower()}\n"
    text += f"\n[training]\nbatch_size = 2\nlearning_rate = 1e-3\nmax_steps = {steps}\nseed = 0\n"
    text += f'\n[checkpoint]\noutput_dir = {json.dumps(str(folder / "out"))}\nsave_every = 0\n'
    path = folder / "config.toml"
    path.write_text(text, encoding="utf-8")
    return path


def run_worker(config: Path) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "grpo_tui.worker", str(config), "--plain"], cwd=ROOT,
                          stdin=subprocess.DEVNULL, capture_output=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-4000:]
    return proc


def generations(db: Path) -> list[dict]:
    cols = ["id", "step", "prompt", "completion", "raw_completion", "thinking", "num_tokens", "finish_reason"]
    rows = query(db, f"SELECT {', '.join(cols)} FROM generations ORDER BY id")
    return [dict(zip(cols, r)) for r in rows]


# ---------------------------------------------------------------- mlx-lm


@pytest.mark.slow
def test_mlx_lm_loads_and_generates(qwen_bpe_dir):
    import mlx_lm

    model, tok = mlx_lm.load(str(qwen_bpe_dir))
    assert model.model.embed_tokens.weight.shape == (151936, 64) and len(model.layers) == 2
    prompt = tok.apply_chat_template([{"role": "user", "content": "Bonjour 世界"}], add_generation_prompt=True,
                                     enable_thinking=False)  # fmt: skip
    text = mlx_lm.generate(model, tok, prompt, max_tokens=12)
    assert isinstance(text, str) and text


# ---------------------------------------------------------------- the engine, scripted ids


@pytest.mark.slow
@pytest.mark.parametrize("repetition_penalty", [1.0, 1.1], ids=["compiled-loop", "batch-generator"])
def test_rollout_decodes_bytes_split_across_tokens_and_stops_on_im_end(scripted_dir, qwen_tok, repetition_penalty):
    import mlx_lm

    from grpo_tui.protocol.config import GenerationConfig

    model, tok = mlx_lm.load(str(scripted_dir))
    ids = script()
    prompt = tok.apply_chat_template([{"role": "user", "content": "1+2?"}], add_generation_prompt=True)
    assert prompt[-1] == START
    gen = GenerationConfig(max_completion_length=64, repetition_penalty=repetition_penalty)
    for c in engine.rollout().generate(model, tok, [prompt], 2, gen, plan=stock_plan(model, gen)):
        assert c.token_ids == ids and c.finish_reason == "stop"  # <|im_end|> included, not decoded
        assert c.text == tok.decode(ids[:-1]) == RAW
        assert engine.split_thinking(c.text) == (THINKING, ANSWER)
        [call] = engine.parse_tool_calls(ANSWER)
        assert (call.status, call.name, call.arguments) == ("ok", "add", {"a": 1, "b": 2})

    # Cut inside 世 (3 single-byte tokens): the stored text is the decode of the ids, a replacement
    # character for the incomplete bytes, and the completion finished by "length".
    cut = ids.index(151667) + 1 + len(qwen_tok.encode("Adding one and two ")) + 2
    gen = GenerationConfig(max_completion_length=cut, repetition_penalty=repetition_penalty)
    [c] = engine.rollout().generate(model, tok, [prompt], 1, gen, plan=stock_plan(model, gen))
    assert c.token_ids == ids[:cut] and c.finish_reason == "length"
    assert c.text == tok.decode(ids[:cut]) == "<think>Adding one and two \ufffd"


@pytest.mark.slow
def test_worker_process_stores_thinking_tool_calls_and_multibyte_text(tmp_path, scripted_dir):
    config = write_run(tmp_path, scripted_dir, steps=1, max_tokens=64, thinking=True)
    run_worker(config)
    db = tmp_path / "out" / "outputs.db"
    rows = generations(db)
    assert len(rows) == 4  # 2 prompts x group 2
    for row in rows:
        assert row["raw_completion"] == RAW
        assert row["thinking"] == THINKING and row["completion"] == ANSWER
        assert row["num_tokens"] == len(script()) and row["finish_reason"] == "stop"
        assert row["prompt"].startswith("<|im_start|>system\nRéponds brièvement.<|im_end|>\n<|im_start|>user\n")
        assert row["prompt"].endswith("<|im_end|>\n<|im_start|>assistant\n")
    calls = query(db, "SELECT name, arguments, status, raw FROM tool_calls ORDER BY generation_id")
    assert len(calls) == 4
    for name, arguments, status, raw in calls:
        assert (name, json.loads(arguments), status) == ("add", {"a": 1, "b": 2}, "ok")
        assert raw == '<tool_call>{"name":"add","arguments":{"a":1,"b":2}}</tool_call>'


# ---------------------------------------------------------------- the engine, random weights


@pytest.mark.slow
def test_trainer_generations_hold_exactly_the_decode_of_the_sampled_ids(tmp_path, qwen_bpe_dir, monkeypatch):
    """Random weights over 151,936 ids sample plenty of partial-UTF-8 tokens and padding ids: what
    the trainer hands the store is still exactly ``tokenizer.decode`` of the sampled ids."""
    from grpo_tui.protocol.config import load_config

    trainer = engine.Trainer(load_config(write_run(tmp_path, qwen_bpe_dir, max_tokens=16)), log=lambda *a: None)
    rollout = engine.rollout()
    seen = []
    real_generate = rollout.generate

    def spy(*args, **kwargs):
        out = real_generate(*args, **kwargs)
        seen.append(out)
        return out

    monkeypatch.setattr(rollout, "generate", spy)
    tok = trainer.policy.tokenizer
    for step in (1, 2):
        output = trainer.train_step(step)
        completions = seen[-1]
        assert len(output.generations) == len(completions) == 4
        for gen, c in zip(output.generations, completions):
            body = c.token_ids[:-1] if c.finish_reason == "stop" else c.token_ids
            assert gen.raw_completion == tok.decode(body) == c.text
            assert gen.num_tokens == len(c.token_ids)
            assert (gen.thinking, gen.completion) == engine.split_thinking(gen.raw_completion)
            assert gen.prompt.startswith("<|im_start|>system\nRéponds brièvement.<|im_end|>\n")
            assert gen.prompt.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")  # enable_thinking off
            if c.finish_reason == "stop":
                assert c.token_ids[-1] in (151645, 151643)


@pytest.mark.slow
@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_worker_process_run_and_its_checkpoint_opens_in_mlx_lm(tmp_path, qwen_bpe_dir, lora):
    import mlx_lm

    config = write_run(tmp_path, qwen_bpe_dir, lora=lora)
    run_worker(config)
    out = tmp_path / "out"
    db = out / "outputs.db"
    assert query(db, "SELECT status FROM runs") == [("completed",)]
    assert [r[0] for r in query(db, "SELECT step FROM steps ORDER BY step")] == [1, 2]
    assert any(r[0] for r in query(db, "SELECT gradients_applied FROM steps"))
    assert any(r[0] for r in query(db, "SELECT advantage != 0 FROM generations"))
    rows = generations(db)
    assert len(rows) == 2 * 2 * 2
    for row in rows:
        assert (row["thinking"], row["completion"]) == engine.split_thinking(row["raw_completion"])
        assert 1 <= row["num_tokens"] <= 12
        assert row["raw_completion"].encode("utf-8").decode("utf-8") == row["raw_completion"]  # valid UTF-8

    final = out / "final"
    if lora:
        assert (final / "adapters.safetensors").exists() and not (final / "model.safetensors").exists()
        model, tok = mlx_lm.load(str(qwen_bpe_dir), adapter_path=str(final))
    else:
        model, tok = mlx_lm.load(str(final))
    assert tok.eos_token == "<|im_end|>" and tok.encode("<think>") == [151667]
    assert tok.chat_template == json.loads((qwen_bpe_dir / "tokenizer_config.json").read_text())["chat_template"]
    prompt = tok.apply_chat_template([{"role": "user", "content": "héllo"}], add_generation_prompt=True)
    assert isinstance(mlx_lm.generate(model, tok, prompt, max_tokens=8), str)
