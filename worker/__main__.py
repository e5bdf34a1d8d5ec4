"""``python -m grpo_tui.worker CONFIG [--plain]`` — see ``main.py``."""

import sys

from .main import main

sys.exit(main())
