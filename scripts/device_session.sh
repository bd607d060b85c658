#!/usr/bin/env bash
# One accelerator-machine session (H200 + 16 CPU cores), everything in one call:
#   * on the GPU: scripts/gpu_check.sh (backend suite + contract + large-batch timing, the trainer
#     and every plug-in on CUDA with resume, and a quick prefix-value study with the HF backend);
#   * at the same time, on the CPU cores: the method comparison (`python -m llm_harness.compare`,
#     resumable: runs that do not finish in time are simply rerun later, elsewhere).
# Results are packed into $OUT (at most 8 files): gpu.log, compare.log, gpu_results.tgz, compare_runs.tgz.
# Env: COMPARE_WORKERS (default 12), COMPARE_TIMEOUT s (default 480), COMPARE_ARGS (extra flags),
#      STUDY (default sigma-validation, read by gpu_check.sh), PYTHON (default python3).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUT="${OUT:-/tmp/device_out}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE TOKENIZERS_PARALLELISM=false
W="${COMPARE_WORKERS:-12}"
T="${COMPARE_TIMEOUT:-480}"
echo "device_session: $(date -u +%FT%TZ) $(nproc --all) cores; compare: $W workers, ${T}s" | tee "$OUT/gpu.log"

# shellcheck disable=SC2086
( timeout -k 15 "$T" "$PY" -m llm_harness.compare --suite testbed --out runs/compare_testbed --workers "$W" ${COMPARE_ARGS:-} \
      >"$OUT/compare.log" 2>&1; echo "compare exit $? at $(date -u +%T)" >>"$OUT/compare.log" ) &
CPID=$!

G=/tmp/gpu_results
rm -rf "$G"; mkdir -p "$G"
{
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 || true
    echo "== gpu_check.sh (backend suite, contract, trainer + plug-ins on CUDA, a prefix-value study) =="
    OMP_NUM_THREADS=2 timeout 560 bash scripts/gpu_check.sh "$G/backend"; echo "gpu_check.sh exit $?"
} >>"$OUT/gpu.log" 2>&1
echo "gpu part done at $(date -u +%T)" >>"$OUT/gpu.log"

wait "$CPID"
"$PY" -m llm_harness.compare --suite testbed --out runs/compare_testbed --report-only ${COMPARE_ARGS:-} >>"$OUT/compare.log" 2>&1
tar czf "$OUT/compare_runs.tgz" --exclude=checkpoints runs/compare_testbed 2>>"$OUT/compare.log"
tar czf "$OUT/gpu_results.tgz" --exclude=checkpoints -C /tmp gpu_results 2>>"$OUT/gpu.log"
ls -la "$OUT" >>"$OUT/gpu.log"
echo "device_session: done $(date -u +%T)" >>"$OUT/gpu.log"
