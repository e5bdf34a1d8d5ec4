"""``grpo-tui init --from-mlx-node``: every mlx-node key written out explicitly, mistakes in one
sentence, and every key of the table explained in docs/from-mlx-node.md."""

import json
import re

import pytest

from grpo_tui.protocol.config import parse_config
from grpo_tui.tui.from_mlx_node import KEYS, convert
from grpo_tui.tui.init_templates import InitError


def converted(tmp_path, config: dict, data: str = "rows.jsonl"):
    source = tmp_path / "mlx.json"
    source.write_text(json.dumps(config))
    (tmp_path / "rows.jsonl").write_text('{"prompt": "1+1", "answer": "2"}\n')
    text, unmapped = convert(source, data)
    (tmp_path / "model").mkdir(exist_ok=True)
    return parse_config(text, base_dir=tmp_path), text, unmapped


def test_mlx_nodes_defaults_are_written_out_not_ours(tmp_path):
    config, text, unmapped = converted(tmp_path, {"modelPath": "model"})
    assert config.training.learning_rate == 1e-6 and config.training.weight_decay == 0.01
    assert config.grpo.loss_type == "grpo" and config.grpo.group_size == 4
    assert (config.generation.temperature, config.generation.top_p, config.generation.repetition_penalty) == (0.8, 0.95, 1.1)
    assert config.generation.max_completion_length == 256 and config.training.batch_size == 1
    assert config.checkpoint.save_every == 100 and config.checkpoint.keep_last == 3
    assert "learningRate = 1e-06 (its default)" in text and unmapped == []
    assert config.model.path == str((tmp_path / "model").resolve())


def test_gradient_accumulation_keeps_the_prompts_of_one_update(tmp_path):
    config, _, _ = converted(tmp_path, {"modelPath": "model", "batchSize": 2, "gradientAccumulationSteps": 3})
    assert (config.training.batch_size, config.training.gradient_accumulation_steps) == (6, 3)


def test_keys_without_a_counterpart_are_said_once(tmp_path):
    _, _, unmapped = converted(tmp_path, {"modelPath": "model", "device": "gpu", "gradientClipValue": 0.5})
    assert [line.split(":")[0] for line in unmapped] == ["gradientClipValue", "device"]


# mlx-node's DEFAULT_GRPO_CONFIG (packages/trl/src/trainers/grpo-trainer.ts) and the rest of its GRPOTrainerConfig
SEED_DEFAULTS = {
    "learningRate": 1e-6, "gradientAccumulationSteps": 1, "gradientClipNorm": 1.0, "weightDecay": 0.01, "numEpochs": 1,
    "batchSize": 1, "groupSize": 4, "clipEpsilon": 0.2, "klCoef": 0.0, "lossType": "grpo", "advantageNormalization": True,
    "maxCompletionLength": 256, "temperature": 0.8, "topP": 0.95, "repetitionPenalty": 1.1, "logInterval": 1,
    "saveInterval": 100, "evalInterval": 100, "logConsole": True, "logJsonl": True, "maxCheckpoints": 3, "lmHeadChunkSize": 2,
}
SEED_OTHERS = {
    "modelPath": "model", "modelName": "qwen3-0.6b", "rewardTimeout": 5000, "enableThinking": False,
    "tools": [{"type": "function", "function": {"name": "lsp"}}], "forwardChunkSize": 4, "vocabChunkSize": 65536,
    "useParallelBatchGeneration": True, "runName": "seed", "device": "gpu", "resumeFromCheckpoint": "latest",
    "tuiMode": True, "outputStore": {"enabled": True}, "gradientCheckpointing": False, "optimizerType": "adamw",
    "adamwBeta1": 0.8, "adamwBeta2": 0.99, "adamwEps": 1e-6, "presencePenalty": 0.5,
}


def test_every_key_of_mlx_nodes_config_is_converted_or_named_in_one_pass(tmp_path):
    config, text, unmapped = converted(tmp_path, {**SEED_DEFAULTS, **SEED_OTHERS})
    assert config.generation.max_completion_length == 256 and not config.generation.enable_thinking
    assert [r.timeout_s for r in config.rewards] == [5.0, 5.0]
    assert config.training.logprob_batch_size == 4 and not config.training.gradient_checkpointing
    assert (config.training.adam_beta1, config.training.adam_beta2, config.training.adam_epsilon) == (0.8, 0.99, 1e-6)
    assert config.name == "seed" and config.checkpoint.resume is False
    assert sorted(line.split(":")[0] for line in unmapped) == sorted([
        "modelName", "tools", "vocabChunkSize", "useParallelBatchGeneration", "device", "tuiMode", "presencePenalty",
        "lmHeadChunkSize", "evalInterval", "logConsole", "logJsonl"])  # adamw is what grpo-tui does: not named


def test_older_mlx_nodes_max_new_tokens_is_its_max_completion_length(tmp_path):
    config, text, unmapped = converted(tmp_path, {"modelPath": "model", "maxNewTokens": 8})
    assert config.generation.max_completion_length == 8 and "mlx-node maxNewTokens = 8" in text and unmapped == []
    config, _, unmapped = converted(tmp_path, {"modelPath": "model", "maxNewTokens": 8, "maxCompletionLength": 16})
    assert config.generation.max_completion_length == 16 and unmapped == ["maxNewTokens: maxCompletionLength is given too, and taken"]


def test_keys_that_are_not_mlx_nodes_are_all_named_at_once(tmp_path):
    (tmp_path / "mlx.json").write_text(json.dumps({"modelPath": "m", "learnRate": 1, "maxTokens": 3}))
    with pytest.raises(InitError, match=re.escape("'learnRate', 'maxTokens' are not GRPOTrainerConfig keys of mlx-node")):
        convert(tmp_path / "mlx.json")


@pytest.mark.parametrize(("content", "said"), [
    ('{"modelPath": "m", "learnRate": 1}', "'learnRate' is not a GRPOTrainerConfig key of mlx-node"),
    ("[1, 2]", "holds a JSON list, not an mlx-node GRPOTrainerConfig object"),
    ("{oops", "is not an mlx-node config in JSON"),
])  # fmt: skip
def test_a_file_that_is_not_an_mlx_node_config_is_one_sentence(tmp_path, content, said):
    (tmp_path / "mlx.json").write_text(content)
    with pytest.raises(InitError, match=re.escape(said)):
        convert(tmp_path / "mlx.json")


def test_every_key_of_the_table_is_in_the_migration_guide(root):
    guide = (root / "docs" / "from-mlx-node.md").read_text()
    assert [key for key in KEYS if f"`{key}`" not in guide] == []


def test_an_output_store_path_is_offered_but_mlx_nodes_file_is_never_written(tmp_path):
    config, text, _ = converted(tmp_path, {"modelPath": "model", "outputStore": {"enabled": True, "localPath": "all.db"}})
    assert config.store.enabled and config.store.path is None
    assert f"# path = \"{(tmp_path / 'all.db').resolve()}\"" in text
