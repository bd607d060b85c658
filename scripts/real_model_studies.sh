#!/usr/bin/env bash
# The five prefix-value studies (VSR App. D.5 / Fig. 7, ExTra §5.6 / Fig. 4) on SmolLM2-135M-Instruct through the
# vLLM backend on the CPU (or the HF backend on a GPU: DEVICE=cuda), all five levels of the arithmetic ladder's test
# split (interleaved, so the first N problems hold every level equally; the study default --min-difficulty 5 is the
# test bed's), responses of at most 64 tokens, read by the strict verifier (STRICT below). Reports in
# figures/real_model/<study>-strict/, the records they are built from (study.json, config.yaml, chunks/,
# results.parquet) in records/real_model/<study>-strict/ (prefixvalue/store.py).
# Usage: scripts/real_model_studies.sh [STUDY ...]    (default: all five, in the order below)
# Needs `make real-model` and `make vllm-test` (builds .venv-vllm). Resumable: rerun the same command after an
# interruption and every study continues from its last finished chunk. About 1.7 h on 2 CPU cores at the default sizes
# (timings per study in figures/real_model/README.md).
# Env: FULL=1 (the full sizes, below), DEVICE (cpu; cuda = the HF backend on the GPU at 2048 sequences a batch),
#      BACKEND (vllm on cpu, hf otherwise), PYTHON (.venv-vllm/bin/python), MODEL (an imported model folder; default
#      `vsr model import` of the named model, which needs `make real-model`), N_PROBLEMS (replaces the study's problem
#      count; the folder is then <study>-<N>), TAG (appended to the folder name, e.g. -h200),
#      STRICT (1, the default: the strict verifier, arith_ladder's answer_mode strict, a declared final answer only,
#      with STRICT_INSTRUCTION asking for one and STRICT_BUDGETS as level_budgets, into <study>...-strict/;
#      0: the lenient last-number verifier of the runs committed first, into <study>.../ as they are).
# The H200 runs in figures/real_model/*-h200/ ran the same studies as (PYTHON=python3 MODEL=<folder imported there> DEVICE=cuda TAG=-h200):
#   FULL=1 scripts/real_model_studies.sh prefix-selection mte-correlation
#   FULL=1 N_PROBLEMS=200 scripts/real_model_studies.sh prefix-selection
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv-vllm/bin/python}"
OUT="${OUT:-figures/real_model}"
DEVICE="${DEVICE:-cpu}"
if [ "$DEVICE" = cpu ]; then BACKEND="${BACKEND:-vllm}"; BATCH=(); else BACKEND="${BACKEND:-hf}"; BATCH=(--max-batch-sequences 2048); fi
export VLLM_LOGGING_LEVEL=ERROR HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
# the machine first (vsr_util/machine.py): memory copy bandwidth on 4 KiB and huge pages; where huge pages stream
# much faster (a starved shared host), torch's allocations go on them for this run (THP_MEM_ALLOC_ENABLE=1: the same
# results, the bytes elsewhere); MACHINE_CHECK=strict refuses to start on a starved machine huge pages do not rescue,
# 0 skips the check
case "${MACHINE_CHECK:-1}" in
  0) ;;
  strict) MACHINE_ENV="$("$PY" -m vsr_util.machine --export --strict --what "the real-model studies")"; eval "$MACHINE_ENV" ;;  # exit 3 stops the script (set -e)
  *) MACHINE_ENV="$("$PY" -m vsr_util.machine --export --what "the real-model studies")"; eval "$MACHINE_ENV" ;;
esac
MODEL="${MODEL:-$(.venv/bin/vsr model import --source smollm2-135m-instruct | tail -1)}"
COMMON=(--backend "$BACKEND" --device "$DEVICE" "${BATCH[@]}" --model "$MODEL" --task arith_ladder --split test
        --min-difficulty 0 --response-budget 64 --seed 0 --no-progress)
case "${STRICT:-1}" in
  1)  # the strict verifier: only a declared final answer passes (the card's chance level; arith_ladder.STRICT_READER)
    COMMON+=(--task-params answer_mode=strict "instruction=${STRICT_INSTRUCTION:-Answer briefly and finish with \"The answer is\" and the number.}"
             "level_budgets=${STRICT_BUDGETS:-"{}"}")
    TAG="${TAG:-}-strict" ;;
  0) COMMON+=(--task-params answer_mode=lenient) ;;  # a declared answer, else the last number (the first runs)
  *) echo "STRICT must be 1 (the strict verifier) or 0 (the lenient one), got '$STRICT'" >&2; exit 2 ;;
