"""Our Qwen3-style chat template through ``tokenizer.apply_chat_template`` (mlx-lm's wrapper, as the
worker calls it): system prompts, ``enable_thinking``, tools, assistant tool calls, tool responses."""

from __future__ import annotations

import json

from tests.real_models import engine

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two numbers",
            "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                           "required": ["a", "b"]},
        },
    },
    {"type": "function", "function": {"name": "météo", "description": "Le temps à Paris 🌧", "parameters": {}}},
]  # fmt: skip
USER = [{"role": "user", "content": "What is 1 + 2? 世界"}]
SYSTEM = [{"role": "system", "content": "You are terse."}]


def render(tok, messages, **kwargs):
    return tok.apply_chat_template(messages, tokenize=False, **kwargs)


def test_user_turn_and_generation_prompt(qwen_tok):
    assert render(qwen_tok, USER) == "<|im_start|>user\nWhat is 1 + 2? 世界<|im_end|>\n"
    opened = render(qwen_tok, USER, add_generation_prompt=True)
    assert opened == "<|im_start|>user\nWhat is 1 + 2? 世界<|im_end|>\n<|im_start|>assistant\n"
    # enable_thinking left to the model (True / not given): the model opens <think> itself.
    assert render(qwen_tok, USER, add_generation_prompt=True, enable_thinking=True) == opened


def test_enable_thinking_false_opens_the_turn_with_an_empty_think_block(qwen_tok):
    text = render(qwen_tok, USER, add_generation_prompt=True, enable_thinking=False)
    assert text.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    ids = qwen_tok.apply_chat_template(USER, add_generation_prompt=True, enable_thinking=False)
    # <|im_end|> "\n" <|im_start|> "assistant" "\n" <think> "\n\n" </think> "\n\n": the real ids
    assert ids[-9:] == [151645, 198, 151644, 77091, 198, 151667, 271, 151668, 271]


def test_system_prompt(qwen_tok):
    text = render(qwen_tok, SYSTEM + USER, add_generation_prompt=True)
    assert text.startswith("<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\n")
    ids = qwen_tok.apply_chat_template(SYSTEM + USER, add_generation_prompt=True)
    assert ids[:3] == [151644, 8948, 198]  # <|im_start|> "system" "\n"
    assert ids.count(151644) == 3 and ids.count(151645) == 2


def test_tools_without_a_system_prompt(qwen_tok):
    text = render(qwen_tok, USER, tools=TOOLS, add_generation_prompt=True)
    head, _, rest = text.partition("<|im_end|>\n")
    assert head.startswith("<|im_start|>system\n# Tools\n\nYou may call one or more functions")
    listed = head.split("<tools>\n", 1)[1].split("\n</tools>", 1)[0].split("\n")
    assert [json.loads(line) for line in listed] == TOOLS  # each schema as one JSON line
    assert "Le temps à Paris 🌧" in head  # tojson keeps non-ASCII as is
    assert '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>' in head
    assert rest == "<|im_start|>user\nWhat is 1 + 2? 世界<|im_end|>\n<|im_start|>assistant\n"


def test_tools_with_a_system_prompt_share_the_system_turn(qwen_tok):
    text = render(qwen_tok, SYSTEM + USER, tools=TOOLS, add_generation_prompt=True, enable_thinking=False)
    assert text.startswith("<|im_start|>system\nYou are terse.\n\n# Tools\n\n")
    assert text.count("<|im_start|>system") == 1 and text.count("You are terse.") == 1
    assert text.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_a_tool_calling_conversation(qwen_tok):
    messages = SYSTEM + USER + [
        {"role": "assistant", "content": "", "reasoning_content": "Use the tool.",
         "tool_calls": [{"type": "function", "function": {"name": "add", "arguments": {"a": 1, "b": 2}}},
                        {"type": "function", "function": {"name": "météo", "arguments": '{"ville": "Zürich"}'}}]},
        {"role": "tool", "content": "3"},
        {"role": "tool", "content": "pluie 🌧"},
        {"role": "assistant", "content": "3, and rain."},
    ]  # fmt: skip
    text = render(qwen_tok, messages, tools=TOOLS)
    turns = text.split("<|im_start|>")[1:]
    assert [t.split("\n", 1)[0] for t in turns] == ["system", "user", "assistant", "user", "assistant"]
    assert turns[2] == (
        "assistant\n<think>\nUse the tool.\n</think>\n\n"
        '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>\n'
        '<tool_call>\n{"name": "météo", "arguments": {"ville": "Zürich"}}\n</tool_call><|im_end|>\n'
    )
    assert turns[3] == "user\n<tool_response>\n3\n</tool_response>\n<tool_response>\npluie 🌧\n</tool_response><|im_end|>\n"
    assert turns[4] == "assistant\n3, and rain.<|im_end|>\n"
    # The worker's parser reads back exactly the calls the template wrote.
    calls = engine.parse_tool_calls(turns[2])
    assert [(c.status, c.name, c.arguments) for c in calls] == [
        ("ok", "add", {"a": 1, "b": 2}), ("ok", "météo", {"ville": "Zürich"})
    ]
    ids = qwen_tok.apply_chat_template(messages, tools=TOOLS)
    for special in (151657, 151658, 151665, 151666, 151667, 151668):  # tool_call, tool_response, think: single ids
        assert special in ids
    assert qwen_tok.decode(ids) == text


def test_the_worker_renders_dataset_prompts_with_this_template(qwen_tok, tmp_path):
    """``data.render`` (what the trainer runs): chat template applied, system prompt inserted."""
    from grpo_tui.protocol.config import DataConfig

    data = engine.data()
    rows = [{"prompt": "Say 世界 🎉", "answer": "x"},
            {"prompt": [{"role": "user", "content": "héllo"}, {"role": "assistant", "content": "hi"},
                        {"role": "user", "content": "again"}]}]  # fmt: skip
    examples = []
    for i, row in enumerate(rows):  # one file per format: a file that mixes them is a mistake
        path = tmp_path / f"d{i}.jsonl"
        path.write_text(json.dumps(row, ensure_ascii=False) + "\n")
        examples += data.read_dataset(str(path), DataConfig(path=str(path), system_prompt="Be kind."))[0]
    for thinking in (False, True):
        data.render(examples, qwen_tok, thinking)
        for ex in examples:
            expected = render(qwen_tok, ex.messages, add_generation_prompt=True, enable_thinking=thinking)
            assert ex.prompt_text == expected
            assert ex.prompt_ids == qwen_tok.encode(expected)
            assert ex.prompt_text.startswith("<|im_start|>system\nBe kind.<|im_end|>\n")
            assert ex.prompt_text.endswith("<think>\n\n</think>\n\n") is (not thinking)


def test_the_agent_s_tool_messages_after_the_model_s_end_of_turn_are_the_template_s(qwen_tok):
    # A turn with two calls that the model ends with <|im_end|> (its own token): the rollout appends
    # both results, in order, as the template renders them, without a second <|im_end|>.
    from grpo_tui.protocol.messages import Turn
    from grpo_tui.worker.engine.policy import agent

    results = [Turn(role="tool", content="3", name="add"), Turn(role="tool", content="pluie 🌧", name="météo")]
    glue = agent.tool_glue(qwen_tok, results, False, qwen_tok.eos_token_id)
    assert qwen_tok.eos_token_id == 151645 and glue[0] != 151645
    assert qwen_tok.decode(glue) == (
        "\n<|im_start|>user\n<tool_response>\n3\n</tool_response>\n<tool_response>\npluie 🌧\n</tool_response>"
        "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")
