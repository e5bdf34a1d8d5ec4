# The quick start of TRL's docs/source/grpo_trainer.md (huggingface/trl f2cd57710), verbatim except the import lines.
# train_grpo.py
from datasets import load_dataset
from grpo_tui import GRPOTrainer
from grpo_tui.rewards import accuracy_reward

dataset = load_dataset("trl-lib/DeepMath-103K", split="train")

trainer = GRPOTrainer(
    model="Qwen/Qwen2.5-0.5B-Instruct",
    reward_funcs=accuracy_reward,
    train_dataset=dataset,
)
trainer.train()