esac
run() {  # run STUDY ARGS...: one study, timed; resumes from the chunks already in its records folder
  local study="$1"; shift
  local dir="$OUT/$study$SUFFIX${TAG:-}"
  mkdir -p "$dir"
  echo "[$(date -u +%H:%M:%S)] $study: start -> $dir" >&2
  if [ -x /usr/bin/time ]; then
    /usr/bin/time -f "%e s wall, %M KiB peak RSS" -o "$dir/time.txt" \
      "$PY" -m vsr study "$study" "${COMMON[@]}" --out "$dir" "$@"
  else  # no GNU time (a GPU image, say): wall seconds only
    local t0=$SECONDS
    "$PY" -m vsr study "$study" "${COMMON[@]}" --out "$dir" "$@"
    echo "$(( SECONDS - t0 )) s wall, peak RSS not measured" > "$dir/time.txt"
  fi
  echo "[$(date -u +%H:%M:%S)] $study: done ($(cat "$dir/time.txt"))" >&2
}
# Sizes: hint-ratio at its full size (200 problems); MTE correlation and prefix selection reduced so that each
# takes about half an hour here (ExTra's protocol samples 32 trajectories and 16 continuations per prefix);
# failed-prefix and sigma-validation at 40 problems of the word level (difficulty 5),
# the runs committed first; FULL=1 runs them at 200 problems of every level instead, into <study>-full/ (~35 min
# each), mte-correlation at the size of ExTra's Table 4 with 16 trajectories per problem (60 min measured) and
# prefix-selection at 60 problems (not run on the CPU; about 2.5 h estimated; 51 s on an H200).
declare -A ARGS=(
  [hint-ratio]="--n-problems 200 --chunk-problems 25 --n-continuations 8"
  [mte-correlation]="--n-problems 12 --chunk-problems 2 --n-trajectories 16 --n-continuations 8"
  [prefix-selection]="--n-problems 20 --chunk-problems 10 --max-candidates 16 --mc-continuations 8"
  [failed-prefix]="--n-problems 40 --chunk-problems 50 --min-difficulty 5 --n-continuations 8"
  [sigma-validation]="--n-problems 40 --chunk-problems 50 --min-difficulty 5 --n-continuations 16"
)
SUFFIX=""
if [ "${FULL:-0}" = 1 ]; then  # into <study>-full/, beside the reduced runs
  ARGS[failed-prefix]="--n-problems 200 --chunk-problems 25 --n-continuations 8"
  ARGS[sigma-validation]="--n-problems 200 --chunk-problems 25 --n-continuations 16"
  # ExTra Table 4's size: MTE correlation over ~600 prefixes of 22 problems with K = 16 continuations (ExTra §5.6;
  # 60 min here); prefix selection on 3x the problems at 16 Monte-Carlo continuations (~2.5 h estimated)
  ARGS[mte-correlation]="--n-problems 22 --chunk-problems 2 --n-trajectories 16 --n-continuations 16"
  ARGS[prefix-selection]="--n-problems 60 --chunk-problems 10 --max-candidates 16 --mc-continuations 16"
  SUFFIX="-full"
fi
if [ -n "${N_PROBLEMS:-}" ]; then  # another problem count: into <study>-<N>/
  [[ "$N_PROBLEMS" =~ ^[1-9][0-9]*$ ]] || { echo "N_PROBLEMS must be a positive integer, got '$N_PROBLEMS'" >&2; exit 2; }
  for k in "${!ARGS[@]}"; do ARGS[$k]="$(sed -E "s/--n-problems [0-9]+/--n-problems $N_PROBLEMS/" <<< "${ARGS[$k]}")"; done
  SUFFIX="-$N_PROBLEMS"
fi
STUDIES=("$@"); [ ${#STUDIES[@]} -gt 0 ] || STUDIES=(hint-ratio mte-correlation prefix-selection failed-prefix sigma-validation)
failed=()
for s in "${STUDIES[@]}"; do
  [ -n "${ARGS[$s]+x}" ] || { echo "unknown study '$s' (choose from: ${!ARGS[*]})" >&2; exit 2; }
  # shellcheck disable=SC2086
  run "$s" ${ARGS[$s]} || { echo "[$(date -u +%H:%M:%S)] $s: FAILED (the other studies go on)" >&2; failed+=("$s"); }
done
[ ${#failed[@]} -eq 0 ] || { echo "failed: ${failed[*]}" >&2; exit 1; }
