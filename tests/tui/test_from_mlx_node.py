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
