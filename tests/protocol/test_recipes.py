"""``grpo.recipe``: the published settings of GSPO, DAPO and Dr. GRPO (TRL's paper index), a key
the file sets wins, and ``grpo-tui check`` says which keys the recipe set."""

from __future__ import annotations

import numpy as np
import pytest
from safetensors.numpy import save_file

from grpo_tui.protocol.config import ConfigError, parse_config
from grpo_tui.tui.cli import main

BASE = '[model]\npath="m"\n[data]\npath="d.jsonl"\n[[rewards]]\nname="accuracy"\n[grpo]\n'

# TRL's docs/source/paper_index.md, the GRPOConfig of each paper's section.
PAPER_INDEX = {
    "gspo": {"importance_sampling_level": "sequence", "loss_type": "grpo", "beta": 0.0, "epsilon": 3e-4,
             "epsilon_high": 4e-4},
    "dapo": {"mask_truncated_completions": True, "loss_type": "dapo", "epsilon_high": 0.28, "epsilon": 0.2,
             "beta": 0.0, "dynamic_sampling": True},  # DAPO's, which the paper index marks unsupported in TRL
    "dr_grpo": {"loss_type": "dr_grpo", "beta": 0.0, "scale_rewards": "none"},
}


@pytest.mark.parametrize("recipe", sorted(PAPER_INDEX))
def test_a_recipe_sets_the_papers_settings(recipe):
    grpo = parse_config(BASE + f'recipe = "{recipe}"\n', check_paths=False).grpo
    for key, value in PAPER_INDEX[recipe].items():
        assert getattr(grpo, key) == value, key
    assert parse_config(BASE, check_paths=False).grpo.recipe is None


def test_a_key_the_file_sets_wins_over_the_recipe():
    grpo = parse_config(BASE + 'recipe = "gspo"\nepsilon_high = 0.001\nloss_type = "dapo"\n', check_paths=False).grpo
    assert (grpo.epsilon_high, grpo.loss_type) == (0.001, "dapo")
    assert (grpo.epsilon, grpo.importance_sampling_level) == (3e-4, "sequence")


def test_an_unknown_recipe_is_a_config_error_naming_the_choices():
    with pytest.raises(ConfigError, match="grpo.recipe: 'ppo' is not one of gspo, dapo, dr_grpo"):
        parse_config(BASE + 'recipe = "ppo"\n', check_paths=False)


def test_check_prints_which_keys_the_recipe_set(tmp_path, capsys):
    (tmp_path / "m").mkdir()  # a model folder and data as check reads them (no weights are loaded)
    (tmp_path / "m" / "config.json").write_text('{"model_type": "qwen3"}')
    save_file({"w": np.zeros(1, np.float32)}, str(tmp_path / "m" / "model.safetensors"))  # headers check reads
    (tmp_path / "m" / "tokenizer.json").write_text("{}")  # check looks for the tokenizer's files, not into them
    (tmp_path / "d.jsonl").write_text('{"prompt": "1+1?", "answer": "2"}\n')
    path = tmp_path / "c.toml"
    path.write_text(BASE + 'recipe = "dapo"\nepsilon_high = 0.3\n')
    assert main(["check", str(path)]) == 0
    out = capsys.readouterr().out
    assert ('grpo.recipe = \'dapo\' set: grpo.mask_truncated_completions = true, grpo.loss_type = "dapo", '
            "grpo.epsilon = 0.2, grpo.beta = 0.0, grpo.dynamic_sampling = true") in out
    assert "kept from the file (they win over the recipe): grpo.epsilon_high = 0.3" in out
    assert 'name = "soft_overlong"' in out  # DAPO's reward half, which a recipe cannot add
    assert "epsilon_high = 0.3\n" in out and "mask_truncated_completions = true\n" in out  # the resolved config
    path.write_text(BASE)
    assert main(["check", str(path)]) == 0
    assert "recipe" not in capsys.readouterr().out

