"""One completion shape from the engine to the screen: a generation's ``sample`` frame carries every
field the two share, as the engine made it, and its place in the step."""

from grpo_tui.protocol import codec
from grpo_tui.protocol import messages as m
from grpo_tui.worker.trainer_contract import Generation


def test_a_sample_frame_is_its_generation_as_the_dashboard_decodes_it():
    gen = Generation(
        prompt_index=2, group_index=1, prompt="2+2=", completion="4", raw_completion="<think>sum</think>4",
        thinking="sum", reward=1.5, reward_details={"accuracy": 1.0, "format": None}, advantage=0.25,
        num_tokens=9, finish_reason="length", reward_notes={"format": "no tags"},
        tool_calls=[m.ToolCall(index=0, name="add", arguments={"a": 2}, raw="{}")],
        turns=[m.Turn(role="assistant", content="4")],
    )
    sample = codec.decode_event(codec.encode(gen.to_sample(7, group_size=4, display="all")))
    assert isinstance(sample, m.Sample)
    assert (sample.step, sample.index, sample.group, sample.display) == (7, 9, 2, "all")
    for name in m.SCORED_COMPLETION_FIELDS:
        assert getattr(sample, name) == getattr(gen, name), name
    assert set(m.SCORED_COMPLETION_FIELDS) >= {"prompt", "completion", "reward", "thinking", "tool_calls", "turns"}
