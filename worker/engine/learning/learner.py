"""The learner: the optimizer, the compiled losses, the learning-rate schedule, the reference model
and TRL's entropy controller (docs/architecture.md, "The step's spine"). A scored batch in, one
update of the policy's weights out; it also saves and loads what a checkpoint keeps of them.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten, tree_unflatten

from grpo_tui.protocol.config import Config
from grpo_tui.protocol.layout import OPTIMIZER_FILE
from grpo_tui.protocol.messages import LogLevel
from grpo_tui.worker.engine.distributed import Ranks
from grpo_tui.worker.engine.learning.batch import MicroBatch
from grpo_tui.worker.engine.learning.grpo import EntropyCoefficient
from grpo_tui.worker.engine.learning.loss import LossFunctions
from grpo_tui.worker.engine.learning.schedule import scheduled_lr
from grpo_tui.worker.engine.learning.update import PassResult, make_optimizer, micro_batches, optimize_pass
from grpo_tui.worker.engine.models import model_io
from grpo_tui.worker.engine.models.plan import EnginePlan
from grpo_tui.worker.engine.policy.rollout import Completion
from grpo_tui.worker.engine.prompts.data import Example

REFERENCE_FILE = "reference.safetensors"  # grpo.sync_ref_model: the synced reference, in checkpoints
# What a compiled function bakes in: a change of one drops the traces, built again at the next step.
TRACED_KEYS = ("generation.temperature", "generation.max_completion_length", "grpo.epsilon", "grpo.epsilon_high",
               "grpo.beta")


class Learner:
    """``learn`` one step from its packed micro-batches; ``pack`` builds them from scored completions."""

    def __init__(self, config: Config, model: nn.Module, ref_model: nn.Module | None, plan: EnginePlan,
                 ranks: Ranks, log: Callable[[LogLevel, str], None]) -> None:
        self.config = config
        self.model = model  # the policy's weights: the same object
        self.ref_model = ref_model  # grpo.beta > 0: the KL's reference
        self.plan = plan
        self.ranks = ranks
        self.log = log
        self.losses = LossFunctions()  # compiled functions live as long as the model they were traced for
        self.entropy_coef = EntropyCoefficient.from_config(config)  # TRL's entropy bonus, across steps
        self.retrace_from: float | None = None  # a live change dropped the traces then
        self.optimizer = make_optimizer(config)
        # AdamW's moments now rather than inside the first update: the first step's peak is then the
        # run's (what the dashboard shows and a memory limit is about), and the second step does not
        # grow the heap by the moments' size and page-fault it in.
        self.optimizer.init(model.trainable_parameters())
        mx.eval(self.optimizer.state)

    @property
    def learning_rate(self) -> float:
        return float(self.optimizer.learning_rate.item())

    def pack(self, examples: list[Example], completions: list[Completion], advantages: list[float],
             padding: list[bool] | None) -> list[MicroBatch]:
        """This rank's micro-batches of a scored batch, with the reference's log-probabilities."""
        return micro_batches(examples, completions, advantages, padding, self.config, self.plan, self.ranks, self.ref_model)

    def learn(self, step: int, batches: list[MicroBatch], total_steps: int, num_items: float | None = None) -> list[PassResult]:
        """``grpo.num_iterations`` optimiser passes over this rank's micro-batches at ``step``'s
        learning rate, then the reference's sync when due. ``num_items``: the token count the
        batch-normalised losses divide by, where a generation feeds several steps."""
        cfg, g = self.config, self.config.grpo
        # A pure function of the step: a resumed run continues the same sequence.
        self.optimizer.learning_rate = scheduled_lr(step, cfg.training, total_steps)
        self.model.train()
        passes = [optimize_pass(self.model, self.optimizer, batches, cfg, self.plan,
                                record_old=(k == 0 and g.num_iterations > 1), functions=self.losses,
                                ranks=self.ranks, entropy_coef=self.entropy_coef, num_items=num_items)
                  for k in range(g.num_iterations)]
        self.model.eval()
        if self.ref_model is not None and g.sync_ref_model and step % g.ref_model_sync_steps == 0:
            # TRL syncs at the end of every ref_model_sync_steps-th optimizer step (on each rank alike)
            model_io.mix_into_reference(self.ref_model, self.model, g.ref_model_mixup_alpha)
        return passes

    # ------------------------------------------------------------ live changes (docs/steering.md)

    def live_problem(self, key: str, value: Any) -> str | None:
        if key == "grpo.beta" and value > 0 and self.ref_model is None:
            return (f"{value!r} needs a reference model, and none is loaded (the run started with beta = 0); "
                    "beta can go down to 0 live, not up from it")
        return None

    def follow(self, keys: list[str]) -> None:
        """The config now holds live changes of ``keys``: a traced setting drops the compiled losses."""
        if any(k in TRACED_KEYS for k in keys):
            self.losses = LossFunctions()  # the old traces go; the next step traces the new settings once
            self.retrace_from = time.perf_counter()

    def retraced(self, step: int, rollout_s: float, decode_traced: bool) -> None:
        """The first step after a change of a traced setting says how long building its functions took."""
        if self.retrace_from is None:
            return
        self.retrace_from = None
        self.log("info", f"step {step}: the compiled loss was built again for the changed settings in "
                         f"{self.losses.traced_s:.2f} s"
                         + (f" (the rollout, its decode step traced again with it, took {rollout_s:.2f} s)"
                            if decode_traced else ""))

    # ------------------------------------------------------------ checkpoints

    def save(self, directory: Path, tokenizer: Any) -> None:
        model_io.save(self.model, tokenizer, self.config.model, directory)
        if self.ref_model is not None and self.config.grpo.sync_ref_model:
            # the synced reference is training state: a resume continues with it, not the base model
            mx.save_safetensors(str(directory / REFERENCE_FILE), dict(tree_flatten(self.ref_model.parameters())))

    def save_optimizer(self, path: Path) -> None:
        mx.save_safetensors(str(path), dict(tree_flatten(self.optimizer.state)))

    def load(self, directory: Path) -> None:
        model_io.load_weights(self.model, self.config.model, directory)
        reference = directory / REFERENCE_FILE
        if self.ref_model is not None and self.config.grpo.sync_ref_model and reference.exists():
            self.ref_model.load_weights(str(reference))
            mx.eval(self.ref_model.parameters())
        path = directory / OPTIMIZER_FILE
        if path.exists():
            self.optimizer.state = {}  # the fresh moments go before the saved ones arrive: not both at once
            self.optimizer.state = tree_unflatten(list(mx.load(str(path)).items()))
            self.optimizer.learning_rate = self.config.training.learning_rate
            mx.eval(self.optimizer.state)
