"""TRL 1.16's advantages (both multi_objective_aggregation branches), transcribed from torch to
numpy (the reference the worker's are checked against)."""

from __future__ import annotations

import warnings

import numpy as np


def trl_nanstd(x: np.ndarray, axis=None, keepdims=False) -> np.ndarray:
    # trl/trainer/utils.py nanstd, torch -> numpy
    mean = np.nanmean(x, axis=axis, keepdims=True)
    variance = np.nanmean((x - mean) ** 2, axis=axis, keepdims=True)
    count = np.sum(~np.isnan(x), axis=axis, keepdims=True)
    correction = np.where(count > 1, count / np.maximum(count - 1, 1), np.nan)
    std = np.sqrt(variance * correction)
    return std if keepdims else np.squeeze(std, axis=axis)


def trl_normalize_then_sum(rewards_per_func: np.ndarray, reward_weights: np.ndarray, num_generations: int) -> np.ndarray:
    with warnings.catch_warnings(), np.errstate(invalid="ignore", divide="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy's nanmean of an all-NaN slice (torch's is silent)
        return _trl(rewards_per_func, reward_weights, num_generations)


def _trl(rewards_per_func: np.ndarray, reward_weights: np.ndarray, num_generations: int) -> np.ndarray:
    # trl/trainer/grpo_trainer.py (1.16.0) _generate_and_score_completions, the normalize_then_sum branch
    unscorable_mask = np.isnan(rewards_per_func).all(axis=1)
    k = rewards_per_func.shape[1]
    grouped = rewards_per_func.reshape(-1, num_generations, k)
    mean_k = np.nanmean(grouped, axis=1, keepdims=True)
    std_k = trl_nanstd(grouped, axis=1, keepdims=True) if num_generations > 1 else np.zeros_like(mean_k)
    reward_k = (grouped - mean_k) / (std_k + 1e-4)
    reward_k = reward_k.reshape(-1, k)
    rewards = np.nansum(reward_k * reward_weights[None, :], axis=1)
    rewards[unscorable_mask] = np.nan
    std_rewards = np.broadcast_to(trl_nanstd(rewards), rewards.shape) if rewards.size > 1 else np.zeros_like(rewards)
    advantages = (rewards - np.nanmean(rewards)) / (std_rewards + 1e-4)
    return np.nan_to_num(advantages, nan=0.0)


def trl_sum_then_normalize(rewards_per_func: np.ndarray, reward_weights: np.ndarray, num_generations: int,
                           scale_rewards: str = "group") -> np.ndarray:
    with warnings.catch_warnings(), np.errstate(invalid="ignore", divide="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        return _trl_sum(rewards_per_func, reward_weights, num_generations, scale_rewards)


def _trl_sum(rewards_per_func: np.ndarray, reward_weights: np.ndarray, num_generations: int, scale_rewards: str) -> np.ndarray:
    # trl/trainer/grpo_trainer.py (1.16.0) _generate_and_score_completions, the sum_then_normalize branch
    unscorable_mask = np.isnan(rewards_per_func).all(axis=1)
    rewards = np.nansum(rewards_per_func * reward_weights[None, :], axis=1)
    rewards[unscorable_mask] = np.nan
    mean_grouped_rewards = np.nanmean(rewards.reshape(-1, num_generations), axis=1)
    mean_grouped_rewards = np.repeat(mean_grouped_rewards, num_generations)
    if scale_rewards in ("group", "none"):
        if num_generations > 1:
            std_rewards = np.repeat(trl_nanstd(rewards.reshape(-1, num_generations), axis=1), num_generations)
        else:
            std_rewards = np.zeros_like(rewards)
    else:  # "batch"
        std_rewards = np.broadcast_to(trl_nanstd(rewards), rewards.shape) if rewards.size > 1 else np.zeros_like(rewards)
    advantages = rewards - mean_grouped_rewards
    if scale_rewards != "none":
        advantages = advantages / (std_rewards + 1e-4)
    return np.nan_to_num(advantages, nan=0.0)
