"""Datasets in the formats users have: JSONL, JSON, CSV, Parquet, a save_to_disk folder (a hub id
needs the network and is not tested here); tool schemas from a column or a file; errors that name
the file and row."""

from __future__ import annotations

import json

import datasets
import pytest

from grpo_tui.worker.engine.prompts.dataset_sources import DatasetSourceError, iter_tools, read, read_tools_file

ADD = {"type": "function", "function": {"name": "add", "description": "Add two numbers",
                                        "parameters": {"type": "object", "properties": {"a": {"type": "number"}},
                                                       "required": ["a"]}}}
ROWS = [
    {"prompt": "What is 1+1?", "answer": "2"},
    {"prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+3?"}],
     "answer": "5", "tools": [ADD]},
]


def _same(rows):
    return [row for _, row in rows.rows]


def test_jsonl_json_parquet_and_save_to_disk_give_the_same_rows(tmp_path):
    (tmp_path / "d.jsonl").write_text("\n".join(json.dumps(r) for r in ROWS) + "\n\n")
    (tmp_path / "d.json").write_text(json.dumps(ROWS))
    (tmp_path / "split.json").write_text(json.dumps({"train": ROWS}))
    # Arrow needs one type per column: the conversational rows on their own
    conversational = datasets.Dataset.from_list(ROWS[1:])
    conversational.to_parquet(str(tmp_path / "d.parquet"))
    datasets.DatasetDict({"train": conversational, "test": conversational}).save_to_disk(str(tmp_path / "disk"))
    assert _same(read(str(tmp_path / "d.jsonl"))) == ROWS
    assert _same(read(str(tmp_path / "d.json"))) == ROWS
    assert _same(read(str(tmp_path / "split.json"))) == ROWS
    assert _same(read(str(tmp_path / "d.parquet"))) == ROWS[1:]  # tool schema and messages as written
    assert _same(read(str(tmp_path / "disk"), split="test")) == ROWS[1:]


def test_csv_rows_and_where_they_came_from(tmp_path):
    (tmp_path / "d.csv").write_text('prompt,answer,tools\nWhat is 1+1?,2,\n"What is 2+3?",5,"[{""type"": ""function""}]"\n')
    rows = read(str(tmp_path / "d.csv"))
    assert [where for where, _ in rows.rows] == [f"{tmp_path / 'd.csv'} row 1", f"{tmp_path / 'd.csv'} row 2"]
    assert rows.rows[0][1]["prompt"] == "What is 1+1?"
    assert list(iter_tools(rows, None)) == [None, [{"type": "function"}]]  # a JSON string in CSV


def test_a_tools_file_applies_to_rows_without_their_own(tmp_path):
    (tmp_path / "tools.json").write_text(json.dumps([ADD]))
    (tmp_path / "d.jsonl").write_text(json.dumps(ROWS[0]) + "\n" + json.dumps({**ROWS[1], "tools": []}) + "\n")
    assert list(iter_tools(read(str(tmp_path / "d.jsonl")), read_tools_file(tmp_path / "tools.json"))) == [[ADD], []]


@pytest.mark.parametrize("content,message", [
    ('{"prompt": "a"}\nnot json\n', "d.jsonl:2: not valid JSON"),
    ('{"prompt": "a"}\n[1, 2]\n', "d.jsonl:2: a row must be a JSON object"),
])
def test_bad_rows_name_the_file_and_line(tmp_path, content, message):
    (tmp_path / "d.jsonl").write_text(content)
    with pytest.raises(DatasetSourceError, match=message):
        read(str(tmp_path / "d.jsonl"))


def test_a_missing_split_and_a_bad_tools_column_say_what_is_there(tmp_path):
    datasets.DatasetDict({"train": datasets.Dataset.from_list([{"prompt": "a"}])}).save_to_disk(str(tmp_path / "disk"))
    with pytest.raises(DatasetSourceError, match=r"no split 'test' \(it has train\); set data.split"):
        read(str(tmp_path / "disk"), split="test")
    (tmp_path / "d.jsonl").write_text(json.dumps({"prompt": "a", "tools": "add"}) + "\n")
    with pytest.raises(DatasetSourceError, match=r"d.jsonl:1: column 'tools' is a string but not JSON"):
        list(iter_tools(read(str(tmp_path / "d.jsonl")), None))
    with pytest.raises(DatasetSourceError, match="unknown dataset format '.txt'"):
        (tmp_path / "d.txt").write_text("x")
        read(str(tmp_path / "d.txt"))


