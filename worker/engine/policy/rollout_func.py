"""TRL's ``rollout_func(prompts, trainer)`` (``[environment] rollout_func = "file.py:func"``,
``GRPOTrainer(rollout_func=...)``; docs/environments.md, "Your own rollout function").

TRL 1.16's contract: the function gets the round's prompts of this rank, each row's prompt
``group_size`` times in a row (as TRL's repeat sampler hands them), and the trainer; it returns a
dict with ``prompt_ids``, ``completion_ids`` and ``logprobs`` (one entry per prompt it was given),
optionally ``env_mask`` (1 on the policy's tokens, 0 on tokens from elsewhere: masked from the
loss, the KL and the lengths, as TRL masks them); every other key reaches the reward functions as a
keyword column (a list: one value per completion; anything else: the same value for all).

The policy generates in this process, so the function generates with
``grpo_tui.generate_rollout_completions(trainer, prompts)`` (TRL's helper of that name, backed by
our rollout engine instead of vLLM): one completion per prompt (a string taken as it is, or a
message list rendered with the chat template), each a dict with ``prompt_ids``,
``completion_ids``, ``logprobs`` and ``text``. The function runs on a thread of its own while the
MLX thread answers its generation requests (``PolicyService``): requests made at the same time
from several threads are generated as one batch. The batch is built from the returned tokens:
where a group's prompts differ, their common start is the prompt and the rest of each is context
of its completion, masked out of the loss. The returned log-probs are checked and kept with the
completion; the loss takes its old log-probs from its own forward pass, as for every rollout.
A malformed return is one sentence naming the key and exit 2.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable

from grpo_tui.protocol.config import Config
from grpo_tui.protocol.outcome import Mistake
from grpo_tui.worker.engine.models import model_source
from grpo_tui.worker.engine.policy.request_limits import overrides_problem
from grpo_tui.worker.engine.prompts import data
from grpo_tui.worker.engine.scoring.rewards import RewardError, describe_error, load_function

if TYPE_CHECKING:  # the rollout (and MLX) come in at the first round: the worker loads this before MLX
    from grpo_tui.worker.engine.distributed import Ranks
    from grpo_tui.worker.engine.policy.policy import Policy
    from grpo_tui.worker.engine.policy.rollout import Completion

KEY = "environment.rollout_func"
REQUIRED = ("prompt_ids", "completion_ids", "logprobs")
# generate_rollout_completions' generation_overrides (vLLM's SamplingParams names) -> GenerationConfig
OVERRIDES = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "min_p": "min_p",
             "max_tokens": "max_completion_length", "repetition_penalty": "repetition_penalty"}


class RolloutFuncMistake(Mistake, RuntimeError):
    """A rollout function that cannot be used or returned what TRL's contract does not allow."""

    def __init__(self, sentence: str) -> None:
        super().__init__("tool", f"{KEY}: {sentence}")


@dataclass
class Request:
    """One prompt's generation: its token ids and the sampling settings that differ from the run's."""

    prompt_ids: list[int]
    overrides: dict[str, Any] = field(default_factory=dict)


class _Pending:
    def __init__(self, requests: list[Request]) -> None:
        self.requests, self.done = requests, threading.Event()
        self.answers: list[dict[str, Any]] | None = None
        self.error: BaseException | None = None


