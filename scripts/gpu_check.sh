#!/usr/bin/env bash
# GPU check (issues 4-7): on a CUDA machine with torch + transformers (nothing downloaded),
#   1. run the backend pytest suite on the GPU (VSR_TEST_DEVICE=cuda) when pytest + hypothesis are
#      installed (skipped, and said so, when they are not: the checks of step 2 do not need them);
#   2. run scripts/gpu_check.py: the backend contract on the GPU without pytest, and timing of
#      HFBackend.generate on the test-bed model at large batch (512 prompts x 8 samples) against
#      plain model.generate; it writes gpu_check.json;
#   3. run scripts/gpu_check_train.py: GRPO and all method plug-ins training on CUDA, with resume
#      (gpu_train.json);
#   4. run one prefix-value study (sigma-validation, quick) with the HF backend on CUDA;
#      4b. with vLLM importable: 3 GRPO steps and that study with --backend vllm (weight sync on the GPU);
#   5. agents: vsr eval --env (the batched multi-turn engine) and GiGPO + VSR training with resume;
#   6. verl 0.9.1 (issue 17): a 2-step smoke of each method of scripts/verl/train.sh on the test-bed
#      model, when verl and vLLM are importable (VERL_PYTHON, default $PY); skipped, and said so, otherwise.
#   7. the GPU agent recipes resolve, and two reduced updates of the VSR + GiGPO recipe on
#      Qwen2.5-1.5B-Instruct when it is in the local cache.
# Usage: scripts/gpu_check.sh [OUT_DIR]      (default: $OUT, else ${TMPDIR:-/tmp}/gpu_check)
# Env:   PYTHON (interpreter; default python3), GPU_CHECK_ARGS (extra arguments for gpu_check.py).
# Exit status: 0 all passed; 2 no CUDA; otherwise non-zero when a check or the test suite failed.
# Budget: about 20 minutes at most without verl (each step is cut by `timeout`; step 7 up to 5 of them); the verl smoke adds up to ~25.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUT_DIR="${1:-${OUT:-${TMPDIR:-/tmp}/gpu_check}}"
mkdir -p "$OUT_DIR"
PY="${PYTHON:-$(command -v python3 || command -v python)}"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false

echo "gpu_check: python $PY; output -> $OUT_DIR"
if ! "$PY" -c 'import sys, torch, transformers; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    echo "gpu_check: FAILED: CUDA is not available to $PY (torch.cuda.is_available() is False or torch/transformers missing)" >&2
    exit 2
fi
"$PY" -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "|", torch.cuda.get_device_name(0), "| transformers", transformers.__version__)'

status=0
# 1. the pytest backend suite on the GPU (needs pytest and hypothesis; vLLM tests skip without vllm)
if "$PY" -c 'import pytest, hypothesis' 2>/dev/null; then
    echo "== backend tests on cuda (pytest) =="
    # the benchmark smoke test is left out: it needs the project's CLI dependencies (tyro, ...)
    VSR_TEST_DEVICE=cuda timeout 420 "$PY" -m pytest tests/llm_harness/backends -q -p no:cacheprovider \
        --ignore=tests/llm_harness/backends/test_generation_benchmark.py \
        --ignore=tests/llm_harness/backends/test_vllm_commands.py \
        --junitxml="$OUT_DIR/backend_tests.xml" 2>&1 | tee "$OUT_DIR/backend_tests.log"
    rc=${PIPESTATUS[0]}
    if [ "$rc" -ne 0 ]; then echo "gpu_check: backend test suite FAILED (exit $rc; 124 = timed out)" >&2; status=1; fi
else
    echo "== pytest/hypothesis not installed: skipping the pytest backend suite (gpu_check.py checks the contract) =="
    echo "skipped: pytest or hypothesis not importable" > "$OUT_DIR/backend_tests.log"
fi

# 2. contract checks without pytest + timing at large batch
echo "== gpu_check.py =="
# shellcheck disable=SC2086
timeout 150 "$PY" scripts/gpu_check.py --out "$OUT_DIR" ${GPU_CHECK_ARGS:-}
rc=$?
if [ "$rc" -ne 0 ]; then echo "gpu_check: gpu_check.py FAILED (exit $rc; 124 = timed out)" >&2; status=1; fi

# 3. the trainer on CUDA: GRPO and every method plug-in composed, then a stop + resume (issues 6, 7)
echo "== gpu_check_train.py =="
timeout 180 "$PY" scripts/gpu_check_train.py --out "$OUT_DIR/train" --steps 20
rc=$?
if [ "$rc" -ne 0 ]; then echo "gpu_check: gpu_check_train.py FAILED (exit $rc; 124 = timed out)" >&2; status=1; fi

# 4. a prefix-value study with the HF backend on CUDA (issue 5), quick size
echo "== prefix-value study (sigma-validation, quick) on cuda =="
timeout 180 "$PY" -m prefixvalue "${STUDY:-sigma-validation}" --quick --device cuda --no-progress --out "$OUT_DIR/study"
rc=$?
if [ "$rc" -ne 0 ]; then echo "gpu_check: prefix-value study FAILED (exit $rc; 124 = timed out)" >&2; status=1; fi

