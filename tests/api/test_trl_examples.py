"""TRL's own GRPO examples run to completion on the bundled tiny model, as a user runs them: the
docs' quick start, trl/scripts/grpo.py, examples/scripts/gspo.py and the widely copied GSM8K GRPO
script with its many TrainingArguments (tests/api/trl_examples/), with only their import lines changed
and their hub ids replaced by local paths here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.api_runs import ROOT, TINY_MODEL

EXAMPLES = Path(__file__).with_name("trl_examples")


def script(tmp_path: Path, name: str, hub_ids: dict[str, Path]) -> Path:
    text = (EXAMPLES / name).read_text()
    for hub_id, path in hub_ids.items():
        assert f'"{hub_id}"' in text
        text = text.replace(f'"{hub_id}"', json.dumps(str(path)))
    out = tmp_path / name
    out.write_text(text)
    return out


def data_folder(folder: Path, rows: int, columns) -> Path:
    """A dataset folder as load_dataset reads one: train.jsonl and test.jsonl."""
    folder.mkdir(parents=True)
    for split in ("train", "test"):
        lines = [json.dumps(columns(i)) for i in range(1, rows + 1)]
        (folder / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def run(tmp_path: Path, path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1", "OMP_NUM_THREADS": "2"}
    done = subprocess.run([sys.executable, str(path), *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    return done


def math_row(i: int) -> dict:
    """A DeepMath-103K / NuminaMath-TIR row: a conversational prompt and a LaTeX solution."""
    return {"prompt": [{"role": "user", "content": f"What is {i}+{i}?"}], "solution": f"${2 * i}$",
            "problem": f"What is {i}+{i}?", "messages": [{"role": "user", "content": "x"}]}


def long_context_copy(folder: Path) -> Path:
    """The tiny model with a context of 1024 tokens: TRL's default 512-token completions fit."""
    import shutil

    shutil.copytree(TINY_MODEL, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 1024}))
    return folder


@pytest.mark.usefixtures("_math_verify")
def test_the_docs_quickstart_trains_with_trl_s_defaults(tmp_path):
    data = data_folder(tmp_path / "deepmath", 1, math_row)
    model = long_context_copy(tmp_path / "model")
    path = script(tmp_path, "quickstart.py", {"trl-lib/DeepMath-103K": data, "Qwen/Qwen2.5-0.5B-Instruct": model})
    run(tmp_path, path)
    state = json.loads((tmp_path / "trainer_output" / "final" / "training_state.json").read_text())
    assert state["step"] == 3  # one prompt a step (8 completions: TRL's default), three epochs
    config = (tmp_path / "trainer_output" / "config.toml").read_text()
    assert "group_size = 8" in config and "learning_rate = 1e-06" in config


@pytest.mark.usefixtures("_math_verify")
def test_trl_s_grpo_script_runs_with_its_command_line(tmp_path):
    data = data_folder(tmp_path / "data", 4, math_row)
    path = script(tmp_path, "grpo_script.py", {})
    done = run(tmp_path, path, "--model_name_or_path", str(TINY_MODEL), "--dataset_name", str(data),
               "--reward_funcs", "accuracy_reward", "think_format_reward", "--output_dir", str(tmp_path / "out"),
               "--max_steps", "2", "--num_generations", "4", "--per_device_train_batch_size", "4",
               "--max_completion_length", "16", "--logging_steps", "1", "--use_peft", "--lora_target_modules",
               "q_proj", "v_proj", "--report_to", "none")
    assert "Training completed." in done.stdout and "Model saved to" in done.stdout
    assert (tmp_path / "out" / "adapters.safetensors").exists()  # save_model: the LoRA adapters


