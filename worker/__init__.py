"""The headless MLX trainer process. Imports ``grpo_tui.protocol``, never ``grpo_tui.tui``."""

import os

# MLX reads this once, at its first evaluation: a wider evaluation order lets work on the two CPU
# streams interleave (``two_cores``). A user's own setting wins.
os.environ.setdefault("MLX_BFS_MAX_WIDTH", "200")
