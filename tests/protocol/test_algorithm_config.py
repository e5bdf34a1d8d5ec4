"""The checks of issue 35's keys when a config is read (the reference sync's and the sampling's)."""

from __future__ import annotations

import pytest

from grpo_tui.protocol.config import ConfigError, parse_config

BASE = '[model]\npath="m"\n[data]\npath="d.jsonl"\n[[rewards]]\nname="accuracy"\n[grpo]\n'


def test_sync_ref_model_needs_a_reference_and_full_fine_tuning():
    with pytest.raises(ConfigError, match="grpo.sync_ref_model: True needs grpo.beta > 0"):
        parse_config(BASE + "sync_ref_model = true\n", check_paths=False)
    lora = BASE.replace('[data]', '[model.lora]\nrank = 4\n[data]')
    with pytest.raises(ConfigError, match="grpo.sync_ref_model: is not supported with \\[model.lora\\]"):
        parse_config(lora + "beta = 0.1\nsync_ref_model = true\n", check_paths=False)
    with pytest.raises(ConfigError, match="ref_model_mixup_alpha: 1.5 must be in"):
        parse_config(BASE + "beta = 0.1\nref_model_mixup_alpha = 1.5\n", check_paths=False)
    grpo = parse_config(BASE + "beta = 0.1\nsync_ref_model = true\n", check_paths=False).grpo
    assert (grpo.ref_model_mixup_alpha, grpo.ref_model_sync_steps) == (0.6, 512)  # TRL's defaults


def test_dynamic_sampling_keys():
    grpo = parse_config(BASE, check_paths=False).grpo
    assert (grpo.dynamic_sampling, grpo.max_sampling_rounds) == (False, 3)
    with pytest.raises(ConfigError, match="grpo.max_sampling_rounds: 0 must be at least 1"):
        parse_config(BASE + "dynamic_sampling = true\nmax_sampling_rounds = 0\n", check_paths=False)
