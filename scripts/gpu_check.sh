#!/usr/bin/env bash
# GPU check: one short run over every GPU path, on a CUDA machine with torch + transformers
# (nothing downloaded). Phase 1 runs alone so that its timings are not shared with anything:
#   contract   scripts/gpu_check.py: the backend contract on the GPU without pytest, and HFBackend.generate on the
#              test-bed model at large batch (512 prompts x 8 samples) against plain model.generate (gpu_check.json).
# Phase 2 runs its steps at the same time (one GPU, 16 CPU cores on a lent machine; each step its own log):
#   backend    the backend pytest suite on the GPU (VSR_TEST_DEVICE=cuda), when pytest + hypothesis are installed;
#   train      scripts/gpu_check_train.py: GRPO and all method plug-ins composed on CUDA, with stop + resume; the
#              lean bf16 step (group prompt once, fused AdamW, inverse-CDF sampler, static decode, run.precision bf16)
#              with its CUDA memory record, train/sample gap and a resume through its streamed checkpoint;
#   study      one prefix-value study (sigma-validation, quick) with the HF backend on CUDA;
#   vllm       with vLLM importable: 3 GRPO steps and that study with --backend vllm (weight sync on the GPU);
#   agents     vsr eval --env sokoban (and babyai with minigrid), then GiGPO + VSR training with stop + resume;
#   recipes    the GPU agent recipes resolve, and two reduced updates of the VSR + GiGPO recipe on
#              Qwen2.5-1.5B-Instruct when it is in the local Hugging Face cache;
#   verl       verl 0.9.1: a 2-step smoke of each method of scripts/verl/train.sh on the test-bed model,
#              when verl and vLLM are importable by VERL_PYTHON (default $PY); skipped, and said so, otherwise.
# Usage: scripts/gpu_check.sh [OUT_DIR]      (default: $OUT, else ${TMPDIR:-/tmp}/gpu_check)
# Env:   PYTHON (interpreter; default python3), GPU_CHECK_ARGS (extra arguments for gpu_check.py),
#        STEPS (phase-2 steps to run, default all: "backend train study vllm agents recipes verl").
# Output: OUT_DIR/<step>.log per step and OUT_DIR/steps.tsv (step, exit status, seconds; 124 = cut by its timeout).
# Exit status: 0 all passed; 2 no CUDA; 3 OUT_DIR already holds files (a second run into the same folder would find the
# first run's checkpoints and fail the fresh-run checks); 1 when a check or the test suite failed.
# Budget: phase 1 at most 150 s, phase 2 at most 300 s (its longest step limit), so under 8 minutes in all
# without verl; the verl smoke runs its methods one after another (up to ~25 min).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUT_DIR="${1:-${OUT:-${TMPDIR:-/tmp}/gpu_check}}"
if [ -d "$OUT_DIR" ] && [ -n "$(ls -A "$OUT_DIR")" ]; then
    echo "gpu_check: $OUT_DIR is not empty (an earlier run's results?): remove it or name another folder" >&2
    exit 3
fi
mkdir -p "$OUT_DIR"
PY="${PYTHON:-$(command -v python3 || command -v python)}"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"
STEPS="${STEPS:-backend train study vllm agents recipes verl}"

echo "gpu_check: python $PY; output -> $OUT_DIR; $(nproc --all) cores"
if ! "$PY" -c 'import sys, torch, transformers; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    echo "gpu_check: FAILED: CUDA is not available to $PY (torch.cuda.is_available() is False or torch/transformers missing)" >&2
    exit 2
fi
"$PY" -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "|", torch.cuda.get_device_name(0), "| transformers", transformers.__version__)'
printf 'step\texit\tseconds\n' > "$OUT_DIR/steps.tsv"

# step NAME: run the function step_NAME, its output in OUT_DIR/NAME.log, its exit status and seconds in steps.tsv
step() {
    local name="$1" t0 rc
    t0=$(date +%s)
    "step_$name" > "$OUT_DIR/$name.log" 2>&1
    rc=$?
    printf '%s\t%s\t%s\n' "$name" "$rc" "$(( $(date +%s) - t0 ))" >> "$OUT_DIR/steps.tsv"
    if [ "$rc" -eq 0 ]; then echo "gpu_check: $name ok ($(( $(date +%s) - t0 )) s)"
    else echo "gpu_check: $name FAILED (exit $rc; 124 = cut by its timeout; log $OUT_DIR/$name.log)" >&2; fi
    return "$rc"
}

