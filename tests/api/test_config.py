"""GRPOConfig: TRL's names over the TOML config, both ways, checked as the file is."""

from __future__ import annotations

import json
import pydoc
import re
from pathlib import Path

import pytest

import grpo_tui
from grpo_tui import GRPOConfig, TrainingError
from grpo_tui.config import trl_fates, trl_table
from grpo_tui.protocol.config import load_config

PINNED = Path(__file__).with_name("trl_1_16_fields.json")  # read from TRL 1.16.0's and transformers' wheels


@pytest.fixture
def trl_fields() -> list[str]:
    """The installed TRL's GRPOConfig fields (TrainingArguments' among them) when TRL imports, else
    TRL 1.16.0's pinned here; with the TrainingArguments fields of transformers 4.57 that 5.x removed."""
    pinned = json.loads(PINNED.read_text())
    try:
        import dataclasses

        from trl import GRPOConfig as TrlConfig  # type: ignore[import-not-found]

        names = [f.name for f in dataclasses.fields(TrlConfig) if not f.name.startswith("_")]
    except ImportError:
        names = list(pinned["grpo_config"])
    return names + [n for n in pinned["training_arguments_4_57_only"] if n not in names]


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


def test_unset_fields_take_trls_defaults_and_a_toml_config_keeps_its_own(root):
    run = GRPOConfig().validate()  # what a script that passes only a model, a reward and data trains with
    assert (run.grpo.group_size, run.generation.max_completion_length, run.training.learning_rate) == (8, 512, 1e-6)
    assert (run.training.lr_scheduler_type, run.training.num_epochs, run.training.batch_size) == ("linear", 3, 1)
    assert (run.training.gradient_checkpointing, run.training.seed, run.data.seed) == (True, 42, 42)
    assert (run.checkpoint.save_every, run.checkpoint.keep_last, run.logging.steps) == (500, 0, 10)
    quick = GRPOConfig.from_toml(root / "examples" / "quickstart.toml")
    assert quick.lr_scheduler_type == "constant" and quick.seed == 0  # the file leaves them out: grpo-tui's
    assert quick.validate().training.gradient_checkpointing is False


def test_every_trl_and_transformers_field_is_accepted_with_a_fate(trl_fields):
    fates = trl_fates()
    assert set(trl_fields) - set(fates) == set()
    assert set(fates.values()) == {"mapped", "ignored", "refused", "inert"}
    given = {name: getattr(GRPOConfig(), name) for name in trl_fields}
    given["use_bias_correction_kl"] = False  # TRL's default True is a loss grpo-tui does not have yet
    args = GRPOConfig(**given)  # each one as a keyword
    assert args.given() == set(trl_fields)


def test_ignored_fields_are_one_warning_line_each_and_refused_ones_one_sentence():
    args = GRPOConfig(use_vllm=True, vllm_mode="server", deepspeed="ds.json", push_to_hub=True, hub_model_id="me/x",
                      dataloader_num_workers=4, use_liger_kernel=True, optim="paged_adamw_8bit",
                      model_init_kwargs={"dtype": "bfloat16", "attn_implementation": "flash_attention_2"})
    lines = args.warnings()
    for name in ("use_vllm", "vllm_mode", "deepspeed", "push_to_hub", "hub_model_id", "dataloader_num_workers",
                 "use_liger_kernel", "optim", "model_init_kwargs['attn_implementation']"):
        assert sum(line.startswith(name) for line in lines) == 1, name
    assert "upload" in next(line for line in lines if line.startswith("push_to_hub"))
    assert args.validate().model.dtype == "bfloat16"
    assert GRPOConfig().warnings() == []
    for kwargs, words in [({"load_best_model_at_end": True}, "load_best_model_at_end=True: the final model"),
                          ({"neftune_noise_alpha": 5.0}, "neftune_noise_alpha=5.0"),
                          ({"save_strategy": "epoch"}, "save_strategy='epoch' is not supported"),
                          ({"steps_per_generation": 3, "gradient_accumulation_steps": 2}, "steps_per_generation: a generation of 3 micro-steps"),
                          ({"generation_batch_size": 6, "per_device_train_batch_size": 4, "num_generations": 4}, "generation_batch_size: 6 must be a multiple"),
                          ({"chat_template_kwargs": {"tools_in_user": 1}}, "chat_template_kwargs: 'tools_in_user'"),
                          ({"optim": "sgd"}, "optim='sgd' is not supported here")]:
        with pytest.raises(TrainingError, match=re.escape(words)):
            GRPOConfig(**kwargs)


def test_a_generation_for_several_optimizer_steps_maps_as_trls_counts_it():
    # TRL counts micro-steps of per_device_train_batch_size completions; the run counts optimizer steps
    def reuse(**kwargs):
        return GRPOConfig(num_generations=4, per_device_train_batch_size=4, **kwargs).validate().training.steps_per_generation
    assert reuse() == 1 and reuse(gradient_accumulation_steps=2) == 1
    assert reuse(gradient_accumulation_steps=2, steps_per_generation=8) == 4  # TRL's gspo example, scaled down
    assert reuse(generation_batch_size=16) == 4
    assert reuse(gradient_accumulation_steps=4, steps_per_generation=2) == 1  # whole generations inside one step


