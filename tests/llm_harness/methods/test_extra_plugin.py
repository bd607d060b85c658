"""The ExTra plug-in: validation, regeneration gating, guided states, FIFO, checkpoints, trainer runs."""

from __future__ import annotations

import pickle
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

import llm_harness.methods.extra  # noqa: F401  (registers the plug-ins until methods/__init__ does)
from llm_harness.backends.protocol import ScoreResult
from llm_harness.embedders import NGramEmbedder
from llm_harness.methods.mte import smoothed_entropy
from llm_harness.tasks import Problem
from llm_harness.tasks.step_arith import StepArithTask
from llm_harness.trainer.checkpoint import load_checkpoint, write_checkpoint
from llm_harness.trainer.config import RolloutConfig, RunConfig
from llm_harness.trainer.data import Origin, RolloutGroup, StartState
from llm_harness.trainer.entry import build_trainer
from llm_harness.trainer.modeling import CharTokenizer, Codec
from llm_harness.trainer.plugins import PLUGINS, StepRecorder
from llm_harness.trainer.step import Step
from trainer_support import ToyTask, check_resume_is_bit_identical, tiny_config


# ------------------------------------------------------------------ a fake context for unit tests

CODEC = Codec(CharTokenizer())


class FakeBackend:
    """``score_batch`` returning preset entropies per completion (default 1.0 per token)."""

    def __init__(self, table=None):
        self.table = table or {}
        self.calls = []

    def score_batch(self, contexts, completions, *, temperature=1.0, with_entropy=True, **kw):
        self.calls.append((list(map(tuple, contexts)), list(map(tuple, completions)), temperature))
        out = []
        for c in completions:
            h = np.asarray(self.table.get(tuple(c), np.ones(len(c))), dtype=np.float64)
            out.append(ScoreResult(np.zeros(len(c)), h))
        return out


def _ctx(backend=None, max_new_tokens=40):
    cfg = tiny_config("/unused", rollout=RolloutConfig(prompts_per_step=4, group_size=2, max_new_tokens=max_new_tokens,
                                                       temperature=0.9))
    return SimpleNamespace(config=cfg, codec=CODEC, task=StepArithTask(), backend=backend or FakeBackend(), model=None,
                           train_problems=tuple(_problem(i) for i in range(10)))


def _problem(i):
    return Problem(f"p{i}", f"Q:{i}+1=?", str(i + 1))


def _state(i, origin=Origin.FRESH, prefix=()):
    p = _problem(i)
    return StartState(CODEC.encode(p.prompt + "\n"), p, prefix, origin)


def _ids(text, stop=True):
    return CODEC.encode(text) + ((CharTokenizer.eos_token_id,) if stop else ())


def _group(i, texts, rewards, *, step=0, origin=Origin.FRESH):
    resp = [_ids(t) for t in texts]
    return RolloutGroup(_state(i, origin), resp, [np.full(len(r), -0.5) for r in resp], np.array(rewards, float), step,
                        finish_reasons=["stop"] * len(texts), advantages=np.zeros(len(texts)))


def _regen(params=None, ctx=None, name="extra_regen"):
    ctx = ctx or _ctx()
    base = {"prefix_embedder": "ngram4", "warmup_steps": 0, **({"embedder": "ngram4"} if name == "extra" else {})}
    return PLUGINS[name]({**base, **(params or {})}, ctx), ctx


def _shape(plug, step, groups, ctx):
    """The plug-in's shaping stage on a step holding ``groups`` (returns the typed result)."""
    return plug.shape(Step(index=step, groups=tuple(groups)), ctx)


def _claim(plug, step, open_slots, ctx):
    return plug.claim(Step(index=step), open_slots, ctx)


R0 = "12+3=15,15-4=11\nA:11"
R1 = "12+3=16,16-4=12\nA:12"


# ------------------------------------------------------------------ parameters


