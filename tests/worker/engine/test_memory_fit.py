"""``memory_limit_gb``'s estimate and choice: more memory never picks a slower set of switches, each
switch lowers the estimate, the user's own switches stay on, nothing fitting is one sentence, and
MLX's memory limit that the worker sets from it holds the evaluation back."""

import pytest

from grpo_tui.protocol.config import ConfigError, parse_config
from grpo_tui.worker.engine import memory_fit
from tests.helpers.loss_cases import SWITCH_CONFIG, head_gradient_peak, small_model

QWEN3_06B = memory_fit.StepShape(parameters=596_049_920, trainable=596_049_920, bytes_per_value=4, vocabulary=151_936,
                                 hidden=1024, intermediate=3072, heads=16, layers=28, rows=8, group=8,
                                 prompt_tokens=32, completion_tokens=256, reference=False)


def _config(training: str):
    return parse_config(SWITCH_CONFIG.format(loss_type="dapo", training=training), check_paths=False)


def test_each_switch_lowers_the_estimate():
    plain = memory_fit.estimate(QWEN3_06B, False, 0, 0)
    chunked = memory_fit.estimate(QWEN3_06B, False, 256, 0)
    checkpointed = memory_fit.estimate(QWEN3_06B, True, 256, 0)
    split = memory_fit.estimate(QWEN3_06B, True, 256, 2)
    assert plain > chunked > checkpointed > split
    static = 4 * 4 * QWEN3_06B.parameters
    assert static < split < plain


def test_the_choice_is_the_fastest_that_fits():
    model = small_model(False)
    roomy = memory_fit.choose(model, _config("memory_limit_gb = 100.0"), prompt_tokens=10)
    assert (roomy.gradient_checkpointing, roomy.vocab_chunk_size, roomy.logprob_batch_size) == (False, 0, 0)
    kept = memory_fit.choose(model, _config("memory_limit_gb = 100.0\ngradient_checkpointing = true\n"
                                            "logprob_batch_size = 3"), prompt_tokens=10)
    assert kept.gradient_checkpointing and kept.logprob_batch_size == 3
    assert "gradient_checkpointing = true" in kept.describe(100.0)


def test_the_06b_shape_under_12_gb_turns_on_what_it_needs():
    training = _config("memory_limit_gb = 12.0").training
    choice = memory_fit.choose_for(QWEN3_06B, training)
    # the chunk first (it recomputes the head only), checkpointing too when that is not enough
    assert choice.estimate_gb <= 12.0 and choice.vocab_chunk_size == memory_fit.CHUNK
    assert memory_fit.estimate(QWEN3_06B, False, 0, 0) / memory_fit.GB > 12.0  # the default would not fit
    roomy = memory_fit.choose_for(QWEN3_06B, _config("memory_limit_gb = 64.0").training)
    assert roomy.vocab_chunk_size == 0 and not roomy.gradient_checkpointing


def test_nothing_fitting_is_one_sentence_naming_the_key():
    with pytest.raises(ConfigError) as info:
        memory_fit.choose(small_model(False), _config("memory_limit_gb = 0.01"), prompt_tokens=10)
    assert info.value.key == "training.memory_limit_gb"
    assert "0.01 GB is too little for this model" in info.value.detail and "\n" not in str(info.value)


def test_mlx_s_memory_limit_stops_the_evaluation_running_ahead():
    # What memory_limit_gb relies on (trainer: mx.set_memory_limit(evaluation_limit(...))): past the
    # limit MLX waits for queued work before it allocates more, so fewer chunks' logits (32 MB
    # each here) are alive at once. The weight gradient alone is 64 MB.
    free = head_gradient_peak(in_place=True)
    limited = head_gradient_peak(in_place=True, limit_above_inputs=64 * 2**20)
    assert limited <= free - 3 * 32 * 2**20


def test_the_evaluation_limit_leaves_the_process_its_allowance():
    assert memory_fit.evaluation_limit(12.0) == int(12.0 * memory_fit.GB - memory_fit.PROCESS_BYTES)
    assert memory_fit.evaluation_limit(1.0) == int(0.5 * memory_fit.GB)
