#!/usr/bin/env bash
# One-node verl 0.9.1 runs of the toolkit's methods (docs/scaling-out.md). Usage:
#   scripts/verl/train.sh METHOD [extra Hydra overrides...]
# METHOD: grpo (verl's own estimator) | vsr_grpo (the toolkit's GRPO) | vsr (VSR prefix replay)
#         | ps, ps_hard (Prefix Sampling: prefixes of last step's too-hard / too-easy groups; ps_hard keeps hard ones only)
#         | extra (GRPO + ExTra novelty) | vsr_extra (both) | replay (GRPO + rollout-level |A| replay)
#         | all (VSR + ExTra + replay) | gigpo, vsr_gigpo (agents: make_data.py --task env, the vsr_env loop;
#         VSR over interaction states with the paper's agentic rho 0.3, W 5)
# Env: PYTHON (interpreter with verl, vLLM and this package; default python3), MODEL (local model folder; Qwen2.5-0.5B-Instruct or -1.5B-Instruct for the recipe),
#      DATA (folder with train.parquet / val.parquet from make_data.py; VSR and PS need --agent vsr_prefix),
#      OUT (checkpoints and logs), STEPS (default 150), GPUS (default 1), B (prompts per step, 64),
#      N (samples per prompt, 8), RESP (max response tokens, 1024), PROMPT_LEN (512),
#      MICRO (rows per forward/backward pass of the actor and the log-prob passes, 8; verl requires it),
#      TURN_TOKENS (agents: reply budget per turn, 256), MB (PPO mini-batch in prompts; default B, B/2 for replay methods so that r = 0.5 of a batch is a whole mini-batch);
#      DEVICE (gpu, the default, or cpu: verl's own trainer on the CPU with the overrides of scripts/verl/cpu.overrides
#      after the recipe's lines, and VERL_PLATFORM=cpu; for a test-sized model and batch),
#      DRY_RUN=1 prints the Hydra overrides one per line instead of running (the tests compose them).
set -euo pipefail
METHOD="${1:?usage: scripts/verl/train.sh METHOD [overrides...]}"
shift
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
: "${MODEL:?set MODEL to a local model folder}" "${DATA:?set DATA to the make_data.py folder}" "${OUT:?set OUT}"
STEPS="${STEPS:-150}" GPUS="${GPUS:-1}" B="${B:-64}" N="${N:-8}" RESP="${RESP:-1024}" PROMPT_LEN="${PROMPT_LEN:-512}" MICRO="${MICRO:-8}"

case "$METHOD" in
  grpo)      M=(algorithm.adv_estimator=grpo) ;;
  vsr_grpo)  M=(algorithm.adv_estimator=vsr_grpo) ;;
  vsr)       M=(algorithm.adv_estimator=vsr_grpo +algorithm.vsr.prefix.rho=0.5 +algorithm.vsr.prefix.window=5) ;;
  ps)        M=(algorithm.adv_estimator=vsr_grpo +algorithm.vsr.prefix.method=prefix_sampling +algorithm.vsr.prefix.max_share=0.5) ;;
  ps_hard)   M=(algorithm.adv_estimator=vsr_grpo +algorithm.vsr.prefix.method=prefix_sampling +algorithm.vsr.prefix.max_share=0.5
                +algorithm.vsr.prefix.hard_only=true) ;;
  extra)     M=(algorithm.adv_estimator=vsr_extra_grpo +algorithm.vsr.extra.gamma=1.0) ;;
  vsr_extra) M=(algorithm.adv_estimator=vsr_extra_grpo +algorithm.vsr.extra.gamma=1.0
                +algorithm.vsr.prefix.rho=0.5 +algorithm.vsr.prefix.window=5) ;;
  replay)    M=(algorithm.adv_estimator=vsr_grpo +algorithm.vsr.replay.ratio=0.5 +algorithm.vsr.replay.max_age=10
                +algorithm.vsr.replay.alpha=0.5 +algorithm.vsr.replay.warmup=20) ;;
  all)       M=(algorithm.adv_estimator=vsr_extra_grpo +algorithm.vsr.extra.gamma=1.0
                +algorithm.vsr.prefix.rho=0.5 +algorithm.vsr.prefix.window=5
                +algorithm.vsr.replay.ratio=0.5 +algorithm.vsr.replay.max_age=10 +algorithm.vsr.replay.warmup=20) ;;
  gigpo)     M=(algorithm.adv_estimator=vsr_gigpo +algorithm.vsr.gigpo.gamma=0.95 +algorithm.vsr.gigpo.step_weight=1.0
                +algorithm.vsr.agent.turn_tokens="${TURN_TOKENS:-256}") ;;
  vsr_gigpo) M=(algorithm.adv_estimator=vsr_gigpo +algorithm.vsr.gigpo.gamma=0.95 +algorithm.vsr.gigpo.step_weight=1.0
                +algorithm.vsr.agent.turn_tokens="${TURN_TOKENS:-256}" +algorithm.vsr.prefix.rho=0.3 +algorithm.vsr.prefix.window=5) ;;
  *) echo "train.sh: unknown METHOD '$METHOD' (grpo | vsr_grpo | vsr | ps | ps_hard | extra | vsr_extra | replay | all | gigpo | vsr_gigpo)" >&2; exit 2 ;;