@pytest.mark.parametrize(
    "name, params, where",
    [
        ("extra", {"gamma": -0.1}, "plugins.extra.gamma"),
        ("extra", {"tau": 0.0}, "plugins.extra.tau"),
        ("extra", {"tau": -1}, "plugins.extra.tau"),
        ("extra", {"memory_size": 0}, "plugins.extra.memory_size"),
        ("extra", {"prefix_cache": 0}, "plugins.extra.prefix_cache"),
        ("extra", {"queue_size": 0}, "plugins.extra.queue_size"),
        ("extra", {"warmup_steps": -1}, "plugins.extra.warmup_steps"),
        ("extra", {"max_guided_frac": 1.5}, "plugins.extra.max_guided_frac"),
        ("extra", {"embedder": "bert"}, "plugins.extra.embedder"),
        ("extra", {"prefix_embedder": "surprise"}, "plugins.extra.prefix_embedder"),
        ("extra", {"normalization": "middle"}, "plugins.extra.normalization"),
        ("extra", {"gamma_typo": 1.0}, "plugins.extra.gamma_typo"),
        ("extra", {"novelty": False, "regen": False}, "plugins.extra.novelty"),
        ("extra", {"embedder": "ngram4", "embedder_params": {"dims": 8}}, "plugins.extra.embedder_params.dims"),
        ("extra_novelty", {"tau": 0.5}, "plugins.extra_novelty.tau"),
        ("extra_regen", {"gamma": 1.0}, "plugins.extra_regen.gamma"),
        ("extra_novelty", {"memory_size": 2.5}, "plugins.extra_novelty.memory_size"),
    ],
)
def test_bad_params_name_the_parameter(name, params, where):
    with pytest.raises(ValueError, match=where.replace(".", r"\.")):
        PLUGINS[name](params, _ctx())


def test_defaults_follow_the_paper_and_variants_fix_the_flags():
    from llm_harness.methods.extra import parse_extra_params

    c = parse_extra_params("extra", {})
    assert (c.novelty, c.regen, c.gamma, c.normalization, c.memory_size, c.warmup_steps, c.prefix_cache, c.tau,
            c.queue_size, c.max_guided_frac, c.embedder, c.prefix_embedder) == (
        True, True, 1.0, "post", 6, 30, 128, 0.1, 4096, 1.0, "policy_hidden", "policy_hidden")
    n, r = parse_extra_params("extra_novelty", {"embedder": "surprise"}), parse_extra_params("extra_regen", {})
    assert (n.novelty, n.regen, r.novelty, r.regen) == (True, False, False, True)
    # surprise has no embedding: prefix smoothing falls back to the policy's hidden states
    assert parse_extra_params("extra", {"embedder": "surprise"}).prefix_embedder == "policy_hidden"
    assert parse_extra_params("extra", {"embedder": "ngram4", "embedder_params": {"dim": 64}}).prefix_embedder_params == {"dim": 64}


# ------------------------------------------------------------------ regeneration


def _smoothed_pick(entries, tau):
    """Independent smoothing: list of (prefix ids, MTE) → prefix with the smallest smoothed MTE."""
    emb = NGramEmbedder(4, 2048)
    E = np.stack([emb.counts(p) for p, _ in entries])
    En = E / np.linalg.norm(E, axis=1, keepdims=True)
    W = np.exp(En @ En.T / tau)
    W /= W.sum(1, keepdims=True)
    Ht = W @ np.array([h for _, h in entries])
    return entries[int(np.argmin(Ht))][0], Ht


