"""Made-up records of the worker's store, for the store's and the control's tests."""

from __future__ import annotations

from grpo_tui.worker.trainer_contract import Generation


def generation(prompt_index: int, group_index: int, reward: float | None, tool_calls=()) -> Generation:
    return Generation(
        prompt_index=prompt_index, group_index=group_index, prompt=f"prompt {prompt_index}",
        completion=f"answer {group_index}", raw_completion=f"<think>hm</think>answer {group_index}",
        thinking="hm", reward=reward, reward_details={"accuracy": reward, "xml_format": None},
        advantage=0.5 - group_index, num_tokens=7, finish_reason="stop", tool_calls=list(tool_calls),
    )  # fmt: skip
