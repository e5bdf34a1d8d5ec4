import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"

# Keep MLX/BLAS from oversubscribing the 2-core CI machine when tests run side by side.
os.environ.setdefault("OMP_NUM_THREADS", "2")


@pytest.fixture
def root() -> Path:
    return ROOT
