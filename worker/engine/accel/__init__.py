"""Optional accelerations for MLX's CPU backend (docs/architecture.md, "Accelerations").

Each module is a leaf: it imports nothing from the engine outside this folder, and only the engine
imports it. ``engine.plan`` decides which of them run; ``patches`` is what replaces stock mlx-lm.
"""