def test_trl_spellings_and_companions_map_onto_the_run():
    run = GRPOConfig(scale_rewards=False, bf16=True, adam_beta1=0.8, adam_beta2=0.99, adam_epsilon=1e-6,
                     chat_template_kwargs={"enable_thinking": True}, generation_kwargs={"stop": ["</answer>"]},
                     lr_scheduler_type="cosine_with_min_lr", lr_scheduler_kwargs={"min_lr_rate": 0.1},
                     save_strategy="no", data_seed=7, warmup_steps=0.1, eval_strategy="steps", eval_steps=5,
                     num_generations_eval=4, min_p=None).validate()
    assert run.grpo.scale_rewards == "none" and run.model.dtype == "bfloat16"
    assert (run.training.adam_beta1, run.training.adam_beta2, run.training.adam_epsilon) == (0.8, 0.99, 1e-6)
    assert run.generation.enable_thinking and run.generation.stop == ["</answer>"]
    assert run.training.min_lr_rate == 0.1 and run.checkpoint.save_every == 0 and run.data.seed == 7
    assert run.training.warmup_ratio == 0.1 and run.generation.min_p == 0.0
    assert run.eval is not None and (run.eval.every, run.eval.at_start, run.eval.num_samples) == (5, False, 4)
    assert GRPOConfig(scale_rewards=True).scale_rewards == "group"
    assert GRPOConfig(multi_objective_aggregation="normalize_then_sum").validate().grpo.multi_objective_aggregation == "normalize_then_sum"


def test_a_field_set_after_construction_counts_and_a_misspelt_one_is_refused():
    args = GRPOConfig()
    args.model_init_kwargs = {"dtype": "float16"}
    args.learning_rate = 3e-6
    args.scale_rewards = False
    run = args.validate()
    assert run.model.dtype == "float16" and run.training.learning_rate == 3e-6 and run.grpo.scale_rewards == "none"
    with pytest.raises(AttributeError, match="did you mean model_init_kwargs"):
        args.model_init_kwarg = {}


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


def test_a_micro_batch_smaller_than_a_group_accumulates_the_same_step():
    # TRL's per-device 1 × 4 micro-batches, one group of 4: the worker's micro-batches hold whole groups
    raw = GRPOConfig(per_device_train_batch_size=1, gradient_accumulation_steps=4, num_generations=4).to_dict()
    assert raw["training"]["batch_size"] == 1 and raw["training"]["gradient_accumulation_steps"] == 1
    assert raw["training"]["logprob_batch_size"] == 1  # TRL's forward of one completion at a time
    raw = GRPOConfig(per_device_train_batch_size=2, gradient_accumulation_steps=4, num_generations=4).to_dict()
    assert raw["training"]["batch_size"] == 2 and raw["training"]["gradient_accumulation_steps"] == 2


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"beta": -1.0}, "beta: -1.0 must be >= 0"),
        ({"loss_type": "dpo"}, "loss_type: 'dpo' is not one of grpo, bnpo, dr_grpo, dapo, cispo, sapo, luspo, vespo"),
        ({"report_to": "all"}, 'report_to: "all" is not supported'),
        ({"num_generations": 1}, "num_generations: 1 must be at least 2"),
        ({"report_to": ["mlflow"]}, "report_to[0]: 'mlflow' is not one of wandb, trackio, tensorboard"),
        ({"eval_strategy": "steps", "eval_steps": 0.1}, "eval_steps: 0.1 — a ratio of the run is not supported"),
        ({"num_train_epochs": 1.5}, "num_train_epochs: 1.5"),
        ({"per_device_train_batch_size": 3, "num_generations": 2}, "per_device_train_batch_size: 3"),
        ({"multi_objective_aggregation": "sum"}, "multi_objective_aggregation: 'sum' is not one of sum_then_normalize, normalize_then_sum"),
    ],
)
def test_a_bad_value_names_the_field(kwargs, message):
    with pytest.raises(ValueError) as err:
        GRPOConfig(**kwargs)
    assert str(err.value).startswith(message)  # the field's own name first


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


def test_adam_betas_and_epsilon_reach_the_optimizer():
    from grpo_tui.worker.engine.learning.update import make_optimizer

    run = GRPOConfig(adam_beta1=0.8, adam_beta2=0.95, adam_epsilon=1e-6).validate()
    optimizer = make_optimizer(run)
    assert list(optimizer.betas) == [0.8, 0.95] and optimizer.eps == 1e-6


def test_an_unknown_sampler_and_a_hub_repo_without_log_completions_are_refused(tmp_path):
    with pytest.raises(TrainingError, match="^train_sampling_strategy='shuffled' is not supported"):
        GRPOConfig(output_dir=str(tmp_path), train_sampling_strategy="shuffled")
    with pytest.raises(TrainingError, match="^log_completions_hub_repo is set, but log_completions is False"):
        GRPOConfig(output_dir=str(tmp_path), log_completions_hub_repo="me/completions")
    GRPOConfig(output_dir=str(tmp_path), log_completions_hub_repo="me/completions", log_completions=True)  # as TRL
    args = GRPOConfig(output_dir=str(tmp_path))
    args.train_sampling_strategy = "length"  # set after construction: checked when the run is built
    with pytest.raises(TrainingError, match="^train_sampling_strategy='length'"):
        args.to_dict()


def test_the_curriculum_keys_travel_in_extra_and_a_bad_one_is_named(tmp_path):
    extra = {"model": {"path": "m"}, "data": {"path": "d.jsonl"}, "rewards": [{"name": "accuracy"}],
             "curriculum": {"strategy": "pass_rate", "max_pass_rate": 0.8, "revisit_probability": 0.2}}
    run = load_config(GRPOConfig(extra=extra).to_toml(tmp_path / "a.toml"), check_paths=False)
    assert (run.curriculum.strategy, run.curriculum.max_pass_rate, run.curriculum.revisit_probability) == ("pass_rate", 0.8, 0.2)
    with pytest.raises(TrainingError, match=r"curriculum.min_pass_rate: 0.95 must not exceed max_pass_rate \(0.8\)"):
        GRPOConfig(extra={**extra, "curriculum": {"strategy": "pass_rate", "min_pass_rate": 0.95, "max_pass_rate": 0.8}}).validate()
