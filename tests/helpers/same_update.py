"""One assertion shared by the tests that prove a path updates the model exactly like another."""

import numpy as np
import pytest


def assert_same_update(got: tuple, want: tuple, **param_tolerance: float) -> None:
    """``got`` and ``want`` are (PassResult, {name: parameter}, [old log-probs per batch]) after one
    ``update.optimize_pass``: same loss, norm, metrics, old log-probs and updated parameters."""
    (result, params, old), (expected, expected_params, expected_old) = got, want
    assert result.applied and result.loss == pytest.approx(expected.loss, rel=1e-5, abs=1e-7)
    assert result.grad_norm == pytest.approx(expected.grad_norm, rel=1e-4)
    for name in expected.stats:
        # float32 metrics: an entropy of ~8 summed in another order differs in its 7th digit
        assert result.stats[name] == pytest.approx(expected.stats[name], rel=1e-6, abs=1e-6), name
    for a, b in zip(old, expected_old):
        np.testing.assert_allclose(a, b, atol=1e-5)
    for name, p in expected_params.items():
        np.testing.assert_allclose(np.array(params[name]), np.array(p), err_msg=name, **param_tolerance)
