"""verl 0.9.1's own trainer, end to end on the CPU: ``scripts/verl/train.sh`` with ``DEVICE=cpu`` (the
``cpu`` platform and ``vsr_hf`` rollout of the toolkit's verl plug-ins) trains the test bed's model on
step arithmetic, on local Ray with TransferQueue, through verl's v1 ``PPOTrainer`` in the ``vsr_sync``
mode. What only a real loop shows, read back from the run's audit (``algorithm.vsr.audit_dir``: the rows
each actor update trained on), its checkpoints and its log:

* the control (verl's own ``grpo``) and each toolkit estimator write the advantages the toolkit's
  formulas give on the same rows;
* the parameters change (the checkpoint's weights against the model's), a checkpoint is written and a
  second launch resumes from it and trains the next step only;
* VSR's buffer actor received finished samples and handed out prefix states: replayed rows start from
  a prefix of an earlier sample of the same prompt, outside the loss;
* rollout-level replay puts stored rows back with their birth advantages and behaviour log-probs.

Each launch costs about a minute on two cores (Ray, TransferQueue and a dozen processes that import
torch and verl); the launches run in one xdist group, in order.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("verl")

from llm_harness.testbed.paths import shipped_checkpoint  # noqa: E402
from llm_harness.trainer.advantages import group_advantages  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("verl_end_to_end")]

ROOT = Path(__file__).resolve().parents[4]
PARAMS = {"n_train": 16, "n_validation": 4, "n_test": 4, "n_hard": 2}
N, B, RESP = 4, 4, 32
TIMEOUT = 420
#: the test bed has no chat template, so every launch tokenises through the toolkit's ``vsr_prefix`` loop
#: (``vsr_prompt_ids``); with ``rho: 0`` it starts every sample from its own prompt (no VSR)
NO_PREFIX = ("+algorithm.vsr.prefix.rho=0",)
#: steps of the launch that runs VSR, ExTra and rollout-level replay together (``everything``)
ALL_STEPS = 4


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("verl_e2e_data")
    subprocess.run([sys.executable, str(ROOT / "scripts/verl/make_data.py"), "--task", "step_arith", "--params", json.dumps(PARAMS),
                    "--out", str(d), "--agent", "vsr_prefix", "--tokenizer", str(shipped_checkpoint("high"))],
                   check=True, capture_output=True, timeout=120)
    return d


def launch(method: str, data: Path, out: Path, steps: int, *overrides: str, model: Path | None = None, **env_over: str) -> str:
    """``scripts/verl/train.sh METHOD`` on the CPU at test size; returns its log (stdout + stderr)."""
    env = {**os.environ, "DEVICE": "cpu", "PYTHON": sys.executable, "MODEL": str(model or shipped_checkpoint("high")), "DATA": str(data),
           "OUT": str(out), "STEPS": str(steps), "B": str(B), "N": str(N), "RESP": str(RESP), "PROMPT_LEN": "32", "MICRO": "8",
           "RAY_AUTH_MODE": "disabled", "RAY_DEDUP_LOGS": "0", "HYDRA_FULL_ERROR": "1", **env_over}
    args = ["actor_rollout_ref.actor.optim.lr=1e-3", f"+algorithm.vsr.audit_dir={out / 'audit'}", "trainer.save_freq=2",
            # the test bed's tokenizer has no chat template, which verl's validation loop needs
            "trainer.test_freq=-1", "actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]",
            f"data.seed=0", *overrides]
    out.mkdir(parents=True, exist_ok=True)
    p = subprocess.run(["bash", str(ROOT / "scripts/verl/train.sh"), method, *args], env=env, capture_output=True, text=True,
                       timeout=TIMEOUT, cwd=out)  # Hydra writes its outputs/ folder in the working directory
    log = p.stdout + p.stderr
    (out / "train.log").write_text(log)
    assert p.returncode == 0, f"train.sh {method} failed (rc {p.returncode}):\n{log[-6000:]}"
    return log


def audit(out: Path, step: int) -> dict:
    return json.loads((out / "audit" / f"step_{step}.json").read_text())


def groups(rows: list[dict]) -> dict[str, list[dict]]:
    g: dict[str, list[dict]] = {}
    for r in rows:
        g.setdefault(r["uid"], []).append(r)
    return g


def row_advantage(r: dict) -> float:
    """The row's advantage (outcome estimators: the same value on every response token)."""
    a = np.asarray(r["advantages"], dtype=float)[np.asarray(r["response_mask"], dtype=bool)]
    assert a.size and np.ptp(a) < 1e-6, f"advantage not constant over the response of {r['key']}"
    return float(a[0])


