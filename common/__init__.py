"""What the dashboard and the worker both do outside the contract: the checks before a run loads
(output folder, model, data, resume), BLAS setup, the commands and ``pip install`` lines printed
for a user, ``[distributed]`` flags, TRL's metric names and TOML output of a resolved config.

MLX-free: it depends on ``grpo_tui.protocol``, msgspec and the standard library only, so either side
(and ``grpo-tui check``) imports it without MLX. It never imports ``tui`` or ``worker``.
"""
