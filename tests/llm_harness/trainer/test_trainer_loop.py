"""The training loop: plug-in calls, resume bit-identity, faults, dynamic sampling, SFT, configs."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import safetensors.torch
import torch

from llm_harness.trainer.checkpoint import latest_checkpoint, load_checkpoint
from llm_harness.trainer.config import AlgoConfig, RolloutConfig, RunConfig, TrainConfig
from llm_harness.trainer.data import Origin, RolloutGroup, StartState, group_from_plain, group_to_plain, problem_index
from llm_harness.trainer.entry import build_backend
from llm_harness.trainer.loop import NonFiniteLossError, Trainer, check_registries
from llm_harness.trainer.runlog import read_metrics
from llm_harness.trainer.modeling import build_model
from llm_harness.methods.sampling import allocate_counts
from llm_harness.trainer.plugins import AdvantageShaper, RolloutReplay, StartStateSource, StepHook, StepRecorder
from llm_harness.trainer.step import Claim, Composition, Result, Shaped, Step
from trainer_support import ToyTask, metrics_without_timing, tiny_config


# ------------------------------------------------------------------ toy plug-ins


class PrefixSource(StartStateSource):
    """Claims one slot for a training prompt with a one-token prefix."""

    def __init__(self):
        self.calls = 0

    def claim(self, step, open_slots, ctx):
        self.calls += 1
        p = ctx.train_problems[step.index]
        pre = tuple(ctx.codec.encode("1"))
        return Claim(states=(StartState(ctx.encode_prompt(p), p, pre, Origin.REPLAYED_PREFIX, meta={"step": step.index}),))

    def state_dict(self):
        return {"calls": self.calls}

    def load_state_dict(self, state):
        self.calls = state["calls"]


class StoreReplay(RolloutReplay, StepHook):
    """Replays the first trained fresh group of the previous step as a replayed rollout."""

    def __init__(self):
        self.stored = None
        self.restored = None  # a checkpointed group (plain data), rebuilt once a context names the problems
        self.replayed_steps = []

    def compose(self, step, ctx):
        if self.restored is not None:
            self.stored, self.restored = group_from_plain(self.restored, problem_index(ctx.train_problems)), None
        if self.stored is None:
            return Composition(fresh=step.fresh, replayed=step.replayed)
        self.replayed_steps.append(step.index)
        g = self.stored
        s = StartState(g.start.prompt_ids, g.start.problem, g.start.prefix_ids, Origin.REPLAYED_ROLLOUT)
        rg = RolloutGroup(s, g.response_ids, g.behaviour_logprobs, g.rewards, g.birth_step, advantages=g.advantages)
        return Composition(fresh=step.fresh, replayed=step.replayed + (rg,))

    def after_step(self, step, ctx):
        fresh = [g for g in step.trained if g.start.origin is Origin.FRESH]
        if fresh:
            self.stored = fresh[0]
        # e.g. an oracle's extra Monte-Carlo samples
        return Result(metrics={"toy_stored": float(self.stored is not None)}, new_tokens=5)

    def state_dict(self):
        g = self.restored if self.stored is None else group_to_plain(self.stored)
        return {"g": g, "replayed": list(self.replayed_steps)}

    def load_state_dict(self, state):
        self.replayed_steps = list(state["replayed"])
        self.stored, self.restored = None, state["g"]


class BonusShaper(AdvantageShaper):
    """Adds +0.25 to every sample of prefix groups (and checks the estimator ran first)."""

    def __init__(self):
        self.seen_none = False

    def shape(self, step, ctx):
        out = []
        for g in step.groups:
            self.seen_none |= g.advantages is None
            out.append(g.with_advantages(g.advantages + 0.25) if g.start.origin is Origin.REPLAYED_PREFIX else g)
        return Shaped(groups=tuple(out))


def _trainer(cfg, task=None, plugins=None):
    model, tok = build_model(cfg.model, cfg.seed)
    be = build_backend(model, tok, cfg)
    return Trainer(cfg, model=model, tokenizer=tok, backend=be, task=task or ToyTask(), extra_plugins=plugins)


def _toy_plugins():
    return [PrefixSource(), StoreReplay(), BonusShaper(), StepRecorder()]


def test_loop_calls_every_plugin_point(tmp_path):
    cfg = tiny_config(str(tmp_path / "run"), steps=3)
    plugins = _toy_plugins()
    tr = _trainer(cfg, plugins=plugins)
    rows = tr.fit()
    src, rep, shaper, rec = plugins
    assert src.calls == 3 and not shaper.seen_none
    assert len(rec.records) == 3 and rows[-1]["toy_stored"] == 1.0
    assert rep.replayed_steps == [1, 2]
    r1 = rec.records[1]
    assert any(g.start.origin is Origin.REPLAYED_ROLLOUT for g in r1.trained)
    pre = [g for g in r1.groups if g.start.origin is Origin.REPLAYED_PREFIX]
    assert len(pre) == 1 and pre[0].start.meta == {"step": 1}
    # the verified text is prefix + continuation: the toy reward (first character in 0-4) sees the prefix "1"
    assert np.all(pre[0].rewards == 1.0)
    # shaper's bonus is present: advantages of the prefix group are GRPO + 0.25
    from llm_harness.trainer.advantages import group_advantages

    np.testing.assert_allclose(pre[0].advantages, group_advantages("grpo", [pre[0].rewards])[0] + 0.25)
    assert rows[1]["groups_replayed"] == 1.0 and np.isfinite(rows[1]["clip_frac_replayed_rollout"])
    assert rows[0]["groups_replayed_prefix"] == 1.0
    assert all(r["plugin_new_tokens"] == 5 for r in rows)
    assert rows[0]["gen_new_tokens"] == 5 + sum(g.n_new_tokens for g in rec.records[0].groups)
    tr.close()


def test_resume_is_bit_identical(tmp_path):
    full = tiny_config(str(tmp_path / "full"), steps=6, run=RunConfig(run_dir=str(tmp_path / "full"), checkpoint_every=3, progress=False))
    a = _trainer(full, plugins=_toy_plugins())
    a.fit()
    a.close()
    half_run = RunConfig(run_dir=str(tmp_path / "half"), checkpoint_every=3, progress=False, stop_after=4)
    half = replace(full, run=half_run)
    b = _trainer(half, plugins=_toy_plugins())
    b.fit()  # steps 0..3 run, checkpoint after 3; step 4's metrics are logged but not checkpointed ("kill")
    b.close()
    assert len(read_metrics(tmp_path / "half" / "metrics.jsonl")) == 4
    c = _trainer(replace(half, run=replace(half_run, resume=True, stop_after=0)), plugins=_toy_plugins())
    assert c.resume() == 3
    c.fit()
    c.close()
    ma = metrics_without_timing(tmp_path / "full" / "metrics.jsonl")
    mc = metrics_without_timing(tmp_path / "half" / "metrics.jsonl")
    assert [r["step"] for r in mc] == list(range(6))
    assert ma == mc
    for (n1, p1), (n2, p2) in zip(a.model.state_dict().items(), c.model.state_dict().items()):
        assert n1 == n2 and torch.equal(p1, p2), n1
    assert c.plugins[1].replayed_steps == a.plugins[1].replayed_steps
    csv_lines = (tmp_path / "half" / "metrics.csv").read_text().strip().splitlines()
    assert len(csv_lines) == 7


def test_corrupt_and_incompatible_checkpoints_are_refused(tmp_path):
    cfg = tiny_config(str(tmp_path / "r"), steps=1)
    t = _trainer(cfg)
    t.fit()
    t.close()
    ck = latest_checkpoint(tmp_path / "r" / "checkpoints")
    # incompatible: a different learning rate changes the fingerprint
    other = replace(cfg, optim=replace(cfg.optim, lr=1e-2))
    with pytest.raises(ValueError, match="incompatible"):
        _trainer(other).resume()
    # corrupt: flip a byte of the model file
    f = ck / "model.safetensors"
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0xFF
    f.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="corrupt"):
        load_checkpoint(ck)
    (ck / "meta.json").write_text("{not json")
    with pytest.raises(ValueError, match="meta.json"):
        _trainer(cfg).resume()
    with pytest.raises(ValueError, match="no checkpoint"):
        _trainer(tiny_config(str(tmp_path / "empty"))).resume()


def test_kill_during_checkpoint_write_keeps_latest(tmp_path, monkeypatch):
    cfg = tiny_config(str(tmp_path / "r"), steps=2)
    t = _trainer(cfg)
    t.fit()
    root = tmp_path / "r" / "checkpoints"
    assert latest_checkpoint(root).name == "step_000002"
    import llm_harness.trainer.checkpoint as ckmod

    calls = {"n": 0}
    real = ckmod._dump

    def dying(obj, path):
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError(28, "No space left on device")
        return real(obj, path)

    monkeypatch.setattr(ckmod, "_dump", dying)
    t.step = 3
    with pytest.raises(OSError):
        t.save()
    assert latest_checkpoint(root).name == "step_000002"
    assert not any(p.name.startswith(".") for p in root.iterdir())
    load_checkpoint(latest_checkpoint(root))  # still complete
    t.close()


def test_grader_failures_and_timeouts_become_counted_zero_rewards(tmp_path):
    cfg = tiny_config(str(tmp_path / "r"), steps=1)
    t = _trainer(cfg, task=ToyTask(mode="raise", fault_fraction=0.5))
    rows = t.fit()
    assert rows[0]["verify_errors_total"] > 0 and rows[0]["verify_warnings"] == rows[0]["verify_errors_total"]
    t.close()
    cfg = tiny_config(str(tmp_path / "s"), steps=1, rollout=RolloutConfig(prompts_per_step=2, group_size=2,
                                                                           max_new_tokens=4, verify_timeout_s=0.05))
    t = _trainer(cfg, task=ToyTask(mode="sleep", fault_fraction=1.0, sleep_s=0.3))
    rows = t.fit()
    assert rows[0]["verify_timeouts_total"] == 4 and rows[0]["reward_mean"] == 0.0
    t.close()


def test_nonfinite_loss_stops_and_saves_batch(tmp_path):
    cfg = tiny_config(str(tmp_path / "r"), steps=2)
    class NaNShaper(AdvantageShaper):
        def shape(self, step, ctx):
            return Shaped(groups=tuple(g.with_advantages(g.advantages * float("nan")) for g in step.groups))

    algo = AlgoConfig(filter_zero_variance=False)
    t = _trainer(replace(cfg, algo=algo), plugins=[NaNShaper()])
    with pytest.raises(NonFiniteLossError, match="batch saved"):
        t.fit()
    saved = list((tmp_path / "r").glob("nonfinite_batch_step*.safetensors"))
    assert len(saved) == 1 and "input_ids" in safetensors.torch.load_file(saved[0])
    t.close()


def test_dynamic_sampling_counts_every_generation(tmp_path):
    algo = AlgoConfig(max_gen_rounds=6)
    cfg = tiny_config(str(tmp_path / "r"), steps=2, algo=algo, plugins={"dapo": {}})
    t = _trainer(cfg, task=ToyTask(good="0"))  # rare success -> few mixed groups
    rows = t.fit()
    for r in rows:
        assert r["gen_rounds"] >= 1
        assert r["gen_samples"] == r["prompt_instances"] * 4
        assert r["groups_kept"] <= 4
        if r["gen_rounds"] > 1:
            assert r["prompt_instances"] > 4
    assert any(r["gen_rounds"] > 1 for r in rows)
    t.close()


def test_sft_baseline_learns_expert_solutions(tmp_path):
    from llm_harness.tasks import get_task

    algo = AlgoConfig(collector="expert", objective="sft", advantage="constant", filter_zero_variance=False)
    cfg = tiny_config(str(tmp_path / "r"), steps=12, algo=algo,
                      rollout=RolloutConfig(prompts_per_step=8, group_size=1, max_new_tokens=40, verify_timeout_s=0))
    cfg = replace(cfg, optim=replace(cfg.optim, lr=1e-2))
    t = _trainer(cfg, task=get_task("step_arith", n_train=200, max_terms=3))
    rows = t.fit()
    assert all(r["reward_mean"] == 1.0 for r in rows)  # expert solutions verify
    assert rows[-1]["loss"] < rows[0]["loss"] - 0.3
    assert rows[0]["gen_new_tokens"] == 0
    t.close()


def test_reinforce_ada_est_reallocates_under_fixed_total(tmp_path):
    cfg = tiny_config(str(tmp_path / "r"), steps=2, plugins={"reinforce_ada_est": {"n_min": 2, "n_max": 8}},
                      rollout=RolloutConfig(prompts_per_step=4, group_size=4, max_new_tokens=6, verify_timeout_s=0))
    rec = StepRecorder()
    t = _trainer(cfg, plugins=[rec])
    rows = t.fit()
    for r, record in zip(rows, rec.records):
        sizes = [g.size for g in record.groups]
        assert sum(sizes) == 16 and all(2 <= s <= 8 for s in sizes) and len(sizes) == 4
        assert r["gen_samples"] == 16 and r["gen_rounds"] == 2
    t.close()


def test_allocate_counts_box_and_total():
    c = allocate_counts(np.array([0.0, 0.25, 0.5, 0.1]), 32, 4, 32)
    assert c.sum() == 32 and c.min() >= 4 and c.max() <= 32
    assert c[2] >= c[1] >= c[3] >= c[0]
    assert allocate_counts(np.zeros(3), 12, 2, 8).tolist() == [4, 4, 4]
    np.testing.assert_array_equal(allocate_counts(np.array([1.0, 1.0, 100.0]), 20, 4, 12), [4, 4, 12])
    with pytest.raises(ValueError, match="total"):
        allocate_counts(np.ones(2), 100, 4, 32)


def test_ppo_epochs_minibatches_and_recompute(tmp_path):
    algo = AlgoConfig(ppo_epochs=2, mini_batches=2, old_logprobs="recompute", kl_coef=0.1, loss_agg="seq_mean_token_sum_norm")
    cfg = tiny_config(str(tmp_path / "r"), steps=2, algo=algo)
    t = _trainer(cfg)
    rows = t.fit()
    for r in rows:
        if r["groups_kept"] > 0:
            assert r["optimizer_steps"] == 4 and np.isfinite(r["kl"])
    # second epoch moved the policy: some ratio clipped or not, but clip fraction is defined
    assert any(np.isfinite(r["clip_frac_fresh"]) for r in rows)
    t.close()


def test_behaviour_logprobs_match_training_forward(tmp_path):
    """Cached behaviour log-probs equal the training forward's at the same weights (ratio = 1)."""
    cfg = tiny_config(str(tmp_path / "r"), steps=1)
    t = _trainer(cfg)
    groups = list(t.collect_step().groups)
    from llm_harness.trainer.advantages import estimate_advantages
    from llm_harness.trainer.data import build_batch

    b = build_batch(estimate_advantages("grpo", groups), t.codec.pad_token_id)
    lp = t._no_grad_logprobs(t.model, b)
    torch.testing.assert_close(lp * b.loss_mask, b.old_logprobs, atol=2e-5, rtol=1e-5)
    t.close()


