from pathlib import Path

import pytest

from grpo_tui.protocol.config import ConfigError, load_config, parse_config

BASE = """
[model]
path = "model"
[data]
path = "data.jsonl"
[[rewards]]
name = "accuracy"
"""


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "model").mkdir()
    (tmp_path / "data.jsonl").write_text('{"prompt": "1+1", "answer": "2"}\n')
    (tmp_path / "rewards.py").write_text("def brevity(prompts, completions, **kw):\n    return [0.0]*len(completions)\n")
    return tmp_path


def parse(text: str, workdir: Path):
    return parse_config(text, base_dir=workdir)


def test_defaults_follow_the_design(workdir):
    cfg = parse(BASE, workdir)
    assert cfg.grpo.group_size == 4 and cfg.grpo.loss_type == "dapo"
    assert cfg.grpo.epsilon == 0.2 and cfg.grpo.epsilon_high == 0.2
    assert cfg.grpo.scale_rewards == "group" and cfg.grpo.importance_sampling_level == "token"
    assert cfg.generation.max_completion_length == 128 and cfg.generation.temperature == 1.0
    assert cfg.training.learning_rate == 1e-5 and cfg.training.batch_size == 4
    assert cfg.checkpoint.resume == "latest" and cfg.checkpoint.keep_last == 3
    assert cfg.store.enabled and cfg.display.sample_display == "best_worst"
    assert cfg.rewards[0].weight == 1.0 and cfg.rewards[0].label == "accuracy"


def test_relative_paths_resolve_against_the_config_folder(workdir, monkeypatch, tmp_path_factory):
    (workdir / "config.toml").write_text(BASE + '\n[[rewards]]\nfunction = "rewards.py:brevity"\n')
    monkeypatch.chdir(tmp_path_factory.mktemp("elsewhere"))
    cfg = load_config(workdir / "config.toml")
    assert cfg.model.path == str(workdir / "model")
    assert cfg.data.path == str(workdir / "data.jsonl")
    assert cfg.rewards[1].function == f"{workdir / 'rewards.py'}:brevity"
    assert cfg.checkpoint.output_dir == str(workdir / "runs" / "grpo")


def test_hub_ids_are_kept(workdir):
    cfg = parse(BASE.replace('path = "model"', 'path = "Qwen/Qwen3-0.6B"'), workdir)
    assert cfg.model.path == "Qwen/Qwen3-0.6B"


def test_hub_dataset_ids_are_kept_and_a_tools_file_must_exist(workdir):
    cfg = parse(BASE.replace('path = "data.jsonl"', 'path = "openai/gsm8k"\nsubset = "main"\nsplit = "test"'), workdir)
    assert (cfg.data.path, cfg.data.subset, cfg.data.split) == ("openai/gsm8k", "main", "test")
    with pytest.raises(ConfigError, match=r"data.tools: 'tools.json' does not exist"):
        parse(BASE.replace('path = "data.jsonl"', 'path = "data.jsonl"\ntools = "tools.json"'), workdir)


def test_epsilon_high_defaults_to_epsilon(workdir):
    assert parse(BASE + "[grpo]\nepsilon = 0.3\n", workdir).grpo.epsilon_high == 0.3
    assert parse(BASE + "[grpo]\nepsilon_high = 0.28\n", workdir).grpo.epsilon_high == 0.28


def test_resume_accepts_false_and_true(workdir):
    assert parse(BASE + "[checkpoint]\nresume = false\n", workdir).checkpoint.resume is False
    assert parse(BASE + "[checkpoint]\nresume = true\n", workdir).checkpoint.resume == "latest"


def test_lora_table(workdir):
    cfg = parse(BASE.replace('path = "model"\n', 'path = "model"\n[model.lora]\nrank = 4\n'), workdir)
    assert cfg.model.lora is not None and cfg.model.lora.rank == 4 and cfg.model.lora.alpha == 16.0