step_contract() {
    # shellcheck disable=SC2086
    timeout 150 "$PY" scripts/gpu_check.py --out "$OUT_DIR" ${GPU_CHECK_ARGS:-}
}

step_backend() {  # the pytest backend suite on the GPU (vLLM tests skip without vllm)
    if ! "$PY" -c 'import pytest, hypothesis' 2>/dev/null; then
        echo "skipped: pytest or hypothesis not importable (the contract step checks the backend without them)"; return 0
    fi
    local xdist=(); "$PY" -c 'import xdist' 2>/dev/null && xdist=(-n 4)
    # the benchmark smoke test is left out: it needs the project's CLI dependencies (tyro, ...)
    VSR_TEST_DEVICE=cuda timeout 300 "$PY" -m pytest tests/llm_harness/backends -q -p no:cacheprovider "${xdist[@]}" \
        --ignore=tests/llm_harness/backends/test_generation_benchmark.py \
        --ignore=tests/llm_harness/backends/test_vllm_commands.py --junitxml="$OUT_DIR/backend_tests.xml"
}

step_train() {  # GRPO and every method plug-in composed on CUDA, then a stop + resume
    timeout 240 "$PY" scripts/gpu_check_train.py --out "$OUT_DIR/train" --steps 20
}

step_study() {  # a prefix-value study with the HF backend on CUDA, quick size
    timeout 240 "$PY" -m prefixvalue "${STUDY:-sigma-validation}" --quick --device cuda --no-progress --out "$OUT_DIR/study"
}

step_vllm() {  # the same in-process weight-transfer path as on the CPU
    if ! "$PY" -c 'import vllm' 2>/dev/null; then echo "skipped: vllm is not importable by $PY"; return 0; fi
    timeout 240 "$PY" -m vsr train --config configs/testbed_grpo.yaml --steps 3 --model.backend vllm --model.device cuda \
      --validation.every 3 --validation.n-problems 16 --validation.k 2 --out "$OUT_DIR/vllm_train" \
      --run.progress false || return $?
    timeout 180 "$PY" -m prefixvalue sigma-validation --quick --backend vllm --device cuda --no-progress --out "$OUT_DIR/vllm_study"
}

step_agents() {  # the batched multi-turn engine (vsr eval --env), then GiGPO + VSR over interaction states on
    # Sokoban with a stop + resume, on a random text-alphabet model
    local args=(--model.random-init --model.alphabet text --model.max-context 768 --model.hidden-size 64
                --model.num-layers 2 --model.device "${AGENT_DEVICE:-cuda}")
    timeout 120 "$PY" -m vsr eval --env sokoban "${args[@]}" --n-problems 32 --k 4 --out "$OUT_DIR/agent_eval" || return $?
    if "$PY" -c 'import minigrid' 2>/dev/null; then  # BabyAI through minigrid (the agents extra): the shipped agent
        timeout 120 "$PY" -m vsr eval --env babyai --level OneRoomS8 --max-steps 16 --window 0 \
          --model llm_harness/testbed/checkpoints/babyai/mid --model.device "${AGENT_DEVICE:-cuda}" \
          --n-problems 32 --k 4 --out "$OUT_DIR/agent_eval_babyai" || return $?
    else
        echo "skipped vsr eval --env babyai: minigrid is not installed (pip install -e .[agents])"
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
    timeout 150 "$PY" -m vsr train --config "$OUT_DIR/agent_train.yaml" "${args[@]}" --run.stop-after 2 \
      && timeout 150 "$PY" -m vsr train --config "$OUT_DIR/agent_train.yaml" "${args[@]}" --run.resume true
}

step_recipes() {  # the agentic GPU recipes: Qwen2.5-1.5B-Instruct, batch 32, G 8, lr 1e-6, 256-token replies, rho 0.3, W 5
    "$PY" - <<'PYEOF' || return $?
from pathlib import Path
from llm_harness.trainer.config import TrainConfig
from llm_harness.trainer.loop import check_registries
from vsr_util.config_io import load_config
names = sorted(p.name for p in Path("configs").glob("agent_*_gpu.yaml"))
assert len(names) >= 8, names
for name in names:
    check_registries(load_config(TrainConfig, f"configs/{name}"))
    print(f"gpu_check: {name} resolves")
PYEOF
    if ! "$PY" -c 'from transformers import AutoConfig; AutoConfig.from_pretrained("Qwen/Qwen2.5-1.5B-Instruct", local_files_only=True)' 2>/dev/null; then
        echo "skipped the recipe run: Qwen/Qwen2.5-1.5B-Instruct is not in the local Hugging Face cache"; return 0
    fi
    local backend=hf; "$PY" -c 'import vllm' 2>/dev/null && backend=vllm
    timeout 300 "$PY" -m vsr train --config configs/agent_sokoban_vsr_gigpo_gpu.yaml --steps 2 --model.backend "$backend" \
      --rollout.prompts-per-step 4 --rollout.group-size 4 --agent.turn-tokens 64 --validation.every 0 \
      --out "$OUT_DIR/agent_recipe_run" --run.checkpoint-every 0 --run.progress false
}