@pytest.mark.parametrize(
    "kw, field",
    [
        ({"rollout": RolloutConfig(group_size=1)}, "rollout.group_size"),
        ({"steps": 0}, "steps"),
        ({"plugins": {"nope": {}}}, "plugins"),
    ],
)
def test_config_validation_names_the_field(tmp_path, kw, field):
    with pytest.raises(ValueError, match=field):
        cfg = tiny_config(str(tmp_path), **kw)
        _trainer(cfg)


def test_config_sections_validate():
    with pytest.raises(ValueError, match="eps_low"):
        AlgoConfig(eps_low=1.5)
    with pytest.raises(ValueError, match="dual_clip"):
        AlgoConfig(dual_clip=0.5)
    with pytest.raises(ValueError, match="top_p"):
        RolloutConfig(top_p=0)
    with pytest.raises(ValueError, match="algo.objective: unknown"):  # registry names: checked in one place
        check_registries(TrainConfig(algo=AlgoConfig(objective="dpo")))
    from vsr_util.config_io import from_dict

    with pytest.raises(ValueError, match="unknown key"):
        from_dict(TrainConfig, {"algo": {"epsilon": 0.2}})
    cfg = from_dict(TrainConfig, {"algo": {"eps_high": 0.3}, "plugins": {"reinforce_ada_est": {"n_min": 4}}})
    assert cfg.algo.eps_high == 0.3 and cfg.plugins == {"reinforce_ada_est": {"n_min": 4}}


