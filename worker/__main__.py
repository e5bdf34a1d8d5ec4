import sys

print("grpo-tui: the worker is not built yet in this version.", file=sys.stderr)
sys.exit(2)