# ----------------------------------------------------------------------------- through the trainer

TOOLS_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\nTools:{% for t in tools %} {{ t['function']['name'] }}{% endfor %}"
    "<|im_end|>\n{%- endif %}{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\n' }}"
    "{{- message['content'] }}{{- '<|im_end|>\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}"
)


def _tool_model(tmp_path):
    from tests.helpers.arch_models import build

    folder = build(tmp_path / "model", "qwen3")
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": TOOLS_TEMPLATE}))
    return folder


def _trainer(tmp_path, data_line: str, extra: str = ""):
    from grpo_tui.protocol.config import load_config
    from grpo_tui.worker.engine.trainer import MlxTrainer
    from tests.helpers.arch_models import step_config

    path = step_config(tmp_path / "run", _tool_model(tmp_path), extra)
    text = path.read_text().replace('path = "data.jsonl"\neval_path = "data.jsonl"', f"path = {data_line}")
    path.write_text(text)
    return MlxTrainer(load_config(path), log=lambda level, message: None)


def test_tool_schemas_reach_the_chat_template_from_a_column_or_the_tools_file(tmp_path):
    mul = {"type": "function", "function": {"name": "mul", "parameters": {"type": "object"}}}
    datasets.Dataset.from_list([{**ROWS[1]}, {**ROWS[1], "tools": [mul]}]).to_parquet(str(tmp_path / "d.parquet"))
    trainer = _trainer(tmp_path, f'"{tmp_path / "d.parquet"}"')
    assert ["Tools: add<|im_end|>" in e.prompt_text for e in trainer.prompts.dataset] == [True, False]
    assert "Tools: mul<|im_end|>" in trainer.prompts.dataset[1].prompt_text
    assert trainer.train_step(1).metrics.loss is not None  # conversational rows train

    (tmp_path / "tools.json").write_text(json.dumps([ADD, mul]))
    (tmp_path / "plain.jsonl").write_text(json.dumps(ROWS[0]) + "\n")
    trainer = _trainer(tmp_path, f'"{tmp_path / "plain.jsonl"}"\ntools = "{tmp_path / "tools.json"}"')
    assert trainer.prompts.dataset[0].prompt_text.startswith("<|im_start|>system\nTools: add mul<|im_end|>")


def test_a_bad_row_stops_the_start_naming_the_file_row_and_column(tmp_path):
    from grpo_tui.worker.engine.prompts.data import DataError

    (tmp_path / "d.csv").write_text("question,answer\nWhat is 1+1?,2\n")
    with pytest.raises(DataError, match=r"d.csv row 1: no 'prompt' column \(the row has 'question', 'answer'\)"):
        _trainer(tmp_path, f'"{tmp_path / "d.csv"}"')
    (tmp_path / "d.jsonl").write_text(json.dumps(ROWS[0]) + "\n" + json.dumps({"prompt": 7, "answer": "2"}) + "\n")
    with pytest.raises(DataError, match=r"d.jsonl:2: column 'prompt' must be a string or a list of \{role, content\} "
                                        r"messages, not int 7"):
        _trainer(tmp_path, f'"{tmp_path / "d.jsonl"}"')


def test_tool_use_allows_the_tools_of_the_row():
    from grpo_tui.worker.engine.scoring.rewards import tool_use

    calls = ['<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>',
             '<tool_call>{"name": "mul", "arguments": {}}</tool_call>']
    assert tool_use(["", ""], calls, tools=[[ADD], [ADD]]) == [1.0, 0.0]
    assert tool_use(["", ""], calls, tools=["mul"]) == [0.0, 1.0]  # params: names