step_verl() {  # each method for 2 steps on the shipped test-bed model (step arithmetic; its tokenizer has no chat
    # template, so make_data.py writes vsr_prompt_ids), then the agents' vsr_env loop on Sokoban
    local vpy="${VERL_PYTHON:-$PY}" status=0 tb ag m d x rc
    if ! "$vpy" -c 'import verl, vllm' 2>/dev/null; then
        echo "skipped: verl and vLLM are not importable by $vpy (set VERL_PYTHON; vLLM's wheel is too large to carry)"; return 0
    fi
    tb="$("$vpy" -c 'from llm_harness.testbed.paths import shipped_checkpoint; print(shipped_checkpoint("mid"))')"
    for agent in single_turn_agent vsr_prefix; do
        timeout 120 "$vpy" scripts/verl/make_data.py --task step_arith --params '{"n_train": 256, "n_validation": 16}' \
            --out "$OUT_DIR/verl_data/$agent" --agent "$agent" --tokenizer "$tb" || status=1
    done
    for m in grpo vsr_grpo vsr extra vsr_extra replay all; do
        case "$m" in vsr|vsr_extra|all) d=vsr_prefix ;; *) d=single_turn_agent ;; esac
        case "$m" in replay|all) x=(++algorithm.vsr.replay.warmup=0) ;; *) x=() ;; esac
        PYTHON="$vpy" MODEL="$tb" DATA="$OUT_DIR/verl_data/$d" OUT="$OUT_DIR/verl_$m" STEPS=2 B=8 N=4 RESP=64 PROMPT_LEN=64 \
            timeout 300 scripts/verl/train.sh "$m" actor_rollout_ref.rollout.gpu_memory_utilization=0.3 "${x[@]}" \
            > "$OUT_DIR/verl_$m.log" 2>&1
        rc=$?; [ "$rc" -eq 0 ] || { echo "verl smoke $m FAILED (exit $rc; log $OUT_DIR/verl_$m.log)"; status=1; }
    done
    # agents on verl (the vsr_env loop): Sokoban episodes with the shipped test-bed agent (384 positions: window 0,
    # 317-token prompts, 64 response tokens, so episodes stop at the response length after a few turns)
    ag="$("$vpy" -c 'from llm_harness.testbed.paths import CHECKPOINT_DIR; print(CHECKPOINT_DIR / "sokoban" / "mid")')"
    timeout 120 "$vpy" scripts/verl/make_data.py --task env --params '{"env": "sokoban", "window": 0, "n_train": 64}' \
        --out "$OUT_DIR/verl_data/env" || status=1
    for m in gigpo vsr_gigpo; do
        PYTHON="$vpy" MODEL="$ag" DATA="$OUT_DIR/verl_data/env" OUT="$OUT_DIR/verl_$m" STEPS=2 B=8 N=4 RESP=64 PROMPT_LEN=320 \
            TURN_TOKENS=8 timeout 300 scripts/verl/train.sh "$m" actor_rollout_ref.rollout.gpu_memory_utilization=0.3 \
            > "$OUT_DIR/verl_$m.log" 2>&1
        rc=$?; [ "$rc" -eq 0 ] || { echo "verl smoke $m FAILED (exit $rc; log $OUT_DIR/verl_$m.log)"; status=1; }
    done
    return "$status"
}

status=0
echo "== phase 1: contract + large-batch timing (alone) =="
step contract || status=1
echo "== phase 2: $STEPS (at the same time) =="
pids=()
for s in $STEPS; do
    declare -F "step_$s" > /dev/null || { echo "gpu_check: unknown step '$s'" >&2; status=1; continue; }
    step "$s" & pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || status=1; done
column -t "$OUT_DIR/steps.tsv" 2>/dev/null || cat "$OUT_DIR/steps.tsv"
if [ "$status" -eq 0 ]; then echo "gpu_check: all passed"; else echo "gpu_check: FAILED" >&2; fi
exit "$status"