class PolicyService:
    """Generation requests from any thread, answered on the serving (MLX) thread in batches:
    ``serve(driver)`` runs ``driver`` on a thread of its own and, until it returns, generates
    whatever requests are waiting, all of them in one call of ``generate`` (``generate`` gets the
    requests and returns one answer each). A request made on the serving thread is generated at once."""

    def __init__(self, generate: Callable[[list[Request]], list[dict[str, Any]]]) -> None:
        self._generate = generate  # ``bind`` replaces it (each round keys its draws)
        self._queue: queue.Queue[_Pending] = queue.Queue()
        self._serving: threading.Thread | None = None

    def bind(self, generate: Callable[[list[Request]], list[dict[str, Any]]]) -> None:
        self._generate = generate

    def generate(self, requests: list[Request]) -> list[dict[str, Any]]:
        if not requests:
            return []
        if self._serving is None or threading.current_thread() is self._serving:
            if self._serving is None:
                raise RuntimeError("the policy generates only during a rollout (inside the rollout function)")
            return self._generate(requests)
        pending = _Pending(requests)
        self._queue.put(pending)
        pending.done.wait()
        if pending.error is not None:
            raise pending.error
        assert pending.answers is not None
        return pending.answers

    def serve(self, driver: Callable[[], Any]) -> Any:
        box: dict[str, Any] = {}
        finished = threading.Event()

        def run() -> None:
            try:
                box["result"] = driver()
            except BaseException as exc:  # noqa: BLE001 — handed to the serving thread
                box["error"] = exc
            finally:
                finished.set()

        self._serving = threading.current_thread()
        thread = threading.Thread(target=run, name="grpo-tui-rollout", daemon=True)
        thread.start()
        try:
            while not (finished.is_set() and self._queue.empty()):
                try:
                    batch = [self._queue.get(timeout=0.02)]
                except queue.Empty:
                    continue
                while True:  # everything waiting now goes into one batch
                    try:
                        batch.append(self._queue.get_nowait())
                    except queue.Empty:
                        break
                self._answer(batch)
        finally:
            self._serving = None
        if "error" in box:
            raise box["error"]
        return box.get("result")

    def _answer(self, batch: list[_Pending]) -> None:
        requests = [r for p in batch for r in p.requests]
        try:
            answers = self._generate(requests)
        except BaseException as exc:  # noqa: BLE001 — the requester raises it
            for p in batch:
                p.error = exc
                p.done.set()
            return
        at = 0
        for p in batch:
            p.answers, at = answers[at:at + len(p.requests)], at + len(p.requests)
            p.done.set()


class _Args:
    """``trainer.args`` as rollout functions read it: TRL's names of the run's settings."""

    def __init__(self, config: Config) -> None:
        g, t = config.generation, config.training
        self.num_generations = config.grpo.group_size
        self.max_completion_length, self.temperature = g.max_completion_length, g.temperature
        self.top_p, self.top_k, self.min_p, self.repetition_penalty = g.top_p, g.top_k, g.min_p, g.repetition_penalty
        self.per_device_train_batch_size, self.seed = t.batch_size, t.seed
        self.output_dir, self.generation_kwargs = config.checkpoint.output_dir, None


class _State:
    def __init__(self, global_step: int, max_steps: int) -> None:
        self.global_step, self.max_steps = global_step, max_steps


class _Model:
    def __init__(self, training: bool) -> None:
        self.training = training  # TRL's rollout functions tell training from evaluation by this


class _Accelerator:
    def __init__(self, rank: int, size: int) -> None:
        self.process_index, self.num_processes, self.is_main_process = rank, size, rank == 0
        self.is_local_main_process = self.is_main_process


