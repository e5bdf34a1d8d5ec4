"""pytest plugin (loaded with ``-p tests.helpers.blas_reexec`` before output capture starts): run the test
session under the same optimized BLAS that the worker uses, so in-process MLX tests are not 30-70×
slower on Linux. Re-executes pytest once with the library preloaded; a no-op elsewhere."""

from grpo_tui.common.blas import reexec_if_needed

reexec_if_needed()