class SameProblemSource(StartStateSource):
    """Every step starts from the first training problem only (claims the step's one slot)."""

    def claim(self, step, open_slots, ctx):
        p = ctx.train_problems[0]
        return Claim(states=(StartState(ctx.encode_prompt(p), p),))


def test_sampling_seed_is_fresh_per_step_and_deterministic(tmp_path):
    """Same state, unchanged weights (no reward → no update): steps draw different samples; reruns agree."""
    outs = []
    for run in ("a", "b"):
        rec = StepRecorder()
        cfg = tiny_config(str(tmp_path / run), steps=2,
                          rollout=RolloutConfig(prompts_per_step=1, group_size=4, max_new_tokens=8, verify_timeout_s=0.0))
        t = _trainer(cfg, task=ToyTask(good=""), plugins=[SameProblemSource(), rec])
        t.fit()
        t.close()
        assert all(len(r.groups) == 1 for r in rec.records)
        outs.append([g.response_ids for r in rec.records for g in r.groups])
    assert outs[0][0] != outs[0][1]
    assert outs[0] == outs[1]


class SeparateEngine:
    """A stand-in for a separate inference engine (vLLM): its own model copy, synced by ``load_weights``."""

    def __init__(self, model, tok):
        import copy

        from llm_harness.backends import HFBackend, HFBackendConfig

        self.engine_model = copy.deepcopy(model)
        self.hf = HFBackend(self.engine_model, tok, config=HFBackendConfig(pad_token_id=tok.pad_token_id))
        self.loads = 0

    def generate(self, *a, **k):
        return self.hf.generate(*a, **k)

    def load_weights(self, state_dict):
        self.loads += 1
        self.engine_model.load_state_dict(state_dict)


