#!/usr/bin/env bash
# A newcomer's first hour, end to end and timed (bench/README.md, "A newcomer's first hour"):
#   1. a fresh virtual environment and the README's install command (`pip install -e .`);
#   2. the README's run command, `grpo-tui run examples/quickstart.toml`, in a terminal (a pty): the
#      dashboard trains to the end, q closes it, and its closing lines say "Run completed";
#   3. `grpo-tui init` of each template, each trained as written (`worker --plain`), its eval before and after
#      (reasoning-gym after `pip install -e '.[environments]'`, as its config says);
#   4. a detach / attach / set / fork / compare cycle on the quickstart: run --detach, attach and d,
#      set a live learning rate, fork from a checkpoint, compare the two, then stop both (attach, q, y).
# Each stage prints its wall time; the last line is the total. Run from the repository root:
#     bench/newcomer.sh              # the full path (the quickstart's 200 steps, each template as written)
#     TINY=1 bench/newcomer.sh       # a few steps each: proves the script works
# WORK=DIR keeps the venv and runs there (default: a temporary folder, removed at the end).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
if [ -z "${WORK:-}" ]; then WORK=$(mktemp -d); trap 'rm -rf "$WORK"' EXIT; fi
TINY=${TINY:-}
STEPS=()
[ -n "$TINY" ] && STEPS=(--set training.max_steps=4 --set eval.every=2 --set eval.limit=8)
T0=$(date +%s.%N)
stage() { printf '%-60s %6.1f s\n' "$1" "$(echo "$(date +%s.%N) - $2" | bc)"; }

# -- 1. a fresh venv and the README's install command
t=$(date +%s.%N)
python3 -m venv "$WORK/venv"
"$WORK/venv/bin/python" -m pip install -q --upgrade pip
"$WORK/venv/bin/pip" install -q -e "$REPO"
export PATH="$WORK/venv/bin:$PATH"
stage "install (fresh venv, pip install -e .)" "$t"

# A terminal for the dashboard: the command in a pty; `until` (a file's text) then `keys`, in turns.
cat > "$WORK/term.py" <<'EOF'
"""term.py CWD COMMAND [WAIT_FILE WAIT_TEXT KEYS]...: COMMAND in a pty in CWD; for each triple, wait
until WAIT_FILE holds WAIT_TEXT ("-": the terminal's own output), then type KEYS. Prints the
terminal's text once the command exits; exits with its code."""
import os, pty, re, subprocess, sys, time

cwd, command, steps = sys.argv[1], sys.argv[2], sys.argv[3:]
master, slave = pty.openpty()
env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "120", "LINES": "40"}
proc = subprocess.Popen(["bash", "-c", command], cwd=cwd, env=env, stdin=slave, stdout=slave, stderr=slave,
                        start_new_session=True)
os.close(slave)
out = bytearray()


def pump(timeout=0.05):
    import select
    while select.select([master], [], [], timeout)[0]:
        try:
            data = os.read(master, 65536)
        except OSError:
            return
        if not data:
            return
        out.extend(data)
        timeout = 0


def text():
    return re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]|\x1b[()][A-Z0-9]|\x1b[=>]|\r", "", out.decode(errors="replace"))


for path, wanted, keys in zip(steps[0::3], steps[1::3], steps[2::3]):
    deadline = time.monotonic() + 900
    while True:
        pump()
        seen = text() if path == "-" else (open(path, errors="replace").read() if os.path.exists(path) else "")
        if wanted in seen:
            break
        if time.monotonic() > deadline or proc.poll() is not None:
            sys.exit(f"term.py: {wanted!r} never appeared in {path}\n{text()[-2000:]}")
    time.sleep(0.5)
    for key in keys:
        os.write(master, key.encode())
        time.sleep(0.3)
while proc.poll() is None:
    pump()
pump(0.5)
print(text()[-600:])
sys.exit(proc.returncode)
EOF

# -- 2. the README's run command, in a terminal: to the end, then q
t=$(date +%s.%N)
rm -rf examples/runs/newcomer-quickstart
python "$WORK/term.py" "$REPO" "grpo-tui run examples/quickstart.toml --set checkpoint.output_dir=runs/newcomer-quickstart --set checkpoint.resume=false ${STEPS[*]}" \
    examples/runs/newcomer-quickstart/run.jsonl '"type":"complete"' q | tee "$WORK/quickstart.txt" | tail -4
grep -q "Run completed" "$WORK/quickstart.txt"
stage "quickstart in the dashboard, to the end (README's command)" "$t"
rm -rf examples/runs/newcomer-quickstart

# -- 3. init of each template, trained as written
for template in math json tools reasoning-gym; do
    if [ "$template" = reasoning-gym ]; then  # as its config's first lines say: the package that makes its tasks
        t=$(date +%s.%N)
        "$WORK/venv/bin/pip" install -q -e "$REPO[environments]"
        stage "install the reasoning-gym template's extra ([environments])" "$t"
    fi
    t=$(date +%s.%N)
    rm -rf "${WORK:?}/$template"
    grpo-tui init "$template" "$WORK/$template" > /dev/null
    (cd "$WORK/$template" && grpo-tui worker config.toml --plain "${STEPS[@]}" > "$WORK/$template.txt")
    evals=$(grep '^eval at step' "$WORK/$template.txt" | sed -E 's/.*\| reward ([-0-9.]+) \|.*/\1/' | tr '\n' ' ')
    stage "init $template, trained as written (eval reward: $evals)" "$t"
done

# -- 4. detach / attach / set / fork / compare, then stop both
t=$(date +%s.%N)
RUNS="$WORK/runs"
rm -rf "$RUNS"
cp examples/quickstart.toml "$WORK/cycle.toml"
sed -i "s#^path = \"models/#path = \"$REPO/examples/models/#; s#^path = \"data/#path = \"$REPO/examples/data/#; s#^eval_path = \"data/#eval_path = \"$REPO/examples/data/#" "$WORK/cycle.toml"
MAX=$([ -n "$TINY" ] && echo 40 || echo 300)
grpo-tui run "$WORK/cycle.toml" --detach --set "checkpoint.output_dir=\"$RUNS/cycle\"" --set checkpoint.save_every=10 \
    --set "training.max_steps=$MAX"
python "$WORK/term.py" "$WORK" "grpo-tui attach $RUNS/cycle" - "step" d | tail -2
grpo-tui set "$RUNS/cycle" training.learning_rate=2e-5
until ls -d "$RUNS"/cycle/checkpoint-10 > /dev/null 2>&1; do sleep 0.5; done
grpo-tui fork "$RUNS/cycle" --from 10 --detach --set generation.temperature=0.7 --set "training.max_steps=$((MAX / 2))"
grpo-tui compare "$RUNS/cycle" "$RUNS/cycle-fork-10" > "$WORK/compare.txt"
head -8 "$WORK/compare.txt"
for run in cycle cycle-fork-10; do
    python "$WORK/term.py" "$WORK" "grpo-tui attach $RUNS/$run" - "step" qy > /dev/null || true  # stop: q, then y
done
grpo-tui ls "$RUNS"
stage "detach / attach / set / fork / compare / stop" "$t"
stage "total" "$T0"
