"""The MLX engine: the GRPO step and everything it runs on (docs/architecture.md, "Step data path").

The algorithm is ``grpo``, ``rewards``, ``rollout``, ``batch``, ``logps``, ``loss`` and ``update``;
``plan`` decides which optional accelerations (``accel/``) run for a model.
"""
