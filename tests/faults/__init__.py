"""Fault tests: crashes, bad input and hostile model output never lose data (issue 8)."""

from pathlib import Path

# The worker's test-only trainer hook pointed at the real Trainer plus fault hooks (fault_trainer.py).
FAULT_TRAINER = f"{Path(__file__).with_name('fault_trainer.py')}:FaultTrainer"