# 4b. the vLLM backend on the GPU (issue 36), when vLLM is importable: the same in-process weight-transfer path as
#     on the CPU; GRPO for 3 steps with a weight sync after each, and one study, both with --backend vllm
if "$PY" -c 'import vllm' 2>/dev/null; then
    echo "== vLLM on cuda: vsr train --model.backend vllm (3 steps), sigma-validation --quick --backend vllm =="
    timeout 240 "$PY" -m vsr train --config configs/testbed_grpo.yaml --steps 3 --model.backend vllm --model.device cuda \
      --validation.every 3 --validation.n-problems 16 --validation.k 2 --run.run-dir "$OUT_DIR/vllm_train" --run.progress false
    rc=$?
    if [ "$rc" -ne 0 ]; then echo "gpu_check: vsr train on vLLM FAILED (exit $rc)" >&2; status=1; fi
    timeout 180 "$PY" -m prefixvalue sigma-validation --quick --backend vllm --device cuda --no-progress --out "$OUT_DIR/vllm_study"
    rc=$?
    if [ "$rc" -ne 0 ]; then echo "gpu_check: study on vLLM FAILED (exit $rc)" >&2; status=1; fi
else
    echo "== vLLM on cuda SKIPPED: vllm is not importable by $PY =="
fi

# 5. agents on CUDA (issues 15, 16): the batched multi-turn engine (vsr eval --env), then GiGPO + VSR
#    over interaction states training on Sokoban with a stop + resume, on a random text-alphabet model
echo "== agents: vsr eval --env sokoban, GiGPO + VSR training with resume, on ${AGENT_DEVICE:-cuda} =="
AGENT_ARGS=(--model.random-init --model.alphabet text --model.max-context 768 --model.hidden-size 64 --model.num-layers 2
            --model.device "${AGENT_DEVICE:-cuda}")
timeout 120 "$PY" -m vsr eval --env sokoban "${AGENT_ARGS[@]}" --n-problems 32 --k 4 --out-dir "$OUT_DIR/agent_eval"
rc=$?
if [ "$rc" -ne 0 ]; then echo "gpu_check: vsr eval --env FAILED (exit $rc)" >&2; status=1; fi
if "$PY" -c 'import minigrid' 2>/dev/null; then  # BabyAI through minigrid (the agents extra): the shipped test-bed agent
    timeout 120 "$PY" -m vsr eval --env babyai --level OneRoomS8 --max-steps 16 --window 0 \
      --model.path llm_harness/testbed/checkpoints/babyai/mid --model.device "${AGENT_DEVICE:-cuda}" \
      --n-problems 32 --k 4 --out-dir "$OUT_DIR/agent_eval_babyai"
    rc=$?
    if [ "$rc" -ne 0 ]; then echo "gpu_check: vsr eval --env babyai FAILED (exit $rc)" >&2; status=1; fi
else
    echo "gpu_check: skipped vsr eval --env babyai: minigrid is not installed (pip install -e .[agents])"
fi
cat > "$OUT_DIR/agent_train.yaml" <<YAML
steps: 4
task: {name: env, params: {env: sokoban, n_train: 64, window: 1}}
rollout: {prompts_per_step: 4, group_size: 4, verify_timeout_s: 0}
algo: {collector: multiturn, advantage: gigpo, filter_zero_variance: false}
agent: {turn_tokens: 6, max_turns: 8}
plugins: {vsr: {rho: 0.3, window: 5}}
run: {run_dir: $OUT_DIR/agent_run, checkpoint_every: 2, progress: false}
YAML
timeout 150 "$PY" -m vsr train --config "$OUT_DIR/agent_train.yaml" "${AGENT_ARGS[@]}" --run.stop-after 2 \
  && timeout 150 "$PY" -m vsr train --config "$OUT_DIR/agent_train.yaml" "${AGENT_ARGS[@]}" --run.resume true
rc=$?
if [ "$rc" -ne 0 ]; then echo "gpu_check: agent training/resume FAILED (exit $rc)" >&2; status=1; fi