def test_weights_are_synced_to_a_separate_engine(tmp_path):
    cfg = tiny_config(str(tmp_path / "r"), steps=3)
    model, tok = build_model(cfg.model, cfg.seed)
    eng = SeparateEngine(model, tok)
    t = Trainer(cfg, model=model, tokenizer=tok, backend=eng, task=ToyTask())
    rows = t.fit()
    t.close()
    assert eng.loads == 3 and sum(r["optimizer_steps"] for r in rows) > 0
    for (n, p), (_, q) in zip(model.state_dict().items(), eng.engine_model.state_dict().items()):
        assert torch.equal(p, q), n


def test_grpo_learns_the_toy_task(tmp_path):
    """End to end: 30 GRPO steps (8x8) on a random tiny model raise the toy reward.

    Deterministic (fixed seed); observed 0.28 -> 0.8 over 40 steps, so the 0.2 margin is loose. A
    Hoeffding bound over the 640 samples of a 10-step window (half-width sqrt(log(2/1e-6)/(2*640))
    = 0.11 even with independent samples) shows a 0.2 gap is not noise.
    """
    cfg = tiny_config(str(tmp_path / "r"), steps=30,
                      rollout=RolloutConfig(prompts_per_step=8, group_size=8, max_new_tokens=8, verify_timeout_s=0))
    cfg = replace(cfg, run=replace(cfg.run, checkpoint_every=0))
    t = _trainer(cfg)
    rows = t.fit()
    t.close()
    r = [x["reward_mean"] for x in rows]
    assert np.mean(r[-10:]) > np.mean(r[:10]) + 0.2


