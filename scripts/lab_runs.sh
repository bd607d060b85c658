#!/usr/bin/env bash
# The allocation lab's committed runs: figures/lab/<bed>/ for the test bed's `low` checkpoint on the VSR
# pool, the `mid` checkpoint on the normal split, and SmolLM2-135M-Instruct on the arithmetic ladder (vLLM on the CPU).
# Usage: scripts/lab_runs.sh [low|mid|replay|real ...]   (default: low mid real, in that order)
# Resumable: rerun the same command and every finished step (probe, references, allocations) is kept.
# Needs `make install`; `real` also needs `make real-model` and `make vllm-test` (builds .venv-vllm).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-figures/lab}"
export VLLM_LOGGING_LEVEL=ERROR HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
# the machine first (vsr_util/machine.py): memory copy bandwidth on 4 KiB and huge pages; where huge pages stream
# much faster (a starved shared host), torch's allocations go on them for this run (THP_MEM_ALLOC_ENABLE=1: the same
# results, the bytes elsewhere); MACHINE_CHECK=strict refuses to start on a starved machine huge pages do not rescue,
# 0 skips the check
case "${MACHINE_CHECK:-1}" in
  0) ;;
  strict) MACHINE_ENV="$(.venv/bin/python -m vsr_util.machine --export --strict --what "the lab")"; eval "$MACHINE_ENV" ;;  # exit 3 stops the script (set -e)
  *) MACHINE_ENV="$(.venv/bin/python -m vsr_util.machine --export --what "the lab")"; eval "$MACHINE_ENV" ;;
esac
run() {  # run NAME PYTHON ARGS...
  local name="$1" py="$2"; shift 2
  local dir="$OUT/$name"
  mkdir -p "$dir"
  echo "[$(date -u +%H:%M:%S)] lab $name: start -> $dir" >&2
  /usr/bin/time -f "%e s wall, %M KiB peak RSS" -o "$dir/time.txt" "$py" -m vsr lab --out "$dir" --no-progress "$@"
  echo "[$(date -u +%H:%M:%S)] lab $name: done ($(cat "$dir/time.txt"))" >&2
}
BEDS=("$@"); [ ${#BEDS[@]} -gt 0 ] || BEDS=(low mid real)
for b in "${BEDS[@]}"; do
  case "$b" in
    low)  # the sparse regime: 128 hard prompts (at most one success in 16), p ≈ 0.04
      run low .venv/bin/python --train-config configs/regime_grpo.yaml --pool figures/compare_vsr_regime/pool.json \
        --prompts 128 --batches 64 --replay-ages 1 2 4 8 ;;
    mid)  # the normal split: the first 128 training problems of step arithmetic, p ≈ 0.4
      run mid .venv/bin/python --train-config configs/testbed_grpo.yaml --prompts 128 --batches 64 ;;
    replay)  # the Replay suites' setting: the mid checkpoint on their 64-prompt pool, GRPO at lr 1e-4; replay ages up to
      # the paper's default tau_max 10 (only the uniform allocation besides the replay step)
      run replay .venv/bin/python --train-config configs/replay_grpo.yaml --pool figures/compare_replay_tau/pool.json \
        --prompts 64 --batches 64 --allocations uniform --replay-ages 1 2 5 10 ;;
    real)  # a real pretrained model: 32 ladder prompts, vLLM sampling, smaller batches (a batch costs ~20-30 s here);
      # 32 batches per allocation: the largest that fits 2 hours on 2 cores (the reference batches ask ~47 for
      # +-25 %); uniform and the prefix arms first, so a run stopped early has resolved those (the run is resumable)
      run real .venv-vllm/bin/python --train-config configs/real_smollm2_lab.yaml --backend vllm \
        --model "$(.venv/bin/vsr model import --source smollm2-135m-instruct | tail -1)" \
        --prompts 32 --alphas 0.25 0.5 0.75 --probe-samples 8 --score-samples 1 --groups 4 --batches 32 --blocks 8 \
        --reference-batches 24 --heldout 48 \
        --allocations uniform prefix_uniform prefix_oracle vsr_linear vsr_calibrated prompt_neyman prompt_variance extra dapo ;;
    *) echo "unknown test bed '$b' (choose from: low mid replay real)" >&2; exit 2 ;;
  esac
done