class RolloutTrainer:
    """The ``trainer`` a rollout function gets: TRL's attributes that such functions read
    (``processing_class``, ``args``, ``num_generations``, ``max_completion_length``, the sampling
    settings, ``state.global_step``, ``model.training``, ``accelerator``) and the generation helper."""

    def __init__(self, config: Config, tokenizer: Any, service: PolicyService, *, global_step: int, max_steps: int,
                 training: bool, rank: int, size: int, enable_thinking: bool, context: int | None = None) -> None:
        self.args = _Args(config)
        self.processing_class = getattr(tokenizer, "_tokenizer", tokenizer)  # the transformers tokenizer
        self.num_generations = self.num_generations_eval = self.args.num_generations
        self.max_completion_length, self.temperature = self.args.max_completion_length, self.args.temperature
        self.top_p, self.top_k, self.min_p = self.args.top_p, self.args.top_k, self.args.min_p
        self.repetition_penalty = self.args.repetition_penalty
        self.state, self.model = _State(global_step, max_steps), _Model(training)
        self.accelerator = _Accelerator(rank, size)
        self.use_vllm, self.vllm_mode = False, None
        self.base_url, self.api_key = "", ""  # the policy's OpenAI-style endpoint during the rollout (policy_endpoint.py)
        self._service, self._thinking = service, enable_thinking
        self.context = context  # the model's positions (None: unknown): no request may pass them

    def _prompt_ids(self, prompt: Any, as_chat: bool | None) -> list[int]:
        tok = self.processing_class
        if isinstance(prompt, str) and not as_chat:
            return list(tok.encode(prompt, add_special_tokens=False))  # the text as it is (it holds its template)
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
        ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                      enable_thinking=self._thinking)
        return list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)

    def generate_rollout_completions(self, prompts: list[Any], *, generation_overrides: dict[str, Any] | None = None,
                                     as_chat: bool | None = None) -> list[dict[str, Any]]:
        overrides = dict(generation_overrides or {})
        if overrides.pop("n", 1) != 1:
            raise RolloutFuncMistake("generate_rollout_completions makes one completion per prompt (n = 1), as TRL's "
                                     "does; repeat a prompt for more")
        if unknown := sorted(set(overrides) - set(OVERRIDES)):
            raise RolloutFuncMistake(f"generation_overrides {unknown} are not among the ones the rollout engine takes "
                                     f"({', '.join(OVERRIDES)})")
        requests = [Request(self._prompt_ids(p, as_chat), overrides) for p in prompts]
        for r in requests:
            if problem := overrides_problem(overrides, len(r.prompt_ids), self.max_completion_length, self.context):
                raise RolloutFuncMistake(f"generate_rollout_completions: generation_overrides: {problem}")
        return self._service.generate(requests)


def generation_answers(requests: list[Request], generate: Callable[[list[list[int]], dict[str, Any]], list[Completion]],
                       ) -> list[dict[str, Any]]:
    """The requests' answers (TRL's helper's dicts), one ``generate`` call per distinct set of overrides."""
    answers: list[dict[str, Any] | None] = [None] * len(requests)
    groups: dict[tuple, list[int]] = {}
    for i, r in enumerate(requests):
        groups.setdefault(tuple(sorted(r.overrides.items())), []).append(i)
    for key, rows in groups.items():
        completions = generate([requests[i].prompt_ids for i in rows], {OVERRIDES[k]: v for k, v in key})
        for i, c in zip(rows, completions):
            answers[i] = {"prompt_ids": list(requests[i].prompt_ids), "completion_ids": list(c.token_ids),
                          "logprobs": [float(x) for x in c.sampling_logprobs], "text": c.text,
                          "finish_reason": c.finish_reason}
    return [a for a in answers if a is not None]


class RolloutFunction:
    """The configured function, loaded and called once per round of each rank's rows."""

    def __init__(self, spec: str) -> None:
        try:
            self.fn = load_function(spec)
        except RewardError as exc:
            raise RolloutFuncMistake(str(exc).removeprefix("reward ").removeprefix(f"{spec}: ")) from None
        self.name = getattr(self.fn, "__name__", spec.rsplit(":", 1)[1])
        self.service = PolicyService(lambda requests: [])
        self.endpoint: Any = None  # policy_endpoint.PolicyEndpoint, started at the first round

    def serve_endpoint(self, view: "RolloutTrainer", model_name: str) -> Any:
        """The run's OpenAI/vLLM-style endpoint on 127.0.0.1 (its secret made once per run), over ``service``."""
        if self.endpoint is None:
            from grpo_tui.worker.engine.policy.policy_endpoint import PolicyEndpoint

            tok = view.processing_class
            self.endpoint = PolicyEndpoint(
                lambda prompts, overrides: self.service.generate([Request(p, overrides) for p in prompts]),
                lambda messages: view._prompt_ids(messages, True), lambda text: view._prompt_ids(text, False),
                lambda t: tok.decode([t]), model_name, len(tok),
                lambda: (view.max_completion_length, view.context))
        return self.endpoint

    def call(self, prompts: list[Any], trainer: RolloutTrainer, service: PolicyService) -> dict[str, Any]:
        try:
            output = service.serve(lambda: self.fn(prompts, trainer))
        except Mistake:
            raise
        except Exception as exc:  # noqa: BLE001 — the user's function: say what it raised
            raise RolloutFuncMistake(f"{self.name} raised {describe_error(exc)}") from None
        return output

    def completions(self, output: Any, examples: list[data.Example], group_size: int, tokenizer: Any,
                    context: int | None = None) -> tuple[list[data.Example], list[Completion], list[data.Example]]:
        """(the examples with each group's prompt ids, the completions, each completion's owner with the
        function's extra keys as its columns), from what the function returned for ``examples``."""
        n = len(examples) * group_size
        columns = check_output(output, n, tokenizer.vocab_size if hasattr(tokenizer, "vocab_size") else None, context)
        eos = set(tokenizer.eos_token_ids)
        started: list[data.Example] = []
        completions: list[Completion] = []
        for g, example in enumerate(examples):
            rows = range(g * group_size, (g + 1) * group_size)
            prompts = [list(output["prompt_ids"][k]) for k in rows]
            common = _common_prefix(prompts)
            started.append(replace(example, prompt_ids=common, prompt_text=tokenizer.decode(common)))
            for k in rows:
                completions.append(_completion(g, prompts[k - g * group_size][len(common):], output, k, eos, tokenizer))
        owners = [replace(started[c.prompt_index], columns={**started[c.prompt_index].columns,
                                                          **{key: _value(v, k) for key, v in columns.items()}})
                  for k, c in enumerate(completions)]
        return started, completions, owners