def test_regeneration_picks_the_smoothed_mte_argmin_from_hand_built_entropies():
    r0, r1 = _ids(R0), _ids(R1)
    h0 = np.r_[np.full(8, 1.0), np.full(8, 0.2), np.full(len(r0) - 17, 3.0)]  # MTE(8) = 1.0, MTE(16) = 0.6
    h1 = np.full(len(r1) - 1, 0.7)  # MTE = 0.7 at both cuts
    backend = FakeBackend({r0[:-1]: h0, r1[:-1]: h1})  # the scored completion is the verified text (no EOS)
    plug, ctx = _regen({"tau": 0.1}, _ctx(backend))
    g = _group(3, [R0, R1], [0, 0], step=0)
    _shape(plug, 0, [g], ctx)
    assert len(backend.calls) == 1 and backend.calls[0][2] == 0.9  # one batched call at the rollout temperature
    entries = [(r0[:8], 1.0), (r0[:16], 0.6), (r1[:8], 0.7), (r1[:16], 0.7)]
    want, Ht = _smoothed_pick(entries, 0.1)
    assert len(plug.queue) == 1
    s = plug.queue[0]
    assert s.prefix_ids == want == r0[:16] and s.origin is Origin.GUIDED
    np.testing.assert_allclose(s.meta["extra_smoothed_mte"], Ht.min(), rtol=1e-6)
    np.testing.assert_allclose(s.meta["extra_mte"], 0.6, rtol=1e-12)
    # the library function agrees with the independent computation
    np.testing.assert_allclose(smoothed_entropy([h for _, h in entries], np.stack([NGramEmbedder(4, 2048).counts(p) for p, _ in entries]), 0.1), Ht, rtol=1e-12)
    # cached prefixes persist: a later all-incorrect group of the same prompt smooths over the cache too
    _shape(plug, 1, [_group(3, [R1], [0], step=1)], ctx)
    assert len(plug.prefix_cache["p3"]) == 4 and len(plug.queue) == 2


def test_regeneration_only_after_warmup_and_only_for_all_incorrect_fresh_groups():
    backend = FakeBackend()
    plug, ctx = _regen({"warmup_steps": 2}, _ctx(backend))

    def groups(step):
        return [
            _group(1, [R0, R1], [0, 0], step=step),  # all-incorrect fresh: eligible
            _group(2, [R0, R1], [1, 0], step=step),  # mixed
            _group(3, [R0, R1], [1, 1], step=step),  # all-correct
            _group(4, [R0, R1], [0, 0], step=step, origin=Origin.GUIDED),  # all-incorrect but guided
            _group(5, [R0, R1], [0, 0], step=step - 1),  # an older group (e.g. replayed)
        ]

    for step in (0, 1):
        res = _shape(plug, step, groups(step), ctx)
        assert not plug.queue and not backend.calls
        assert all(np.array_equal(a.advantages, b.advantages) for a, b in zip(res.groups, groups(step)))  # regen never shapes
        assert res.metrics["extra_regen_active"] == 0.0
    m = dict(_shape(plug, 2, groups(2), ctx).metrics)
    assert [s.problem.id for s in plug.queue] == ["p1"]
    m.update(plug.after_step(Step(index=2), ctx).metrics)
    assert m["extra_regen_active"] == 1.0 and m["extra_regen_groups"] == 1 and m["extra_regen_enqueued"] == 1
    assert m["extra_queue_len"] == 1


def test_guided_state_keeps_its_own_problem_when_replacing_another_problems_row():
    plug, ctx = _regen({})
    _shape(plug, 0, [_group(7, [R0], [0])], ctx)
    (g,) = _claim(plug, 1, 2, ctx).states  # one guided state claims one of the two open slots
    # the slot would otherwise hold a fresh prompt (here p2, answer "3"); the guided state is p7's,
    # with p7's answer and prompt
    assert g.origin is Origin.GUIDED and g.problem.id == "p7" and g.problem.answer == "8" != _problem(2).answer
    assert g.prompt_ids == _state(7).prompt_ids and g.prefix_ids == _ids(R0)[: len(g.prefix_ids)]
    assert ctx.task.verify(g.problem, CODEC.decode(g.prefix_ids) + "15-4=11\nA:8").correct


