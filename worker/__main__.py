"""``python -m grpo_tui.worker CONFIG [--plain]`` — see ``main.py``."""

import sys

from grpo_tui.worker.main import main

sys.exit(main())