def test_states_with_different_prefixes_share_one_backend_call_and_keep_their_budgets(tmp_path):
    from llm_harness.backends import Sample
    from llm_harness.trainer.rollout import collect, truncate_sample

    cfg = tiny_config(str(tmp_path / "r"), steps=1)
    tr = _trainer(cfg)
    calls = []
    orig = tr.backend.generate

    def spy(prompts, n, sp):
        calls.append((len(prompts), n, sp.max_new_tokens))
        return orig(prompts, n, sp)

    tr.backend.generate = spy
    p = tr.fresh.problems[0]
    ids = tr.fresh.encode(p)
    states = [StartState(ids, p, tuple(tr.codec.encode("1" * k)), Origin.REPLAYED_PREFIX) for k in (0, 2, 5)]
    groups, st = collect(states, step=0, round=0, ctx=tr.ctx)
    tr.close()
    assert calls == [(3, 4, 8)]  # one call, the largest budget (max_new_tokens 8, empty prefix)
    for g, k in zip(groups, (0, 2, 5)):
        assert all(len(r) <= 8 - k for r in g.response_ids)
        assert all(len(b) == len(r) for b, r in zip(g.behaviour_logprobs, g.response_ids))
    assert st.new_tokens == sum(len(r) for g in groups for r in g.response_ids)
    s = Sample((1, 2, 3), (-0.1, -0.2, -0.3), "stop")
    assert truncate_sample(s, 3) is s
    assert truncate_sample(s, 2) == Sample((1, 2), (-0.1, -0.2), "length")