def _value(values: Any, k: int) -> Any:
    return (values[k] if k < len(values) else None) if isinstance(values, list) else values


def _common_prefix(rows: list[list[int]]) -> list[int]:
    first = rows[0]
    n = min(len(r) for r in rows)
    for i in range(n):
        if any(r[i] != first[i] for r in rows):
            return first[:i]
    return first[:n]


def _completion(g: int, context: list[int], output: dict[str, Any], k: int, eos: set[int], tokenizer: Any) -> Completion:
    from grpo_tui.worker.engine.policy.rollout import Completion

    ids = [int(t) for t in output["completion_ids"][k]]
    mask = [int(m) for m in output["env_mask"][k]] if output.get("env_mask") is not None else [1] * len(ids)
    logprobs = [float(x[0] if isinstance(x, (list, tuple)) else x) for x in output["logprobs"][k]]
    stopped = ids[-1] in eos
    kept = [t for t, m in zip(ids, mask) if m]
    text = tokenizer.decode(ids[:-1] if stopped else ids, skip_special_tokens=True)
    full_mask = [0] * len(context) + mask
    return Completion(prompt_index=g, token_ids=context + ids, text=text, finish_reason="stop" if stopped else "length",
                      sampling_logprobs=logprobs, mask=None if all(full_mask) else full_mask,
                      transcript=None if all(full_mask) else tokenizer.decode(kept))