def test_fifo_order_cap_and_tail_replacement():
    plug, ctx = _regen({"queue_size": 3, "max_guided_frac": 0.5})
    _shape(plug, 0, [_group(i, [R0], [0]) for i in range(5)], ctx)  # enqueues p0..p4; p0, p1 dropped
    assert [s.problem.id for s in plug.queue] == ["p2", "p3", "p4"]
    m = plug.after_step(Step(index=0), ctx).metrics
    assert m["extra_queue_dropped_total"] == 2 and m["extra_queue_len"] == 3
    c = _claim(plug, 1, 4, ctx)  # 4 open slots (a VSR claim took the fifth): floor(0.5 * 4) = 2, FIFO order
    assert [s.problem.id for s in c.states] == ["p2", "p3"]
    assert c.metrics["extra_guided_injected"] == 2
    c = _claim(plug, 2, 3, ctx)  # floor(0.5 * 3) = 1
    assert [s.problem.id for s in c.states] == ["p4"] and not plug.queue
    assert _claim(plug, 3, 5, ctx).states == ()


def test_prefix_cache_is_bounded_and_deduplicated():
    plug, ctx = _regen({"prefix_cache": 3})
    _shape(plug, 0, [_group(1, [R0, R0, R1], [0, 0, 0])], ctx)  # R0's two prefixes twice + R1's two: 4 distinct
    cache = plug.prefix_cache["p1"]
    assert len(cache) == 3 and len({e.prefix for e in cache}) == 3
    assert cache[-1].prefix == _ids(R1)[:16]  # newest kept


def test_prefixes_respect_the_response_budget():
    r0 = _ids(R0)
    h = np.r_[np.full(8, 1.0), np.full(len(r0) - 9, 0.0)]  # the 16-token prefix has the lower MTE ...
    plug, ctx = _regen({}, _ctx(FakeBackend({r0[:-1]: h}), max_new_tokens=12))
    _shape(plug, 0, [_group(1, [R0], [0])], ctx)
    assert plug.queue[0].prefix_ids == r0[:8]  # ... but does not fit a 12-token budget
    assert [len(e.prefix) for e in plug.prefix_cache["p1"]] == [8]


# ------------------------------------------------------------------ novelty through the plug-in


def test_novelty_shaper_adds_gated_bonus_after_normalisation():
    from llm_harness.trainer.advantages import group_advantages

    plug = PLUGINS["extra_novelty"]({"embedder": "ngram4", "gamma": 0.5}, _ctx())
    ctx = _ctx()
    g = _group(1, [R0, R1, R0], [1, 0, 1])
    g = g.with_advantages(group_advantages("grpo", [g.rewards])[0])
    (out,) = _shape(plug, 0, [g], ctx).groups
    b = out.info["extra_novelty"]
    assert b[1] == 0 and b[0] == b[2] == pytest.approx(0.0, abs=1e-12)  # identical correct siblings: cos 1
    np.testing.assert_allclose(out.advantages, g.advantages + 0.5 * b)
    res = _shape(plug, 1, [_group(1, [R1, R0], [1, 0], step=1).with_advantages(np.array([1.0, -1.0]))], ctx)
    (out2,) = res.groups
    e = NGramEmbedder(4, 2048)
    a, c = e.counts(_ids(R1)), e.counts(_ids(R0))
    cos = a @ c / np.linalg.norm(a) / np.linalg.norm(c)
    np.testing.assert_allclose(out2.info["extra_novelty"], [1 - cos, 0.0], rtol=1e-6)  # vs memory {R0}
    m = {**res.metrics, **plug.after_step(Step(index=1), ctx).metrics}
    assert m["extra_novelty_bonus_pos_frac"] == 0.5 and "extra_queue_len" not in m and "extra_guided_injected" not in m


