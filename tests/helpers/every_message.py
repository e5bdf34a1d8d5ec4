"""One message of every type the protocol has (tests/protocol checks the list is whole), for the
tests that must see each one: round trips, the dashboard's fold."""

from grpo_tui.protocol import messages as m

EVENTS = [
    m.Hello(protocol_version=m.PROTOCOL_VERSION, worker_version="0.1.0", pid=123),
    m.Status(phase="generating", message="rolling out"),
    m.Init(model="tiny", model_path="/m", config={"grpo": {"group_size": 4}}, dataset_size=10,
           steps_per_epoch=3, total_steps=3, num_epochs=1, output_dir="/o"),
    m.DatabasePath(path="/o/outputs.db", run_id=1, run_name="quick"),
    m.ResumeState(step=3, epoch=0, total_epochs=1, step_in_epoch=3, steps_per_epoch=5,
                  history=[m.Step(step=1, epoch=0, loss=0.1, reward=0.5, perplexity=1.5)],
                  aggregates=m.Aggregates(best_reward=0.5, avg_reward=0.5, reward_steps=1, total_tokens=10)),
    m.EpochStart(epoch=0, total_epochs=2, steps_in_epoch=5),
    m.Step(step=1, epoch=0, loss=0.5, reward=1.0, rewards={"accuracy": 1.0, "fmt": None},
           clip_ratio=m.ClipRatio(low=0.1, high=0.2, region=0.3), num_tokens=99,
           gradients_applied=False, skipped_reason="non-finite gradient"),
    m.Sample(step=1, index=0, group=0, prompt="p", completion="c", reward=1.0,
             reward_details={"accuracy": 1.0}, advantage=0.5, num_tokens=3, finish_reason="length",
             thinking="hmm", tool_calls=[m.ToolCall(index=0, name="f", arguments={"a": 1}, raw="{}")]),
    m.Eval(step=50, rewards={"accuracy": 0.7, "fmt": None}, reward=0.9, accuracy=0.7, pass_at_k=0.8,
           num_prompts=200, num_samples=4, greedy=False, completion_mean_length=12.5, clipped_ratio=0.1, seconds=2.5),
    m.Checkpoint(path="/o/checkpoint-5", step=5, kind="manual"),
    m.EpochEnd(epoch=0, mean_loss=0.1, mean_reward=0.2, seconds=3.5),
    m.Log(level="warning", message="careful", time=1.5),
    m.Paused(step=4),
    m.Resumed(step=4),
    m.StepBarrier(step=4),
    m.SampleDisplayChanged(mode="all"),
    m.SettingChanged(step=121, key="training.learning_rate", old=1e-5, new=5e-6, source="cli", time=2.5, id="a1"),
    m.SettingRefused(key="model.path", value='"x"', message="model.path: cannot change in a live run", source="api"),
    m.Finding(name="truncation", severity="warning", step=12, since=8, message="18 % of completions are cut",
              numbers={"share": 0.18}, evidence=m.Evidence(steps=[12], generations=[(12, 0, 1)], finish_reason="length"),
              suggestion="generation.max_completion_length=64"),
    m.Complete(total_steps=10, seconds=12.0, status="stopped"),
    m.Error(message="boom", fatal=True, traceback="Traceback..."),
]
COMMANDS = [m.Pause(), m.Resume(), m.Stop(), m.SaveCheckpoint(),
            m.SetSetting(key="generation.temperature", value="0.7", source="dashboard", id="b2"),
            m.SetSampleDisplay(mode="random")]
