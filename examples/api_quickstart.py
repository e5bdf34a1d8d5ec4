"""examples/quickstart.toml as a Python script: the tiny bundled model learns arithmetic with GRPO.

python examples/api_quickstart.py   (about 20 s on two CPU cores, offline; docs/python-api.md)
"""

import json
from pathlib import Path

from grpo_tui import GRPOConfig, GRPOTrainer

here = Path(__file__).parent
rows = [json.loads(line) for line in open(here / "data" / "arith.jsonl")]
held_out = str(here / "data" / "arith_eval.jsonl")  # a path works as well as rows


def xml_answer(completions, **kwargs):  # any function of yours; TRL's reward signature
    return [0.2 * ("<answer>" in c and "</answer>" in c) for c in completions]


args = GRPOConfig(  # unset fields take TRL's defaults; these are quickstart.toml's
    output_dir=str(here / "runs" / "api-quickstart"), max_steps=200, learning_rate=5e-5,
    num_generations=8, max_completion_length=24, epsilon_high=0.28, save_steps=50, save_total_limit=2,
    eval_steps=50, lr_scheduler_type="constant", gradient_checkpointing=False, seed=0, logging_steps=1,
    num_train_epochs=1, extra={"training": {"batch_size": 8}, "eval": {"limit": 200}},
)
trainer = GRPOTrainer(model=str(here / "models" / "tiny-arith"), reward_funcs=["accuracy", xml_answer],
                      args=args, train_dataset=rows, eval_dataset=held_out)
trainer.train()  # trainer.train(dashboard=True) opens the dashboard in a terminal
print([e["eval_accuracy"] for e in trainer.state.log_history if "eval_accuracy" in e])
trainer.save_model(here / "runs" / "api-quickstart-model")  # mlx_lm.load() opens it
