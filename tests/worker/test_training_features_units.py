"""Pure pieces of the training features: early-stop rules, plain control lines, the BLAS warning,
the evaluation schedule and tally."""

from __future__ import annotations

import pytest

from grpo_tui.protocol import messages as m
from grpo_tui.common.blas_warning import is_reference_blas, slow_blas_warning
from grpo_tui.worker.evaluation import EvalTally, chunks, due
from grpo_tui.worker.plain_lines import is_json, parse_plain
from grpo_tui.worker.engine.policy.stopping import RepeatWatch, RowStops, cut_at_stop


class CharTokenizer:
    """One character per token id."""

    def decode(self, ids: list[int]) -> str:
        return "".join(chr(i) for i in ids)


def feed(stops: RowStops, text: str, row: int = 0) -> tuple[int, str | None]:
    for i, ch in enumerate(text):
        if reason := stops.push(row, ord(ch)):
            return i + 1, reason
    return len(text), None


def test_stop_string_ends_the_row_on_the_token_that_completes_it() -> None:
    stops = RowStops(2, CharTokenizer(), stops=["</answer>"])
    used, reason = feed(stops, "x <answer>4</answer> and more")
    assert reason == "stop" and used == len("x <answer>4</answer>")
    assert feed(stops, "no stop here at all", row=1) == (19, None)
    assert cut_at_stop("x <answer>4</answer>", ["</answer>"]) == ("x <answer>4", True)
    assert cut_at_stop("abc", ["z", ""]) == ("abc", False)
    assert cut_at_stop("a;b.c", [".", ";"]) == ("a", True)  # the earliest one wins


def test_repetition_needs_k_copies_of_the_ngram() -> None:
    watch = RepeatWatch(n=2, count=3)
    hits = [watch.push(t) for t in [5, 1, 2, 1, 2, 1, 2]]
    assert hits == [False] * 6 + [True]  # "1 2" three times: stopped at the 7th token
    assert not any(RepeatWatch(2, 3).push(t) for t in [1, 2, 1, 2, 3, 1, 2, 1])  # broken run restarts
    w = RepeatWatch(1, 4)
    assert [w.push(7) for _ in range(4)] == [False, False, False, True]


def test_rules_off_by_default() -> None:
    stops = RowStops(1, CharTokenizer())
    assert not stops.active
    assert feed(RowStops(1, CharTokenizer(), ngram=3, count=2), "abcabc") == (6, "repetition")


@pytest.mark.parametrize(
    "line,command",
    [("PAUSE", m.Pause()), ("  resume \r", m.Resume()), ("SAVE_CHECKPOINT", m.SaveCheckpoint()),
     ("STOP", m.Stop()), ("SET sample_display=all", m.SetSampleDisplay(mode="all")),
     ("set Sample_Display = random", m.SetSampleDisplay(mode="random")),
     ("SET training.learning_rate=5e-6", m.SetSetting(key="training.learning_rate", value="5e-6", source="stdin"))],
)
def test_plain_lines_become_commands(line: str, command: m.Command) -> None:
    assert parse_plain(line) == command


def test_unknown_plain_lines_are_explained() -> None:
    for line, words in [("HALT", "unknown command line 'HALT'"), ("SET sample_display=some", "not one of"),
                        ("SET speed", "no KEY=VALUE")]:
        answer = parse_plain(line)
        assert isinstance(answer, str) and words in answer
    assert "PAUSE" in str(parse_plain("HALT"))
    assert is_json(' {"type": "pause"}') and not is_json("PAUSE")


def test_reference_blas_warning_names_the_fix() -> None:
    ref = "/venv/lib/python3.11/site-packages/mlx_cpu.libs/libblas-bd8a282c.so.3.10.0"
    assert is_reference_blas(ref)
    assert not is_reference_blas("/venv/lib/libmkl_rt.so.2")
    assert not is_reference_blas("/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3")
    warning = slow_blas_warning(ref, "linux", "x86_64")
    assert warning and "`pip install 'mkl>=" in warning and "runtime.blas" in warning  # grpo-tui's bound
    assert "libopenblas0" in str(slow_blas_warning(ref, "linux", "aarch64"))
    assert slow_blas_warning(ref, "darwin", "arm64") is None
    assert slow_blas_warning("/venv/lib/libmkl_rt.so.2", "linux", "x86_64") is None


def test_eval_schedule() -> None:
    assert [s for s in range(0, 201) if due(s, 200, 50, True, True)] == [0, 50, 100, 150, 200]
    assert [s for s in range(0, 11) if due(s, 10, 4, False, True)] == [4, 8, 10]
    assert [s for s in range(0, 11) if due(s, 10, 0, False, False)] == []
    assert [list(r) for r in chunks(5, 2)] == [[0, 1], [2, 3], [4]]


