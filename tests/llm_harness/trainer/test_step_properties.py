"""Properties of the step data flow over subsets *and orders* of the shipped plug-ins.

For every drawn composition: no fresh prompt is lost or duplicated relative to GRPO's stream;
every slot is filled and generated; the replay buffer receives exactly the groups the trainer
kept (and, fresh-anchored, trained); per-origin counts in the metrics equal the batch's.
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_harness.trainer.config import AlgoConfig, RolloutConfig, RunConfig
from llm_harness.trainer.data import ORIGINS, Origin, build_batch
from llm_harness.trainer.plugins import StartStateSource, StepHook
from llm_harness.trainer.prompts import FreshPromptSource
from llm_harness.trainer.step import FRESH_OWNER, Refill, Result
from trainer_support import ToyTask, check_resume_is_bit_identical, make_trainer

#: the shipped plug-ins, with small warm-ups so every mechanism acts within three steps
SHIPPED = {
    "vsr": {"cold_start": True, "cold_start_problems": 12, "window": 3},
    "extra_novelty": {"embedder": "ngram4"},
    "extra_regen": {"warmup_steps": 0, "prefix_embedder": "ngram4", "max_guided_frac": 0.5},
    "replay": None,  # level / composition drawn below
    "dapo": {},
    "reinforce_ada_est": {"n_min": 2, "n_max": 8},
    "prefix_sampling": {"controller": "adaptive"},
    "pros": {"sweeps": 10},
}
REPLAY_VARIANTS = [
    {"warmup": 1, "level": "rollout", "composition": "fresh_anchored"},
    {"warmup": 1, "level": "rollout", "composition": "pool", "priority": "uniform"},
    {"warmup": 1, "level": "query", "priority": "sigma_g", "composition": "fresh_anchored"},
    {"warmup": 1, "level": "query", "priority": "uniform", "composition": "pool"},
]
B, G, STEPS = 4, 4, 3


class Checker(StepHook):
    """Runs last: records each finished step and checks the per-step invariants against the trainer."""

    def __init__(self) -> None:
        self.trainer = None
        self.steps = []

    def after_step(self, step, ctx):
        tr = self.trainer
        self.steps.append(step)
        # every round-0 slot is filled and became a group (refills merge into groups, never add round-0 slots)
        assert len(step.slots) == B
        keys = {g.start.key for g in step.groups}
        assert all(s.state.key in keys for s in step.slots)
        claimed = sum(s.owner != FRESH_OWNER for s in step.slots)
        assert sum(s.drawn for s in step.slots) == B - claimed
        # per-origin counts in the metrics equal the batch's
        m = step.metrics
        if step.trained:
            batch = build_batch(step.trained, tr.codec.pad_token_id)
            counts = Counter(int(o) for o in batch.origin)
            for i, o in enumerate(ORIGINS):
                assert m[f"trained_samples_{o.value}"] == counts.get(i, 0)
        for o in ORIGINS:
            assert m[f"groups_{o.value}"] == sum(g.start.origin is o for g in step.groups)
        assert m["groups_kept"] == len(step.kept) and m["groups_replayed"] == len(step.replayed)
        assert all(g.birth_step == step.index for g in step.fresh)
        assert all(g.birth_step < step.index and g.start.origin is Origin.REPLAYED_ROLLOUT for g in step.replayed)
        # the replay buffer gets exactly the kept groups (per rollout or per group)
        rp = next((p for p in tr.plugins if p.name == "replay"), None)
        if rp is not None:
            born = [u for u in rp.buffer if u.birth_step == step.index]
            want = [(g.start.key, r) for g in step.kept for r in g.response_ids]
            assert sorted((u.start.key, r) for u in born for r in u.response_ids) == sorted(want)
            if rp.cfg.composition == "fresh_anchored":
                assert step.fresh == step.kept  # what was kept is what was trained
        return Result()


def _run(tmp_path, plugins, steps=STEPS, **over):
    chk = Checker()
    tr = make_trainer(
        str(tmp_path), task=ToyTask(good="01"), extra_plugins=[chk], steps=steps, plugins=plugins,
        rollout=RolloutConfig(prompts_per_step=B, group_size=G, max_new_tokens=6, verify_timeout_s=0.0),
        algo=AlgoConfig(max_gen_rounds=3), **over,
    )
    chk.trainer = tr
    rows = tr.fit()
    tr.close()
    return tr, chk, rows


def _drawn_ids(chk):
    return [s.state.problem.id for step in chk.steps for s in step.slots + step.refills if s.drawn]


@st.composite
def compositions(draw):
    names = draw(st.lists(st.sampled_from(sorted(SHIPPED)), unique=True, min_size=1, max_size=4))
    names = draw(st.permutations(names))
    spec = {}
    for n in names:
        spec[n] = dict(draw(st.sampled_from(REPLAY_VARIANTS))) if n == "replay" else dict(SHIPPED[n])
    return spec


@settings(max_examples=10, deadline=None)
@given(spec=compositions())
def test_plugin_compositions_keep_the_fresh_stream_and_the_roles(tmp_path_factory, spec):
    tr, chk, rows = _run(tmp_path_factory.mktemp("run"), spec)
    assert len(chk.steps) == STEPS
    drawn = _drawn_ids(chk)
    # the fresh prompts drawn are exactly GRPO's stream, in order, none lost, none twice
    stream = FreshPromptSource(tr.fresh.problems, tr.fresh.encode, tr.cfg.seed)
    assert drawn == [p.id for p in stream.peek(0, len(drawn))]
    assert len(set(drawn)) == len(drawn) and tr.fresh.cursor == len(drawn)
    # each step's round-0 fresh slots are GRPO's next prompts minus the claimed slots
    for step, row in zip(chk.steps, rows):
        owners = Counter(s.owner for s in step.slots)
        assert sum(v for k, v in owners.items()) == B
        for owner, n in owners.items():
            assert row[f"slots_{owner}"] == n


def test_grpo_draws_the_same_stream(tmp_path):
    tr, chk, _ = _run(tmp_path, {})
    drawn = _drawn_ids(chk)
    assert len(drawn) == B * STEPS
    assert drawn == [p.id for p in FreshPromptSource(tr.fresh.problems, tr.fresh.encode, tr.cfg.seed).peek(0, B * STEPS)]


def test_regen_before_vsr_loses_no_prompt(tmp_path):
    """The ordering the old give-back design got wrong: an ExTra-R source before VSR."""
    spec = {"extra_regen": SHIPPED["extra_regen"], "vsr": SHIPPED["vsr"]}
    tr, chk, _ = _run(tmp_path, spec, steps=4)
    drawn = _drawn_ids(chk)
    assert drawn == [p.id for p in FreshPromptSource(tr.fresh.problems, tr.fresh.encode, tr.cfg.seed).peek(0, len(drawn))]
    assert any(s.owner == "extra_regen" for step in chk.steps for s in step.slots)
    assert any(s.owner == "vsr" for step in chk.steps for s in step.slots)


def test_replay_with_dynamic_sampling_stores_only_what_was_kept(tmp_path):
    """DAPO truncates the mixed fresh groups to B (here a second source draws two extra fresh prompts
    after round 0, so more than B groups are mixed); the buffer must not hold the dropped ones."""

    class ExtraDraws(StartStateSource):
        def refill(self, step, requested, ctx):
            return Refill(fresh=2) if not step.refills else Refill()

    chk = Checker()
    extra = ExtraDraws()
    extra.name = "extra_draws"
    tr = make_trainer(
        str(tmp_path), task=ToyTask(good="01234"), extra_plugins=[extra, chk], steps=3,
        plugins={"dapo": {}, "replay": REPLAY_VARIANTS[0]},
        rollout=RolloutConfig(prompts_per_step=B, group_size=G, max_new_tokens=6, verify_timeout_s=0.0),
        algo=AlgoConfig(max_gen_rounds=3),
    )
    chk.trainer = tr
    rows = tr.fit()
    tr.close()
    assert sum(r["dapo_truncated"] for r in rows) > 0  # the Checker asserted buffer == kept at every step
    assert all(r["groups_kept"] <= B for r in rows)


def test_two_plugins_emitting_one_metric_are_refused(tmp_path):
    class A(StepHook):
        def after_step(self, step, ctx):
            return Result(metrics={"same": 1.0})

    a, b = A(), A()
    a.name, b.name = "a", "b"
    tr = make_trainer(str(tmp_path), extra_plugins=[a, b], steps=1)
    with pytest.raises(ValueError, match="'b' emitted 'same', which 'a' already emitted"):
        tr.fit()
    tr.close()


def test_resume_is_bit_identical_with_every_plugin_on(tmp_path):
    spec = {"reinforce_ada_est": SHIPPED["reinforce_ada_est"], "dapo": {}, "vsr": SHIPPED["vsr"],
            "extra_regen": SHIPPED["extra_regen"], "extra_novelty": SHIPPED["extra_novelty"], "replay": REPLAY_VARIANTS[0]}

    def make(d, **run_kw):
        return make_trainer(str(d), task=ToyTask(good="01"), steps=5, plugins=spec,
                            rollout=RolloutConfig(prompts_per_step=B, group_size=G, max_new_tokens=6, verify_timeout_s=0.0),
                            algo=AlgoConfig(max_gen_rounds=3),
                            run=RunConfig(run_dir=str(d), checkpoint_every=2, progress=False, **run_kw))

    _, _, rows = check_resume_is_bit_identical(make, tmp_path, stop_after=3, checkpoint_step=2)
    assert sum(r["groups_replayed"] for r in rows) > 0 and sum(r["groups_replayed_prefix"] for r in rows) > 0


def test_the_old_dynamic_sampling_flag_points_to_the_plugin():
    with pytest.raises(ValueError, match=r"dynamic_sampling: .*plugins: \{dapo: \{\}\}"):
        AlgoConfig(dynamic_sampling=True)
    from llm_harness.trainer.config import TrainConfig
    from llm_harness.trainer.loop import check_registries

    cfg = TrainConfig(algo=AlgoConfig(collector="nope"))  # the config is data; the registries are checked in one place
    with pytest.raises(ValueError, match=r"collector: unknown collector 'nope'; registered: \['expert', 'generate', 'multiturn'\]"):
        check_registries(cfg)
