#!/usr/bin/env bash
# GRPO + VSR on SmolLM2-135M-Instruct (CONFIG, default configs/real_smollm2_vsr_grpo.yaml), one seed: held-out
# accuracy before and after (`vsr eval`, test split of the arithmetic ladder read with the config's task parameters,
# 4 samples per prompt at T = 1), the run's metrics, peak memory (GNU time) and the s/step split, summarised into
# OUT/README.md (default figures/real_model/grpo/strict).
# Usage: scripts/real_model_grpo.sh [BACKEND] [TRAINER OVERRIDES...]   (hf, or vllm: then PYTHON defaults to
# .venv-vllm's). The lenient runs committed first: CONFIG=configs/real_smollm2_vsr_grpo_lenient.yaml with
# OUT=figures/real_model/grpo (vllm), .../grpo/lean (hf), .../grpo/lean_bf16 (hf --run.precision bf16).
# Needs `make real-model` (installs and imports the model into the cache). ~30 min on 2 CPU cores.
set -euo pipefail
cd "$(dirname "$0")/.."
BACKEND="${1:-hf}"
shift || true
if [ "$BACKEND" = vllm ]; then PY="${PYTHON:-.venv-vllm/bin/python}"; else PY="${PYTHON:-.venv/bin/python}"; fi
CONFIG="${CONFIG:-configs/real_smollm2_vsr_grpo.yaml}"
OUT="${OUT:-figures/real_model/grpo/strict}"
RUN="${RUN:-runs/$(basename "$CONFIG" .yaml)_$BACKEND}"
export VLLM_LOGGING_LEVEL=ERROR HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
# the machine first (vsr_util/machine.py): memory copy bandwidth on 4 KiB and huge pages; where huge pages stream
# much faster (a starved shared host), torch's allocations go on them for this run (THP_MEM_ALLOC_ENABLE=1: the same
# results, the bytes elsewhere); MACHINE_CHECK=strict refuses to start on a starved machine huge pages do not rescue,
# 0 skips the check
case "${MACHINE_CHECK:-1}" in
  0) ;;
  strict) MACHINE_ENV="$("$PY" -m vsr_util.machine --export --strict --what "the real-model GRPO run")"; eval "$MACHINE_ENV" ;;  # exit 3 stops the script (set -e)
  *) MACHINE_ENV="$("$PY" -m vsr_util.machine --export --what "the real-model GRPO run")"; eval "$MACHINE_ENV" ;;
esac
# the imported folder (the import is verified and idempotent; it needs the model's wheel, installed in .venv)
MODEL="$(.venv/bin/vsr model import --source smollm2-135m-instruct | tail -1)"
mkdir -p "$OUT"
# the config's task parameters (the verifier and its instruction), so evaluation reads answers as training does
# (read_mapping resolves the config's `extends:` chain, as `vsr train` does)
mapfile -t TASK_PARAMS < <("$PY" -c 'import json, sys
from vsr_util.config_io import read_mapping
for k, v in ((read_mapping(sys.argv[1]).get("task") or {}).get("params") or {}).items():
    print(f"{k}={json.dumps(v)}")' "$CONFIG")
EVAL=(--model.backend "$BACKEND" --task arith_ladder --task-params "${TASK_PARAMS[@]}" --split test --n-problems 260
      --k 4 --temperature 1.0 --top-p 1.0 --max-new-tokens 48 --seed 1)
[ -f "$OUT/eval_before/eval.json" ] || "$PY" -m vsr eval --model "$MODEL" "${EVAL[@]}" --out "$OUT/eval_before"
resume=false; [ -d "$RUN" ] && resume=true
/usr/bin/time -v -o "$OUT/train_time.txt" "$PY" -m vsr train --config "$CONFIG" \
    --model "$MODEL" --model.backend "$BACKEND" --out "$RUN" --run.progress false --run.resume "$resume" "$@"
"$PY" -m vsr eval --run-dir "$RUN" "${EVAL[@]}" --out "$OUT/eval_after"
# the run's own resolved config (the committed one with this run's overrides applied)
cp "$RUN/config.yaml" "$OUT/real_smollm2_vsr_grpo.yaml"
cp "$RUN/metrics.jsonl" "$RUN/memory.json" "$OUT/"
"$PY" scripts/real_model_grpo_report.py --out "$OUT" --backend "$BACKEND" --config "$CONFIG"
