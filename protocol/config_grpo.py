"""``[grpo]``: the algorithm (group size, loss type, clipping, KL, advantages; docs/config.md)."""

from __future__ import annotations

from typing import Literal

from grpo_tui.protocol.config_base import Section as _Section, invalid as _invalid


class GrpoConfig(_Section):
    group_size: int = 4
    loss_type: Literal["grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo"] = "dapo"
    epsilon: float = 0.2
    epsilon_high: float | None = None  # defaults to epsilon
    beta: float = 0.0
    scale_rewards: Literal["group", "batch", "none"] = "group"
    # TRL 1.16's: advantages of the weighted sum (default), or each reward function normalised in its
    # group, then weighted, summed and normalised over the batch (scale_rewards is then not read)
    multi_objective_aggregation: Literal["sum_then_normalize", "normalize_then_sum"] = "sum_then_normalize"
    importance_sampling_level: Literal["token", "sequence"] = "token"
    mask_truncated_completions: bool = False
    mask_repetition_completions: bool = False  # also drop finish = "repetition" completions
    num_iterations: int = 1
    recipe: Literal["gspo", "dapo", "dr_grpo"] | None = None  # published settings (protocol/recipes.py)
    # DAPO's dynamic sampling: drop groups whose rewards are all equal, roll out more prompts until
    # the step has batch_size informative groups or max_sampling_rounds rollouts ran.
    dynamic_sampling: bool = False
    max_sampling_rounds: int = 3
    # TRL's top_entropy_quantile ("Beyond the 80/20 rule"): the policy loss keeps only this top
    # share of each micro-batch's tokens by entropy; 1.0 keeps every token.
    top_entropy_quantile: float = 1.0
    # TRL 1.16's options of the loss (docs/config.md, "Loss types"), under TRL's names and defaults,
    # except use_bias_correction_kl: off in a TOML run, as before it existed (GRPOConfig sets TRL's True)
    delta: float | None = None  # two-sided clipping: the ratio capped at delta (grpo, bnpo, dr_grpo, dapo, luspo)
    use_bias_correction_kl: bool = False  # the KL term times the importance ratio (DeepSeek-V3.2)
    off_policy_mask_threshold: float | None = None  # drop negative-advantage completions this far off-policy
    sapo_temperature_pos: float = 1.0
    sapo_temperature_neg: float = 1.05
    vespo_k_pos: float = 2.0
    vespo_lambda_pos: float = 3.0
    vespo_k_neg: float = 3.0
    vespo_lambda_neg: float = 2.0
    # TRL 1.16's entropy bonus: the loss minus entropy_coef × the micro-batch's mean token entropy;
    # use_adaptive_entropy moves the coefficient by entropy_coef_delta each optimizer step, within
    # [entropy_coef_min, entropy_coef_max], up while the entropy is at or below entropy_target
    # (and applies it only then), down otherwise
    entropy_coef: float = 0.0
    use_adaptive_entropy: bool = False
    entropy_coef_min: float = 0.0
    entropy_coef_max: float = 1.0
    entropy_coef_delta: float = 0.005
    entropy_target: float = 0.2
    # TRL's TR-DPO reference sync (beta > 0): every ref_model_sync_steps steps the reference
    # becomes ref_model_mixup_alpha * policy + (1 - alpha) * reference.
    sync_ref_model: bool = False
    ref_model_mixup_alpha: float = 0.6
    ref_model_sync_steps: int = 512

    def __post_init__(self) -> None:
        if self.group_size < 2:
            raise _invalid("group_size", self.group_size, "must be at least 2 (advantages compare a group)")
        if self.epsilon <= 0:
            raise _invalid("epsilon", self.epsilon, "must be > 0")
        if self.epsilon_high is None:
            self.epsilon_high = self.epsilon
        elif self.epsilon_high <= 0:
            raise _invalid("epsilon_high", self.epsilon_high, "must be > 0")
        if self.beta < 0:
            raise _invalid("beta", self.beta, "must be >= 0")
        if self.num_iterations < 1:
            raise _invalid("num_iterations", self.num_iterations, "must be at least 1")
        if self.max_sampling_rounds < 1:
            raise _invalid("max_sampling_rounds", self.max_sampling_rounds, "must be at least 1 (1 = drop groups, no extra rollout)")
        if self.sync_ref_model and self.beta == 0:
            raise _invalid("sync_ref_model", self.sync_ref_model, "needs grpo.beta > 0: with beta = 0 no reference model "
                                                                  "is used, so there is nothing to synchronize (as in TRL)")
        if not 0.0 <= self.ref_model_mixup_alpha <= 1.0:
            raise _invalid("ref_model_mixup_alpha", self.ref_model_mixup_alpha, "must be in [0, 1]")
        if self.ref_model_sync_steps < 1:
            raise _invalid("ref_model_sync_steps", self.ref_model_sync_steps, "must be at least 1")
        if self.delta is not None and self.delta <= 0:
            raise _invalid("delta", self.delta, "must be > 0 (TRL recommends more than 1 + epsilon)")
        if self.off_policy_mask_threshold is not None and self.off_policy_mask_threshold <= 0:
            raise _invalid("off_policy_mask_threshold", self.off_policy_mask_threshold, "must be > 0 (e.g. 0.5)")
        for name in ("sapo_temperature_pos", "sapo_temperature_neg"):  # the SAPO loss divides by them
            if getattr(self, name) <= 0:
                raise _invalid(name, getattr(self, name), "must be > 0")
        if not 0.0 <= self.top_entropy_quantile <= 1.0:
            raise _invalid("top_entropy_quantile", self.top_entropy_quantile, "must be in [0, 1] (1.0 keeps every token)")
        self._check_entropy_bonus()

    def _check_entropy_bonus(self) -> None:
        for name in ("entropy_coef_min", "entropy_coef_delta", "entropy_target"):
            if getattr(self, name) < 0:
                raise _invalid(name, getattr(self, name), "must be >= 0")
        if self.entropy_coef_max < self.entropy_coef_min:
            raise _invalid("entropy_coef_max", self.entropy_coef_max,
                           f"must be >= entropy_coef_min ({self.entropy_coef_min})")
