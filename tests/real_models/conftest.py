from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def qwen_bpe_dir() -> Path:
    """The realistic Qwen3 + real Qwen BPE folder (built once, then cached between runs)."""
    from tests.real_models.qwen_bpe import cached_model_dir

    return cached_model_dir()


@pytest.fixture(scope="session")
def qwen_tok(qwen_bpe_dir):
    """mlx-lm's tokenizer wrapper, exactly as ``mlx_lm.load`` (and so the worker) builds it."""
    import json

    from mlx_lm.utils import load_tokenizer

    config = json.loads((qwen_bpe_dir / "config.json").read_text())
    generation = json.loads((qwen_bpe_dir / "generation_config.json").read_text())
    return load_tokenizer(qwen_bpe_dir, eos_token_ids=generation.get("eos_token_id", config.get("eos_token_id")))