def test_eval_tally_pass_at_k() -> None:
    tally = EvalTally(num_samples=2, accuracy_label="accuracy")
    tally.add({"accuracy": [1.0, 0.0, 0.0, 0.0]}, [1.0, 0.0, 0.0, 0.0], [3, 5, 4, 4], ["stop"] * 3 + ["length"])
    tally.add({"accuracy": [0.0, 1.0]}, [0.0, 1.0], [2, 2], ["stop", "stop"])
    s = tally.summary()
    assert s.num_prompts == 3 and s.accuracy == pytest.approx(2 / 6)
    assert s.pass_at_k == pytest.approx(2 / 3)
    assert s.clipped_ratio == pytest.approx(1 / 6)
    assert EvalTally(num_samples=1, accuracy_label=None).summary().accuracy is None


def test_dashboard_state_keeps_evals_and_flags_a_slow_blas() -> None:
    from grpo_tui.tui.plot import Series
    from grpo_tui.tui.state import RunState

    state = RunState(clock=lambda: 0.0)
    assert state.apply(m.Log(level="warning", message=str(slow_blas_warning("/x/libblas.so.3", "linux", "x86_64"))))
    assert state.slow_blas
    state.apply(m.Eval(step=0, accuracy=0.25, rewards={"accuracy": 0.25}))
    state.apply(m.Eval(step=50, accuracy=0.5, rewards={"accuracy": 0.5}))
    state.apply(m.Eval(step=50, accuracy=0.75, rewards={"accuracy": 0.75}))  # replayed after a resume
    assert state.eval_curves()[0] == Series("eval accuracy", [0, 50], [0.25, 0.75])
    state.apply(m.Eval(step=50, accuracy=0.125, greedy=False))  # eval.also_sampled's second pass
    assert state.eval_curves() == [Series("eval greedy accuracy", [0, 50], [0.25, 0.75]),
                                   Series("eval sampled accuracy", [50], [0.125])]
    assert state.eval_curves()[0] == state.eval_curves()[0]
    only_reward = RunState(clock=lambda: 0.0)
    only_reward.apply(m.Eval(step=2, reward=1.5))
    assert only_reward.eval_curves() == [Series("eval reward", [2], [1.5])]


BASE = '[model]\npath = "org/model"\n[data]\npath = "d.jsonl"\n[[rewards]]\nname = "accuracy"\n'


@pytest.mark.parametrize(
    "extra,key,words",
    [
        ("[eval]\nnum_samples = 4", "eval.num_samples", "greedy = false or eval.also_sampled = true"),
        ("[eval]\ngreedy = false\nalso_sampled = true", "eval.also_sampled", "needs eval.greedy = true"),
        ("[eval]\nevery = -1", "eval.every", ">= 0"),
        ("[eval]\nlimit = -2", "eval.limit", ">= 0"),
        ("[eval]\nbatch_size = 0", "eval.batch_size", "at least 1"),
        ("[eval]\nevry = 5", "eval.evry", "unknown key"),
        ("[training]\nlr_scheduler_type = \"cosine_restarts\"", "training.lr_scheduler_type", "is not one of"),
        ("[training]\nwarmup_steps = -1", "training.warmup_steps", ">= 0"),
        ("[training]\nwarmup_ratio = 1.0", "training.warmup_ratio", "[0, 1)"),
        ("[training]\nmin_lr_rate = 2.0", "training.min_lr_rate", "[0, 1]"),
        ("[generation]\nstop = [\"\"]", "generation.stop", "empty string"),
        ("[generation]\nstop = \"</answer>\"", "generation.stop", "an array"),
        ("[generation]\nrepetition_stop_ngram = 3", "generation.repetition_stop_count", "set both"),
        ("[generation]\nrepetition_stop_ngram = 3\nrepetition_stop_count = 1", "generation.repetition_stop_count", "at least 2"),
        ("[grpo]\nmask_repetition_completions = \"yes\"", "grpo.mask_repetition_completions", "true or false"),
    ],
)
def test_bad_values_of_the_new_keys_name_the_key(extra: str, key: str, words: str) -> None:
    from grpo_tui.protocol.config import ConfigError, parse_config

    with pytest.raises(ConfigError) as info:
        parse_config(BASE + extra, check_paths=False)
    assert info.value.key == key and words in info.value.detail


def test_new_keys_default_to_the_old_behaviour() -> None:
    from grpo_tui.protocol.config import parse_config

    config = parse_config(BASE, check_paths=False)
    assert config.eval is None  # no [eval] table: no evaluation
    assert config.training.lr_scheduler_type == "constant"
    assert config.generation.stop == [] and config.generation.repetition_stop_count == 0
    on = parse_config(BASE + "[eval]\n", check_paths=False).eval
    assert on is not None and (on.every, on.greedy, on.num_samples, on.at_start, on.at_end) == (50, True, 1, True, True)