@pytest.mark.usefixtures("_math_verify")
def test_trl_s_gspo_example_runs_with_its_documented_options_scaled_down(tmp_path):
    data = data_folder(tmp_path / "numina", 40, math_row)  # 5% of each split: 2 rows
    path = script(tmp_path, "gspo.py", {"AI-MO/NuminaMath-TIR": data})
    done = run(tmp_path, path, "--model_name_or_path", str(TINY_MODEL), "--output_dir", str(tmp_path / "out"),
               "--learning_rate", "1e-5", "--dtype", "auto", "--max_completion_length", "16", "--use_peft",
               "--lora_target_modules", "q_proj", "v_proj", "--log_completions", "--per_device_train_batch_size", "4",
               "--num_generations", "4", "--importance_sampling_level", "sequence", "--epsilon", "3e-4",
               "--epsilon_high", "4e-4", "--beta", "0.0", "--loss_type", "grpo", "--gradient_accumulation_steps", "2",
               "--steps_per_generation", "8", "--max_steps", "4", "--eval_strategy", "no")
    # its documented generation of 8 micro-steps feeds 4 optimizer steps (2 accumulated each)
    assert "Step 4" in done.stdout and "Advantage" in done.stdout  # log_completions' table
    assert (tmp_path / "out" / "adapters.safetensors").exists()




@pytest.fixture
def _math_verify():
    pytest.importorskip("math_verify")  # accuracy_reward, as TRL's, verifies with it


def gsm8k_folder(folder: Path) -> Path:
    """openai/gsm8k as the hub has it: a README whose YAML names the configs ("main"), train.jsonl rows
    of a question and an answer that ends in "#### N"."""
    data_folder(folder / "main", 3, lambda i: {"question": f"What is {i}+{i}?", "answer": f"{i}+{i}={2 * i}\n#### {2 * i}"})
    (folder / "README.md").write_text("---\nconfigs:\n- config_name: main\n  data_files:\n"
                                      "  - split: train\n    path: main/train.jsonl\n"
                                      "  - split: test\n    path: main/test.jsonl\n---\n")
    return folder


def test_the_gsm8k_grpo_script_runs_with_its_training_arguments(tmp_path):
    data = gsm8k_folder(tmp_path / "gsm8k")
    path = script(tmp_path, "gsm8k_grpo.py", {"openai/gsm8k": data, "Qwen/Qwen2.5-1.5B-Instruct": TINY_MODEL})
    path.write_text(path.read_text() + "\nimport json\njson.dump(trainer.state.log_history, open('history.json', 'w'))\n")
    done = run(tmp_path, path)
    history = [e for e in json.loads((tmp_path / "history.json").read_text()) if "loss" in e]
    assert [e["step"] for e in history] == [1, 2, 3]  # logging_steps=1, max_steps=3
    assert all("rewards/correctness_reward_func/mean" in e and "rewards/xmlcount_reward_func/mean" in e for e in history)
    # learning_rate 5e-6, warmup_ratio 0.1 (one step of three), then cosine: halfway down at the last step
    assert [e["learning_rate"] for e in history] == pytest.approx([0.0, 5e-6, 2.5e-6], rel=1e-5, abs=1e-12)
    for field in ("dataloader_num_workers", "ddp_find_unused_parameters", "hub_model_id"):
        assert done.stderr.count(f"[warning] {field}=") == 1, done.stderr[-3000:]
    assert "use_vllm" not in done.stderr and "log_on_each_node" not in done.stderr  # TRL's default / no effect: silent
    assert "Question:" in done.stdout + done.stderr  # correctness_reward_func's own print reaches the terminal
    run_folder = tmp_path / "outputs" / "Qwen-1.5B-GRPO"  # output_dir, relative to the script's directory
    config = (run_folder / "config.toml").read_text()
    for line in ('name = "Qwen-1.5B-GRPO-gsm8k"', 'dtype = "bfloat16"', 'lr_scheduler_type = "cosine"', "adam_beta2 = 0.99",
                 "weight_decay = 0.1", "max_grad_norm = 0.1", "save_every = 100", "max_prompt_length = 128",
                 "batch_size = 1", "logprob_batch_size = 1"):
        assert line in config, line
    assert (run_folder / "final").is_dir()