def test_state_dict_roundtrip_through_a_checkpoint_file(tmp_path):
    plug, ctx = _regen({}, name="extra")
    plug.cfg = replace(plug.cfg)  # unchanged
    g = _group(1, [R0, R1], [0, 0])
    _shape(plug, 0, [g, _group(2, [R0, R1], [1, 0]).with_advantages(np.array([1.0, -1.0]))], ctx)
    parts = {"model": {}, "optim": {}, "sched": {}, "rng": {}, "plugins": [plug.state_dict()]}
    write_checkpoint(tmp_path / "ck", 0, parts, fingerprint="-")
    state = load_checkpoint(tmp_path / "ck")["plugins"][0]
    pickle.dumps(state)
    other, _ = _regen({}, name="extra")
    other.load_state_dict(state)
    assert other.memory.keys() == plug.memory.keys() == {"p2"}
    np.testing.assert_array_equal(other.memory["p2"], plug.memory["p2"])
    assert [(s.problem, s.prompt_ids, s.prefix_ids, s.origin, s.meta) for s in other.queue] == [
        (s.problem, s.prompt_ids, s.prefix_ids, s.origin, s.meta) for s in plug.queue]
    assert [(e.prefix, e.mte) for e in other.prefix_cache["p1"]] == [(e.prefix, e.mte) for e in plug.prefix_cache["p1"]]


# ------------------------------------------------------------------ real trainer runs


def _trainer(cfg, plugins=None):
    return build_trainer(cfg, task=ToyTask(good="0"), extra_plugins=plugins)


def _cfg(run_dir, **over):
    cfg = tiny_config(str(run_dir), steps=4, plugins={"extra": {"warmup_steps": 1, "memory_size": 4}})
    return replace(cfg, **over)


def test_trainer_run_with_extra_shows_bonuses_and_guided_groups(tmp_path):
    rec = StepRecorder()
    tr = _trainer(_cfg(tmp_path / "r"), [rec])
    rows = tr.fit()
    tr.close()
    assert rows[0]["extra_regen_active"] == 0 and all(r["extra_regen_active"] == 1 for r in rows[1:])
    assert sum(r["extra_novelty_bonus_pos_frac"] for r in rows) > 0
    assert sum(r["groups_guided"] for r in rows) > 0 and sum(r["extra_guided_injected"] for r in rows) > 0
    guided = [g for r in rec.records for g in r.groups if g.start.origin is Origin.GUIDED]
    fresh = {g.start.problem.id: g.start.prompt_ids for r in rec.records for g in r.groups if g.start.origin is Origin.FRESH}
    task, codec = tr.task, tr.codec
    for g in guided:
        # own prompt, own problem: the reward is the verifier's on prefix + continuation for that problem
        assert fresh[g.start.problem.id] == g.start.prompt_ids
        assert g.start.meta["extra_source_step"] < g.birth_step
        for r, f, rew in zip(g.response_ids, g.finish_reasons, g.rewards):
            text = codec.decode(g.start.prefix_ids + (r[:-1] if f == "stop" else r))
            assert task.verify(g.start.problem, text).reward == rew
    for r in rec.records:
        for g in r.groups:
            assert "extra_novelty" in g.info and np.all(g.info["extra_novelty"][g.rewards == 0] == 0)


def test_resume_with_extra_is_bit_identical(tmp_path):
    def make(d, **run_kw):
        return _trainer(_cfg(d, steps=6, run=RunConfig(run_dir=str(d), checkpoint_every=3, progress=False, **run_kw)))

    # steps 0..3 then a "kill": checkpoint after step 3; step 3's effects beyond the checkpoint are discarded
    a, c, ma = check_resume_is_bit_identical(make, tmp_path, stop_after=4, checkpoint_step=3)
    assert sum(r["groups_guided"] for r in ma) > 0 and sum(r["extra_novelty_bonus_pos_frac"] for r in ma) > 0
    pa, pc = a.plugins[0], c.plugins[0]
    assert pa.memory.keys() == pc.memory.keys() and all(np.array_equal(pa.memory[k], pc.memory[k]) for k in pa.memory)
    assert [s.prefix_ids for s in pa.queue] == [s.prefix_ids for s in pc.queue]