BAD = [
    ("[grpo]\nloss_type = \"dpo\"", "grpo.loss_type", "'dpo' is not one of grpo, bnpo, dr_grpo, dapo, cispo, sapo, luspo, vespo"),
    ("[grpo]\ngroup_size = 1", "grpo.group_size", "must be at least 2"),
    ("[grpo]\ngroup_size = \"four\"", "grpo.group_size", "'four' is not an integer"),
    ("[grpo]\nepsilon = -0.1", "grpo.epsilon", "must be > 0"),
    ("[grpo]\nbeta = -1.0", "grpo.beta", "must be >= 0"),
    ("[grpo]\nscale_rewards = \"batchy\"", "grpo.scale_rewards", "is not one of group, batch, none"),
    ("[grpo]\nimportance_sampling_level = \"seq\"", "grpo.importance_sampling_level", "'seq' is not one of"),
    ("[grpo]\nnum_iterations = 0", "grpo.num_iterations", "at least 1"),
    ("[grpo]\ngroup_sise = 4", "grpo.group_sise", "unknown key"),
    ("[generation]\ntemperature = 0", "generation.temperature", "must be at least 0.001"),
    ("[generation]\ntemperature = 1e-45", "generation.temperature", "must be at least 0.001 (below, the logits"),
    ("[generation]\ntop_p = 1.5", "generation.top_p", "must be in (0, 1]"),
    ("[generation]\nmax_completion_length = 0", "generation.max_completion_length", "at least 1"),
    ("[generation]\nenable_thinking = \"yes\"", "generation.enable_thinking", "'yes' is not true or false"),
    ("[training]\nlearning_rate = 0", "training.learning_rate", "must be > 0"),
    ("[training]\nbatch_size = 3\ngradient_accumulation_steps = 2", "training.gradient_accumulation_steps",
     "must divide training.batch_size (3)"),
    ("[training]\nmax_steps = -5", "training.max_steps", "-5"),
    ("[training]\nvocab_chunk_size = -1", "training.vocab_chunk_size", "must be >= 0"),
    ("[training]\nlogprob_batch_size = -2", "training.logprob_batch_size", "must be >= 0"),
    ("[training]\nmemory_limit_gb = -1.0", "training.memory_limit_gb", "must be >= 0"),
    ("[training]\ngradient_checkpointing = \"yes\"", "training.gradient_checkpointing", "'yes' is not true or false"),
    ("[checkpoint]\nsave_every = -1", "checkpoint.save_every", ">= 0"),
    ("[checkpoint]\nresume = 3", "checkpoint.resume", '3 is not "latest", a checkpoint path or false'),
    ("[checkpoint]\nresume = \"nowhere/checkpoint-9\"", "checkpoint.resume", "does not exist"),
    ("[display]\nsample_display = \"best\"", "display.sample_display", "'best' is not one of all, best_worst, random"),
    ("[[rewards]]\nname = \"accurcy\"", "rewards[1].name", "'accurcy' is not one of accuracy"),
    ("[[rewards]]\nweight = 2.0", "rewards[1].name", "give exactly one of"),
    ("[[rewards]]\nfunction = \"no_colon\"", "rewards[1].function", "file.py:func or module:func"),
    ("[[rewards]]\nfunction = \"missing.py:f\"", "rewards[1].function", "does not exist"),
    ("[[rewards]]\nname = \"length\"\ntimeout_s = -1", "rewards[1].timeout_s", "must be >= 0 (0: no limit)"),
    ("[[rewards]]\nname = \"length\"\nparams = { min_length = 0 }", "rewards[1].params", "min_length must be a whole number >= 1"),
    ("[[rewards]]\nname = \"length\"\nparams = { min_length = 9, max_length = 3 }", "rewards[1].params",
     "min_length must not exceed max_length (3)"),
    ("[[rewards]]\nname = \"length\"\nparams = { target = 5, max_length = 9 }", "rewards[1].params", "either a target or a band"),
    ("[[rewards]]\nname = \"length\"\nparams = { max_length = 9, unit = \"words\" }", "rewards[1].params",
     'unit is "tokens" or "chars"'),
    ("[[rewards]]\nname = \"length\"\nparams = { unit = \"chars\" }", "rewards[1].params", "counts a band"),
    ("[[rewards]]\nname = \"tool_use\"\nparams = { allowed_tools = \"multiply\" }", "rewards[1].params",
     "allowed_tools is a list of tool names"),
    ("[[rewards]]\nname = \"tool_use\"\nparams = { tools = [\"multiply\"] }", "rewards[1].params",
     "(it takes: required, allowed_tools)"),
    ("[[rewards]]\nname = \"length\"\non_error = \"ignore\"", "rewards[1].on_error", "'ignore' is not one of raise, skip"),
    ("[store]\nenabled = 1", "store.enabled", "1 is not true or false"),
    ("[runtime]\nblas = \"/no/such/libblas.so\"", "runtime.blas", "does not exist"),
    ("[surprise]\nx = 1", "surprise", "unknown key (expected one of: model, data, rewards"),
    ("[model.lora]\nrank = 0", "model.lora.rank", "at least 1"),
    ("[[tools]]\ntimeout_s = 1", "tools[0].function", "is required"),
    ("[[tools]]\nfunction = \"calc\"", "tools[0].function", "file.py:func or module:func"),
    ("[[tools]]\nfunction = \"missing.py:f\"", "tools[0].function", "does not exist"),
    ("[[tools]]\nfunction = \"m:f\"\ntimeout_s = 0", "tools[0].timeout_s", "must be > 0"),
    ("[[tools]]\nfunction = \"m:f\"\n[[tools]]\nfunction = \"rewards.py:f\"", "tools[1].function",
     "a second tool named 'f'"),
    ("[generation]\nmax_tool_calls = -1", "generation.max_tool_calls", "must be >= 0"),
]