# 6. verl smoke (issue 17): each method for 2 steps on the shipped test-bed model (step arithmetic;
#    its tokenizer has no chat template, so make_data.py writes vsr_prompt_ids)
VPY="${VERL_PYTHON:-$PY}"
if "$VPY" -c 'import verl, vllm' 2>/dev/null; then
    echo "== verl smoke: grpo vsr_grpo vsr extra vsr_extra replay all gigpo vsr_gigpo, 2 steps each (replay without warm-up) =="
    TB="$("$VPY" -c 'from llm_harness.testbed.paths import shipped_checkpoint; print(shipped_checkpoint("mid"))')"
    for agent in single_turn_agent vsr_prefix; do
        timeout 120 "$VPY" scripts/verl/make_data.py --task step_arith --params '{"n_train": 256, "n_validation": 16}' \
            --out "$OUT_DIR/verl_data/$agent" --agent "$agent" --tokenizer "$TB" || status=1
    done
    for m in grpo vsr_grpo vsr extra vsr_extra replay all; do
        case "$m" in vsr|vsr_extra|all) d=vsr_prefix ;; *) d=single_turn_agent ;; esac
        case "$m" in replay|all) x=(++algorithm.vsr.replay.warmup=0) ;; *) x=() ;; esac
        PYTHON="$VPY" MODEL="$TB" DATA="$OUT_DIR/verl_data/$d" OUT="$OUT_DIR/verl_$m" STEPS=2 B=8 N=4 RESP=64 PROMPT_LEN=64 \
            timeout 300 scripts/verl/train.sh "$m" actor_rollout_ref.rollout.gpu_memory_utilization=0.3 "${x[@]}" > "$OUT_DIR/verl_$m.log" 2>&1
        rc=$?
        if [ "$rc" -ne 0 ]; then echo "gpu_check: verl smoke $m FAILED (exit $rc; log $OUT_DIR/verl_$m.log)" >&2; status=1; fi
    done
    # agents on verl (the vsr_env loop): Sokoban episodes with the shipped test-bed agent (384 positions: window 0,
    # 317-token prompts, 64 response tokens, so episodes stop at the response length after a few turns)
    AG="$("$VPY" -c 'from llm_harness.testbed.paths import CHECKPOINT_DIR; print(CHECKPOINT_DIR / "sokoban" / "mid")')"
    timeout 120 "$VPY" scripts/verl/make_data.py --task env --params '{"env": "sokoban", "window": 0, "n_train": 64}' \
        --out "$OUT_DIR/verl_data/env" || status=1
    for m in gigpo vsr_gigpo; do
        PYTHON="$VPY" MODEL="$AG" DATA="$OUT_DIR/verl_data/env" OUT="$OUT_DIR/verl_$m" STEPS=2 B=8 N=4 RESP=64 PROMPT_LEN=320 \
            TURN_TOKENS=8 timeout 300 scripts/verl/train.sh "$m" actor_rollout_ref.rollout.gpu_memory_utilization=0.3 \
            > "$OUT_DIR/verl_$m.log" 2>&1
        rc=$?
        if [ "$rc" -ne 0 ]; then echo "gpu_check: verl smoke $m FAILED (exit $rc; log $OUT_DIR/verl_$m.log)" >&2; status=1; fi
    done
else
    echo "== verl smoke SKIPPED: verl and vLLM are not importable by $VPY (set VERL_PYTHON; vLLM's wheel is too large to carry) =="
fi

# 7. the GPU agent recipes (issue 16 item 5: Qwen2.5-1.5B-Instruct, batch 32, G 8, lr 1e-6, 256-token
#    replies, rho 0.3, W 5) resolve; two updates of the VSR + GiGPO recipe at reduced batch when the
#    model is in the local Hugging Face cache (vLLM when importable, else the HF backend)
echo "== agents: GPU recipes configs/agent_*_gpu.yaml (Sokoban, BabyAI SynthLoc / OneRoomS8 / MiniBoss) =="
"$PY" - <<'PYEOF'
from pathlib import Path
from llm_harness.trainer.config import TrainConfig
from llm_harness.trainer.loop import check_registries
from vsr.config_io import load_config
names = sorted(p.name for p in Path("configs").glob("agent_*_gpu.yaml"))
assert len(names) >= 8, names
for name in names:
    check_registries(load_config(TrainConfig, f"configs/{name}"))
    print(f"gpu_check: {name} resolves")
PYEOF
rc=$?
if [ "$rc" -ne 0 ]; then echo "gpu_check: GPU agent recipes do not resolve (exit $rc)" >&2; status=1; fi
if "$PY" -c 'from transformers import AutoConfig; AutoConfig.from_pretrained("Qwen/Qwen2.5-1.5B-Instruct", local_files_only=True)' 2>/dev/null; then
    BACKEND=hf; "$PY" -c 'import vllm' 2>/dev/null && BACKEND=vllm
    timeout 300 "$PY" -m vsr train --config configs/agent_sokoban_vsr_gigpo_gpu.yaml --steps 2 --model.backend "$BACKEND" \
      --rollout.prompts-per-step 4 --rollout.group-size 4 --agent.turn-tokens 64 --validation.every 0 \
      --run.run-dir "$OUT_DIR/agent_recipe_run" --run.checkpoint-every 0 --run.progress false
    rc=$?
    if [ "$rc" -ne 0 ]; then echo "gpu_check: GPU agent recipe (2 updates, $BACKEND) FAILED (exit $rc)" >&2; status=1; fi
else
    echo "gpu_check: skipped the recipe run: Qwen/Qwen2.5-1.5B-Instruct is not in the local Hugging Face cache"
fi

if [ "$status" -eq 0 ]; then echo "gpu_check: all passed"; else echo "gpu_check: FAILED" >&2; fi
exit "$status"