esac
case "$METHOD" in replay|all) MB="${MB:-$((B / 2))}" ;; *) MB="${MB:-$B}" ;; esac
case "$METHOD" in
  vsr|ps|ps_hard|vsr_extra|all) NEED=vsr_prefix HOW="make_data.py --agent vsr_prefix" ;;
  gigpo|vsr_gigpo)   NEED=vsr_env HOW="make_data.py --task env (the vsr_env agent loop)" ;;
  *)                 NEED= ;;
esac
if [ -n "$NEED" ]; then
    "${PYTHON:-python3}" - "$DATA/train.parquet" "$NEED" <<'PY' || { echo "train.sh: $METHOD needs $HOW" >&2; exit 2; }
import sys, pandas as pd
sys.exit(0 if (pd.read_parquet(sys.argv[1], columns=["agent_name"])["agent_name"] == sys.argv[2]).all() else 1)
PY
fi

export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
ARGS=(
  trainer.v1.trainer_mode=vsr_sync \
  data.train_files="$DATA/train.parquet" data.val_files="$DATA/val.parquet" \
  data.train_batch_size="$B" data.max_prompt_length="$PROMPT_LEN" data.max_response_length="$RESP" \
  data.filter_overlong_prompts=False \
  actor_rollout_ref.model.path="$MODEL" \
  actor_rollout_ref.actor.ppo_mini_batch_size="$MB" actor_rollout_ref.actor.optim.lr=1e-6 \
  actor_rollout_ref.actor.use_kl_loss=False actor_rollout_ref.actor.clip_ratio_low=0.2 actor_rollout_ref.actor.clip_ratio_high=0.28 \
  actor_rollout_ref.actor.loss_agg_mode=token-mean actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu="$MICRO" \
  actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu="$MICRO" actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu="$MICRO" \
  actor_rollout_ref.rollout.name=vllm actor_rollout_ref.rollout.n="$N" actor_rollout_ref.rollout.calculate_log_probs=True \
  actor_rollout_ref.rollout.gpu_memory_utilization=0.5 \
  reward.custom_reward_function.path="$ROOT/scripts/verl/reward.py" reward.custom_reward_function.name=compute_score \
  algorithm.use_kl_in_reward=False \
  trainer.n_gpus_per_node="$GPUS" trainer.nnodes=1 trainer.total_training_steps="$STEPS" \
  trainer.logger='[console]' trainer.default_local_dir="$OUT/checkpoints" trainer.project_name=vsr \
  trainer.experiment_name="$METHOD" trainer.val_before_train=False trainer.test_freq=25 trainer.save_freq=-1 \
  "${M[@]}"
)
case "${DEVICE:-gpu}" in
  gpu) ;;
  cpu)  # appended after the recipe's lines: Hydra keeps the last value of a key
    mapfile -t CPU < <(sed -e 's/#.*//' -e 's/[[:space:]]*$//' -e '/^$/d' "$ROOT/scripts/verl/cpu.overrides")
    ARGS+=("${CPU[@]}")
    export VERL_PLATFORM=cpu ;;
  *) echo "train.sh: DEVICE must be gpu or cpu, got '$DEVICE'" >&2; exit 2 ;;
esac
ARGS+=("$@")  # the caller's overrides last
if [ "${DRY_RUN:-0}" = 1 ]; then printf '%s\n' "${ARGS[@]}"; exit 0; fi
mkdir -p "$OUT"
exec "${PYTHON:-python3}" -m verl.trainer.main_ppo "${ARGS[@]}"
