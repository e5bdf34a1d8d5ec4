"""GRPOConfig: TRL's names over the TOML config, both ways, checked as the file is."""

from __future__ import annotations

import pydoc

import pytest

import grpo_tui
from grpo_tui import GRPOConfig
from grpo_tui.config import trl_table
from grpo_tui.protocol.config import Config, load_config


def test_from_toml_then_to_toml_is_the_same_config(root, tmp_path):
    quick = root / "examples" / "quickstart.toml"
    args = GRPOConfig.from_toml(quick)
    assert (args.num_generations, args.max_completion_length, args.learning_rate) == (8, 24, 5e-5)
    assert args.reward_weights == [1.0, 0.2] and args.extra["eval"]["limit"] == 200
    written = args.to_toml(tmp_path / "again.toml")
    assert load_config(written).to_dict() == load_config(quick).to_dict()


def test_from_toml_takes_overrides_and_names_a_bad_key(root):
    args = GRPOConfig.from_toml(root / "examples" / "quickstart.toml", overrides=["grpo.beta=0.04", "eval.every=25"])
    assert args.beta == 0.04 and args.eval_steps == 25
    with pytest.raises(ValueError, match="grpo.beta: 'x' is not a number"):
        GRPOConfig.from_toml(root / "examples" / "quickstart.toml", overrides=["grpo.beta=x"])


def test_defaults_are_the_toml_defaults():
    raw = GRPOConfig().to_dict()
    raw.update(model={"path": "m"}, data={"path": "d.jsonl"}, rewards=[{"name": "accuracy"}])
    import msgspec

    default = msgspec.convert({"model": {"path": "m"}, "data": {"path": "d.jsonl"}, "rewards": [{"name": "accuracy"}]}, Config)
    assert msgspec.convert(raw, Config).to_dict() == default.to_dict()


def test_trl_conventions_convert():
    args = GRPOConfig(max_steps=-1, num_train_epochs=2.0, save_total_limit=None, report_to="tensorboard",
                      per_device_train_batch_size=8, gradient_accumulation_steps=2, num_generations=4,
                      min_p=None, extra={"rewards": [{"name": "accuracy"}, {"name": "length"}]}, reward_weights=[1, 0.5])
    raw = args.to_dict()
    assert raw["training"]["max_steps"] == 0 and raw["training"]["num_epochs"] == 2
    assert raw["checkpoint"]["keep_last"] == 0 and raw["logging"]["report_to"] == ["tensorboard"]
    assert raw["training"]["batch_size"] == 4  # 8 completions x 2 micro-batches / 4 per prompt
    assert "min_p" not in raw.get("generation", {})  # TRL's None: off, the default here
    assert [r["weight"] for r in raw["rewards"]] == [1.0, 0.5]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"beta": -1.0}, "beta: -1.0 must be >= 0"),
        ({"loss_type": "dpo"}, "loss_type: 'dpo' is not one of grpo, bnpo, dr_grpo, dapo"),
        ({"num_generations": 1}, "num_generations: 1 must be at least 2"),
        ({"report_to": ["mlflow"]}, "'mlflow' is not one of wandb, trackio, tensorboard"),
        ({"num_train_epochs": 1.5}, "num_train_epochs: 1.5"),
        ({"per_device_train_batch_size": 3, "num_generations": 2}, "per_device_train_batch_size: 3"),
    ],
)
def test_a_bad_value_names_the_field(kwargs, message):
    with pytest.raises(ValueError) as err:
        GRPOConfig(**kwargs)
    assert message in str(err.value)


def test_the_docs_table_is_the_one_the_fields_make(root):
    # regenerate: python -c "from grpo_tui.config import trl_table; print(trl_table())"
    assert trl_table() in (root / "docs" / "config.md").read_text()


def test_help_reads_like_documentation():
    text = pydoc.render_doc(grpo_tui.GRPOTrainer, renderer=pydoc.plaintext)
    for words in ("reward_funcs", "train_dataset", "resume_from_checkpoint", "dashboard", "save_model", "Example"):
        assert words in text
    assert "TRL" in pydoc.render_doc(grpo_tui.GRPOConfig, renderer=pydoc.plaintext)


def test_a_recipe_in_extra_keeps_its_settings_and_a_field_given_wins(tmp_path):
    from grpo_tui.protocol.config import load_config

    extra = {"model": {"path": "m"}, "data": {"path": "d.jsonl"}, "rewards": [{"name": "accuracy"}],
             "grpo": {"recipe": "gspo"}}
    plain = load_config(GRPOConfig(extra=extra).to_toml(tmp_path / "a.toml"), check_paths=False)
    assert plain.grpo.importance_sampling_level == "sequence"  # GSPO's, not the field's default
    given = load_config(GRPOConfig(extra=extra, epsilon=0.3).to_toml(tmp_path / "b.toml"), check_paths=False)
    assert given.grpo.epsilon == 0.3