@pytest.mark.parametrize("extra, key, message", BAD, ids=[b[1] + "-" + str(i) for i, b in enumerate(BAD)])
def test_bad_config_names_the_key(workdir, extra, key, message):
    with pytest.raises(ConfigError) as info:
        parse(BASE + extra + "\n", workdir)
    assert info.value.key == key
    assert message in info.value.detail
    assert str(info.value).count("\n") == 0


def test_tools_resolve_like_reward_functions(workdir):
    cfg = parse(BASE + '[[tools]]\nfunction = "rewards.py:brevity"\n[[tools]]\nfunction = "math:floor"\n', workdir)
    assert [t.function for t in cfg.tools] == [f"{workdir / 'rewards.py'}:brevity", "math:floor"]
    assert [t.timeout_s for t in cfg.tools] == [10.0, 10.0] and cfg.generation.max_tool_calls == 4


def test_missing_required_sections(workdir):
    with pytest.raises(ConfigError) as info:
        parse('[data]\npath = "data.jsonl"\n[[rewards]]\nname = "accuracy"\n', workdir)
    assert info.value.key == "model" and "is required" in info.value.detail
    with pytest.raises(ConfigError) as info:
        parse('[model]\n[data]\npath = "data.jsonl"\n[[rewards]]\nname = "accuracy"\n', workdir)
    assert info.value.key == "model.path"


def test_missing_data_file(workdir):
    with pytest.raises(ConfigError) as info:
        parse(BASE.replace("data.jsonl", "nope.jsonl"), workdir)
    assert info.value.key == "data.path" and "does not exist" in info.value.detail


def test_missing_model_dir(workdir):
    with pytest.raises(ConfigError) as info:
        parse(BASE.replace('path = "model"', 'path = "./models/none"'), workdir)
    assert info.value.key == "model.path"


def test_missing_file_names_the_file(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "missing.toml")
    assert "missing.toml" in str(info.value) and "not found" in str(info.value)


def test_toml_syntax_error_says_where(tmp_path):
    bad = tmp_path / "broken.toml"
    bad.write_text("[grpo\ngroup_size = 4\n")
    with pytest.raises(ConfigError) as info:
        load_config(bad)
    assert "broken.toml" in str(info.value) and "line 1" in str(info.value)


def test_quickstart_validates(root):
    cfg = load_config(root / "examples" / "quickstart.toml")
    assert [r.label for r in cfg.rewards] == ["accuracy", "xml_format"]


def test_the_agent_demo_validates_and_its_tool_has_a_schema(root):
    from grpo_tui.worker.engine.scoring.tools import load_tools

    cfg = load_config(root / "examples" / "agent_calculator.toml")
    assert cfg.tools[0].function == f"{root / 'examples' / 'tools' / 'calculator.py'}:multiply"
    schema = load_tools(cfg.tools)[0].schema["function"]
    assert schema["name"] == "multiply" and schema["parameters"]["required"] == ["a", "b"]


# ---------------------------------------------------------------- [async] (docs/async.md)

ASYNC_BASE = '[model]\npath = "m"\n[data]\npath = "d.jsonl"\n[[rewards]]\nname = "length"\n'


@pytest.mark.parametrize("extra, key, words", [
    ("[async]\nmax_staleness = -1\n", "async.max_staleness", "0 (synchronous) or more"),
    ("[async]\nmax_staleness = 1\nweight_sync_steps = 3\n", "async.weight_sync_steps", "max_staleness of at least 2"),
    ("[async]\nmax_staleness = 1\nimportance_sampling_mode = \"tokens\"\n", "async.importance_sampling_mode", "token_truncate"),
    ("[async]\nmax_staleness = 1\n[training]\nsteps_per_generation = 2\n", "async.max_staleness", "steps_per_generation"),
    ("[async]\nmax_staleness = 1\n[curriculum]\nstrategy = \"pass_rate\"\n", "async.max_staleness", "curriculum"),
    ("[async]\nmax_staleness = 1\n[distributed]\nranks = 2\n", "async.max_staleness", "several learner ranks"),
    ("[async]\nmax_staleness = 1\n[grpo]\nloss_type = \"vespo\"\n", "async.importance_sampling_mode", "token_truncate"),
    ("[async]\nmax_staleness = 1\ngenerator_hosts = [\"a\", \"b\"]\n", "async.generator_hosts", "one host"),
])
def test_async_combinations_that_cannot_work_are_one_sentence_at_check_time(extra, key, words):
    with pytest.raises(ConfigError) as info:
        parse_config(ASYNC_BASE + extra, check_paths=False)
    assert info.value.key == key and words in str(info.value)