def test_wandb_logging_is_optional_and_resumes_the_same_run(tmp_path, monkeypatch):
    import sys
    import types

    from llm_harness.trainer.config import RunConfig

    run = RunConfig(run_dir=str(tmp_path / "w"), progress=False, wandb_project="vsr-test", wandb_mode="offline")
    monkeypatch.setitem(sys.modules, "wandb", None)  # not importable
    with pytest.raises(ValueError, match="run.wandb_project: the wandb package is not installed"):
        _trainer(tiny_config(str(tmp_path / "w"), steps=2, run=run))
    calls = {"init": [], "log": [], "finish": 0}

    class _Run:
        def log(self, row, step):
            calls["log"].append((step, row))

        def finish(self):
            calls["finish"] += 1

    fake = types.ModuleType("wandb")
    fake.__spec__ = types.SimpleNamespace(name="wandb")  # find_spec needs a spec
    fake.init = lambda **kw: calls["init"].append(kw) or _Run()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    tr = _trainer(tiny_config(str(tmp_path / "w"), steps=2, run=run))
    tr.fit()
    tr.close()
    (kw,) = calls["init"]
    assert kw["project"] == "vsr-test" and kw["mode"] == "offline" and kw["resume"] == "allow" and kw["config"]["steps"] == 2
    assert [s for s, _ in calls["log"]] == [0, 1] and "loss" in calls["log"][0][1] and calls["finish"] == 1
    tr2 = _trainer(tiny_config(str(tmp_path / "w"), steps=2, run=run))
    assert tr2._wandb_init()["id"] == kw["id"]  # a resumed run logs into the same wandb run
    tr2.close()


@pytest.mark.parametrize("agg, mini_batches, kl", [("token_mean", 1, 0.0), ("seq_mean_token_mean", 2, 0.1),
                                                    ("seq_mean_token_sum_norm", 1, 0.0)])
def test_micro_batches_give_the_update_of_one_pass(tmp_path, agg, mini_batches, kl):
    """``run.micro_batch_rows`` (gradient accumulation over length-sorted row chunks) changes the update only by
    float rounding: the same generated batch gives the same parameters and loss metrics as one pass."""
    from trainer_support import make_trainer, tiny_config

    torch.set_num_threads(1)
    out = {}
    for micro in (0, 3):
        cfg = tiny_config(str(tmp_path / f"m{micro}"))
        tr = make_trainer(str(tmp_path / f"m{micro}"), algo=AlgoConfig(loss_agg=agg, mini_batches=mini_batches, kl_coef=kl),
                          run=replace(cfg.run, micro_batch_rows=micro))
        try:
            rows = [tr.train_step()]  # one step: a second one would sample from parameters that differ by rounding
            out[micro] = (rows, {k: v.detach().clone() for k, v in tr.model.state_dict().items()})
        finally:
            tr.close()
    (r0, p0), (r3, p3) = out[0], out[3]
    assert sum(r["optimizer_steps"] for r in r0) > 0 and r0[0]["gen_new_tokens"] == r3[0]["gen_new_tokens"]
    for a, b in zip(r0, r3):
        for k in ("loss", "grad_norm", "entropy", "clip_frac", *(("kl",) if kl else ())):
            assert a[k] == pytest.approx(b[k], rel=1e-4, abs=1e-6), k
    for k in p0:  # AdamW's first step moves each weight by about ±lr (3e-3): agree to 1 % of it
        torch.testing.assert_close(p3[k], p0[k], rtol=0, atol=3e-5)


def test_micro_batch_rows_is_validated():
    from llm_harness.trainer.config import RunConfig

    with pytest.raises(ValueError, match="micro_batch_rows"):
        RunConfig(micro_batch_rows=-1)


def test_group_normalising_estimators_declare_it_and_need_two_samples():
    from llm_harness.trainer.advantages import ADVANTAGE_ESTIMATORS

    assert {n for n in ADVANTAGE_ESTIMATORS if getattr(ADVANTAGE_ESTIMATORS[n], "needs_group", False)} == {"grpo", "rloo"}
    single = TrainConfig(rollout=RolloutConfig(group_size=1))
    with pytest.raises(ValueError, match=r"rollout.group_size: the 'grpo' estimator normalises within a group and needs G >= 2"):
        check_registries(single)
    check_registries(TrainConfig(rollout=RolloutConfig(group_size=1), algo=AlgoConfig(advantage="constant")))