def check_group_estimator(rows: list[dict], name: str) -> int:
    """Every fresh group's advantages against the toolkit's estimator ``name`` (verl's conventions:
    Bessel std, ε 1e-6); returns the number of groups with a non-zero advantage."""
    moving = 0
    for uid, g in groups([r for r in rows if not r["tags"].get("replayed")]).items():
        expect = group_advantages(name, [np.array([r["reward"] for r in g])], 1e-6, 1)[0]
        got = np.array([row_advantage(r) for r in g])
        np.testing.assert_allclose(got, expect, atol=1e-5, err_msg=f"group {uid}")
        moving += bool(np.any(np.abs(expect) > 0))
    return moving


def weights(folder: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


def steps_logged(log: str) -> list[int]:
    return [int(s) for s in re.findall(r"\bstep:(\d+) - ", log)]


@pytest.fixture(scope="module")
def control(data, tmp_path_factory):
    out = tmp_path_factory.mktemp("verl_e2e_grpo")
    return out, launch("grpo", data, out, 2, *NO_PREFIX)


def logged(log: str, key: str) -> dict[int, float]:
    """verl's console metric ``key`` per step."""
    out = {}
    for line in log.splitlines():
        m = re.search(r"\bstep:(\d+) - .*?\b" + re.escape(key) + r":(np\.float64\()?([-0-9.e+]+)", line)
        if m:
            out[int(m.group(1))] = float(m.group(3))
    return out


def test_control_trains_with_verls_grpo_and_changes_the_parameters(control):
    out, log = control
    assert steps_logged(log) == [1, 2]
    moving = 0
    hi, lo = logged(log, "critic/advantages/max"), logged(log, "critic/advantages/min")
    for step in (1, 2):
        a = audit(out, step)
        assert a["adv_estimator"] == "grpo" and len(a["rows"]) == N * B
        assert all(r["extra"]["vsr_origin"] == "fresh" for r in a["rows"])  # VSR off: every sample from its prompt
        moving += check_group_estimator(a["rows"], "grpo")
        adv = [row_advantage(r) for r in a["rows"]]  # the audit holds the rows verl's metrics describe
        assert max(adv) == pytest.approx(hi[step], abs=1e-5) and min(adv) == pytest.approx(lo[step], abs=1e-5)
    assert moving > 0, "no group with a non-zero advantage: the check would pass on any estimator"
    before = weights(shipped_checkpoint("high"))
    after = weights(out / "checkpoints/global_step_2/actor/huggingface")
    assert before.keys() <= after.keys() | {"lm_head.weight"}
    changed = [k for k in before if k in after and not np.allclose(before[k].numpy(), after[k].float().numpy())]
    assert len(changed) > len(before) // 2, f"only {len(changed)} of {len(before)} tensors changed"


def test_a_second_launch_resumes_from_the_checkpoint_and_trains_the_next_step(control, data):
    out, _ = control
    first = {s: (out / "audit" / f"step_{s}.json").read_bytes() for s in (1, 2)}
    log = launch("grpo", data, out, 3, "trainer.save_freq=3", *NO_PREFIX)
    assert steps_logged(log) == [3], "the resumed launch must train step 3 only"
    assert "global_step_2" in log  # verl names the checkpoint it loads
    assert {s: (out / "audit" / f"step_{s}.json").read_bytes() for s in (1, 2)} == first
    rows = audit(out, 3)["rows"]
    assert {r["tags"]["min_global_steps"] for r in rows} == {2}  # sampled with the resumed step-2 weights
    check_group_estimator(rows, "grpo")
    w2, w3 = weights(out / "checkpoints/global_step_2/actor/huggingface"), weights(out / "checkpoints/global_step_3/actor/huggingface")
    assert any(not np.array_equal(w2[k].numpy(), w3[k].numpy()) for k in w2)


@pytest.mark.parametrize("method,estimator", [("vsr_grpo", "grpo")])
def test_toolkit_estimator_in_verls_loop(method, estimator, data, tmp_path):
    log = launch(method, data, tmp_path, 2, *NO_PREFIX)
    assert steps_logged(log) == [1, 2]
    assert sum(check_group_estimator(audit(tmp_path, s)["rows"], estimator) for s in (1, 2)) > 0


def test_drgrpo_in_verls_loop(data, tmp_path):
    log = launch("vsr_grpo", data, tmp_path, 2, "algorithm.adv_estimator=vsr_drgrpo", *NO_PREFIX)
    assert steps_logged(log) == [1, 2]
    for s in (1, 2):
        a = audit(tmp_path, s)
        assert a["adv_estimator"] == "vsr_drgrpo"
        check_group_estimator(a["rows"], "drgrpo")


@pytest.fixture(scope="module")
def everything(data, tmp_path_factory):
    """VSR prefix replay, ExTra's novelty and rollout-level replay in one launch (``train.sh all``).

    The ``mid`` checkpoint at temperature 1.5 over four steps: ExTra's bonus is non-zero only for a correct response
    that differs from the prompt's earlier and sibling correct ones, and the ``high`` checkpoint at temperature 1
    repeats its correct answer token for token — a simulation of this launch's fresh draws (the test bed's sampler
    without training, 200 seeds) gave no bonus at all in 68 of 200 three-step runs that way, 0 of 200 four-step runs this way."""
    out = tmp_path_factory.mktemp("verl_e2e_all")
    log = launch("all", data, out, ALL_STEPS, "algorithm.vsr.replay.warmup=0", "actor_rollout_ref.rollout.temperature=1.5",
                 model=shipped_checkpoint("mid"))
    return out, log, [audit(out, s) for s in range(1, ALL_STEPS + 1)]


def test_vsr_buffer_receives_samples_and_hands_out_prefix_states(everything):
    _, log, steps = everything
    assert steps_logged(log) == list(range(1, ALL_STEPS + 1))
    assert steps[0]["prefix_buffer"]["trajectories"] == 0 and steps[-1]["prefix_buffer"]["trajectories"] > 0
    earlier: list[dict] = []
    replayed = 0
    for a in steps:
        for r in a["rows"]:
            if r["tags"].get("replayed"):
                continue
            L = int(r["extra"]["vsr_prefix_len"])
            if r["extra"]["vsr_origin"] == "replayed_prefix":
                replayed += 1
                assert L > 0
                assert r["response_mask"][:L] == [0] * L and all(r["response_mask"][L:])  # the prefix is context
                assert any(e["prompt_ids"] == r["prompt_ids"] and e["response_ids"][:L] == r["response_ids"][:L] for e in earlier), \
                    f"{r['key']}: its prefix is no earlier sample's"
            else:
                assert L == 0
        earlier += [r for r in a["rows"] if not r["tags"].get("replayed")]
    assert replayed > 0, "no sample started from a replayed prefix"


def test_replayed_rows_carry_their_birth_fields(everything):
    _, _, steps = everything
    born = {r["key"]: (a["global_step"], r) for a in steps for r in a["rows"] if not r["tags"].get("replayed")}
    replayed = [(a["global_step"], r) for a in steps for r in a["rows"] if r["tags"].get("replayed")]
    assert replayed, "rollout-level replay drew no row"
    for step, r in replayed:
        birth_step, b = born[r["tags"]["replay_birth_key"]]
        assert birth_step < step and r["key"].startswith(f"replay{step - 1}/")
        for f in ("prompt_ids", "response_ids", "response_mask", "advantages", "old_log_probs"):
            assert r[f] == b[f], f"{r['key']}: {f} differs from its birth row"


def test_extra_novelty_in_verls_loop_is_the_estimators_on_the_rows_it_trained(everything):
    from llm_harness.integrations.verl import estimators
    from llm_harness.integrations.verl.estimators import ESTIMATORS, NoveltyMemory

    import torch
    from omegaconf import OmegaConf

    _, _, steps = everything
    estimators.MEMORY = NoveltyMemory()
    cfg = OmegaConf.create({"vsr": {"extra": {"gamma": 1.0}}, "norm_adv_by_std_in_grpo": True})
    bonus = 0
    for a in steps:
        rows = [r for r in a["rows"] if not r["tags"].get("replayed")]
        L = max(len(r["response_mask"]) for r in rows)
        mask = torch.zeros(len(rows), L)
        rew = torch.zeros(len(rows), L)
        for i, r in enumerate(rows):
            n = len(r["response_mask"])
            mask[i, :n] = torch.tensor(r["response_mask"], dtype=torch.float32)
            rew[i, n - 1] = r["reward"]
        nt = {"prompt_ids": np.array([r["prompt_ids"] for r in rows] + [None], dtype=object)[:-1],
              "response_ids": np.array([r["response_ids"] for r in rows] + [None], dtype=object)[:-1]}
        adv, _ = ESTIMATORS["vsr_extra_grpo"](token_level_rewards=rew, response_mask=mask, index=np.array([r["uid"] for r in rows], dtype=object),
                                              config=cfg, non_tensor_batch=nt)
        for i, r in enumerate(rows):
            n = len(r["response_mask"])
            np.testing.assert_allclose(np.asarray(r["advantages"])[np.asarray(r["response_mask"], bool)],
                                       adv[i, :n].numpy()[np.asarray(r["response_mask"], bool)], atol=1e-5, err_msg=r["key"])
        grpo = {uid: group_advantages("grpo", [np.array([x["reward"] for x in g])], 1e-6, 1)[0] for uid, g in groups(rows).items()}
        pos = {uid: 0 for uid in grpo}
        for r in rows:
            bonus += abs(row_advantage(r) - grpo[r["uid"]][pos[r["uid"]]]) > 1e-6
            pos[r["uid"]] += 1
    assert bonus > 0, "no row got a novelty bonus: the check would not tell ExTra from GRPO"


#: PS's triage thresholds (``PrefixSamplingConfig``'s defaults, which ``train.sh ps`` keeps): below ``low`` with a
#: success is too hard, above ``high`` with a failure too easy
PS_LOW, PS_HIGH = 0.3, 0.7


def test_prefix_sampling_in_verls_loop_replays_last_steps_triaged_trajectories(data, tmp_path):
    """``train.sh ps`` (Prefix Sampling through the ``vsr_prefix`` loop and the buffer actor) for four steps: every
    prefix task of step t continues a trajectory of step t − 1 verbatim, a success of a group below PS's low pass rate
    (bucket ``hard``) or a failure of a group above its high one (``easy``), with the prefix outside the loss; the
    prefix tasks take at most ``max_share`` of a step's prompts; verl trains on them (finite advantages, the
    parameters move). Four steps give twelve fresh groups of four to triage: a group lands in a bucket with one or three
    successes, so a launch without any prefix task is unlikely."""
    log = launch("ps", data, tmp_path, 4, "actor_rollout_ref.rollout.temperature=1.2", model=shipped_checkpoint("mid"))
    assert steps_logged(log) == [1, 2, 3, 4]
    steps = [audit(tmp_path, s) for s in (1, 2, 3, 4)]
    tasks = {"hard": 0, "easy": 0}
    for prev, cur in zip(steps, steps[1:]):
        pass_rate = {uid: np.mean([x["reward"] > 0 for x in g]) for uid, g in groups(prev["rows"]).items()}
        fresh_prev = [r for r in prev["rows"] if r["extra"]["vsr_origin"] == "fresh"]
        prefix_groups = set()
        for r in cur["rows"]:
            e = r["extra"]
            if e["vsr_origin"] != "replayed_prefix":
                assert e["vsr_ps_bucket"] == "" and int(e["vsr_prefix_len"]) == 0
                continue
            bucket, L = e["vsr_ps_bucket"], int(e["vsr_prefix_len"])
            assert bucket in tasks and 0 < L < RESP
            assert r["response_mask"][:L] == [0] * L and all(r["response_mask"][L:])  # the prefix is context
            # the source: a fresh row of the previous step with the same prompt and these first L response tokens,
            # a success of a too-hard group or a failure of a too-easy one
            src = [x for x in fresh_prev if x["prompt_ids"] == r["prompt_ids"] and x["response_ids"][:L] == r["response_ids"][:L]
                   and ((x["reward"] > 0 and 0 < pass_rate[x["uid"]] < PS_LOW) if bucket == "hard"
                        else (x["reward"] <= 0 and PS_HIGH < pass_rate[x["uid"]] < 1))]
            assert src, f"{r['key']}: no {bucket} trajectory of step {prev['global_step']} starts with its prefix"
            assert np.all(np.isfinite(np.asarray(r["advantages"], dtype=float)))
            prefix_groups.add(r["uid"])
            tasks[bucket] += 1
        assert len(prefix_groups) <= B // 2  # ``train.sh ps``: max_share 0.5 of the prompts
    assert tasks["hard"] + tasks["easy"] > 0, f"no prefix task in steps 2-4 ({tasks}): the check would not tell PS from GRPO"
    before, after = weights(shipped_checkpoint("mid")), weights(tmp_path / "checkpoints/global_step_2/actor/huggingface")
    assert any(not np.allclose(before[k].float().numpy(), after[k].float().numpy()) for k in before if k in after)


def test_agents_gigpo_over_vsr_env_episodes_in_verls_loop(tmp_path):
    """``train.sh vsr_gigpo`` on the test bed's Sokoban agent: episodes of the ``vsr_env`` loop, GiGPO's per-turn
    advantages. The agent's context is 384 tokens and Sokoban's first prompt 317, so verl's whole-interaction format
    fits about one turn: the launch checks the estimator, not interaction-state restarts (the stub-server tests do)."""
    from llm_harness.testbed.paths import CHECKPOINT_DIR
    from llm_harness.trainer.gigpo import GiGPOParams, gigpo_advantages

    data = tmp_path / "data"
    subprocess.run([sys.executable, str(ROOT / "scripts/verl/make_data.py"), "--task", "env", "--params",
                    json.dumps({"env": "sokoban", "window": 1, "n_train": 8}), "--out", str(data)], check=True, capture_output=True, timeout=120)
    log = launch("vsr_gigpo", data, tmp_path, 2, "trainer.save_freq=-1", model=CHECKPOINT_DIR / "sokoban" / "mid",
                 RESP="256", PROMPT_LEN="128", TURN_TOKENS="8")
    assert steps_logged(log) == [1, 2]
    turns = 0
    for step in (1, 2):
        a = audit(tmp_path, step)
        rows = a["rows"]
        assert a["adv_estimator"] == "vsr_gigpo" and len(rows) == N * B
        uid_of = {u: i for i, u in enumerate(dict.fromkeys(r["uid"] for r in rows))}
        eg, ep, tu, rw, an, pen = [], [], [], [], [], []
        for b, r in enumerate(rows):
            e = r["extra"]
            assert len(r["prompt_ids"]) + len(r["response_ids"]) <= 384  # within the server's context
            for j, _ in enumerate(e["gigpo_turn_ends"]):
                eg.append(uid_of[r["uid"]]); ep.append(b); tu.append(j)
                rw.append(e["gigpo_step_rewards"][j]); an.append(e["gigpo_anchors"][j]); pen.append(e["gigpo_penalties"][j])
        res = gigpo_advantages(np.asarray(eg), np.asarray(ep), np.asarray(tu), np.asarray(rw), an,
                               GiGPOParams(gamma=0.95, step_weight=1.0), penalty=np.asarray(pen))
        k = 0
        for r in rows:
            lo, adv, mask = 0, np.asarray(r["advantages"]), np.asarray(r["response_mask"], bool)
            for hi in r["extra"]["gigpo_turn_ends"]:
                seg, m = adv[lo:hi], mask[lo:hi]
                np.testing.assert_allclose(seg[m], res.advantage[k], atol=1e-5, err_msg=r["key"])
                lo, k = hi, k + 1
            turns += len(r["extra"]["gigpo_turn_ends"])
        assert k == len(res.advantage)
    assert turns >= 2 * N * B