def _logprob(x: Any) -> bool:
    """A log-prob as TRL's contract gives it: a real number, or a list holding one."""
    if isinstance(x, (list, tuple)) and len(x) == 1:
        x = x[0]
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def check_output(output: Any, n: int, vocab: int | None, context: int | None = None) -> dict[str, Any]:
    """The extra keys of a well-formed return; a malformed one is one sentence naming what is wrong."""
    if not isinstance(output, dict):
        raise RolloutFuncMistake(f"returned {type(output).__name__}; TRL's contract is a dict with prompt_ids, "
                                 "completion_ids and logprobs (one list per prompt it was given)")
    if missing := [k for k in REQUIRED if k not in output]:
        raise RolloutFuncMistake(f"its dict has no {', '.join(map(repr, missing))}; TRL's contract requires prompt_ids, "
                                 "completion_ids and logprobs")
    checked = [*REQUIRED, *(["env_mask"] if output.get("env_mask") is not None else [])]
    for key in checked:
        value = output[key]
        if not isinstance(value, (list, tuple)) or len(value) != n:
            got = f"{len(value)} entries" if isinstance(value, (list, tuple)) else type(value).__name__
            raise RolloutFuncMistake(f"{key} has {got} for {n} prompts; give one list per prompt it was given "
                                     "(each row's prompt comes num_generations times)")
        for k, row in enumerate(value):
            if not isinstance(row, (list, tuple)):
                raise RolloutFuncMistake(f"{key}[{k}] is {type(row).__name__}, not a list")
    for k in range(n):
        ids, prompt = output["completion_ids"][k], output["prompt_ids"][k]
        if not ids:
            raise RolloutFuncMistake(f"completion_ids[{k}] is empty; a completion has at least one token")
        if not prompt:
            raise RolloutFuncMistake(f"prompt_ids[{k}] is empty; give the prompt's token ids the completion follows")
        if context is not None and len(prompt) + len(ids) > context:
            raise RolloutFuncMistake(f"prompt_ids[{k}] and completion_ids[{k}] hold {len(prompt) + len(ids):,} tokens, "
                                     f"past the model's context of {context:,}; cut the completion (max_tokens)")
        if not all(_logprob(x) for x in output["logprobs"][k]):
            bad = next(x for x in output["logprobs"][k] if not _logprob(x))
            raise RolloutFuncMistake(f"logprobs[{k}] holds {type(bad).__name__} {repr(bad)[:30]}; each log-prob is a "
                                     "number")
        for key, row in (("prompt_ids", prompt), ("completion_ids", ids)):
            if not all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < (vocab or 2**31) for t in row):
                raise RolloutFuncMistake(f"{key}[{k}] holds a value that is not a token id of the model's vocabulary")
        for key in checked[2:]:
            if len(output[key][k]) != len(ids):
                raise RolloutFuncMistake(f"{key}[{k}] has {len(output[key][k])} values for the {len(ids)} tokens of "
                                         f"completion_ids[{k}]")
        if "env_mask" in checked and not all(m in (0, 1) for m in output["env_mask"][k]):
            raise RolloutFuncMistake(f"env_mask[{k}] holds a value that is not 0 or 1")
    return {k: v for k, v in output.items() if k not in REQUIRED and k != "env_mask"}


def roll(policy: Policy, function: RolloutFunction, ranks: Ranks, total_steps: int, step: int,
         examples: list[data.Example], rows: range, position: int, *, n: int,
         training: bool = True) -> tuple[list[data.Example], list[Completion], list[data.Example], None]:
    """A round through the run's rollout ``function``: ``rows``' examples (this rank's) handed to it
    ``n`` times each; returns the round's examples (``rows``' with the prompt ids their completions
    were generated from), the completions of ``rows`` (``prompt_index`` counted from ``rows.start``),
    each one's owner with the function's extra keys, and no episodes. ``position``: the first row's
    place in the step, which keys the draws (with the order of the requests)."""
    import msgspec

    from grpo_tui.worker.engine.policy import sampling

    cfg, mine = policy.config, [examples[i] for i in rows]
    count = iter(range(10**9))

    def generate(prompts: list[list[int]], overrides: dict[str, Any]) -> list[Completion]:
        gen = msgspec.structs.replace(cfg.generation, **overrides) if overrides else cfg.generation
        keys = [sampling.row_key(cfg.training.seed, step, position + rows.start, 10_000 + next(count)) for _ in prompts]
        return policy.sample(prompts, 1, gen, keys=keys, logprobs=True)

    policy.model.eval()
    context = model_source.context_length(cfg.model.path)
    service = function.service
    service.bind(lambda requests: generation_answers(requests, generate))
    trainer = RolloutTrainer(cfg, policy.tokenizer, service, global_step=max(step - 1, 0), max_steps=total_steps,
                             training=training, rank=ranks.rank, size=ranks.size,
                             enable_thinking=cfg.generation.enable_thinking, context=context)
    endpoint = function.serve_endpoint(trainer, policy.name)
    trainer.base_url, trainer.api_key = endpoint.base_url, endpoint.api_key
    prompts = [e.prompt if isinstance(e.prompt, str) else [dict(m) for m in e.messages] for e in mine for _ in range(n)]
    output = function.call(prompts, trainer, service)
    started, completions, owners = function.completions(output, mine, n, policy.tokenizer, context)
    round_examples = list(examples)
    round_examples[rows.start:rows.stop] = started
    return round_examples, completions, owners, None
