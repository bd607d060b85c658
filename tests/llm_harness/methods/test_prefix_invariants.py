"""The invariants every prefix method must keep, checked on real trainer steps of each (``vsr``, ``prefix_sampling``,
``pros``): the bug class of a prefix placed in the prompt for generation but re-tokenised into the response for
training (ms-swift issue 10106: the policy is scored on tokens it never sampled and the on-policy ratio explodes),
a loss numerator or denominator on the wrong mask (alibaba/ROLL issue 444, TRL issue 6369), unmasked history.

On every step whose loss holds prefix states:

* the trained row's context is the prompt ids + the prefix ids, and the prefix ids are a verbatim slice of a
  response the policy sampled at an earlier step (never text re-encoded);
* the loss mask is 0 on every prompt and prefix position and the gradient of the loss with respect to the
  per-position log-probs is exactly 0 there;
* each row's behaviour log-probs are as many as its mask's ones, sit exactly on them, and equal the training
  pass's log-probs there (to float32 rounding); scoring the same response without the prefix does not;
* at the first PPO epoch the log-ratio is exactly 0 (``old_logprobs: recompute``: nothing has moved yet);
* the verifier was given prefix + continuation, and the reward is its verdict on that text.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from llm_harness.tasks import ParseStatus, VerifyResult
from llm_harness.trainer.config import AlgoConfig
from llm_harness.trainer.data import Origin, build_batch, completion_ids
from llm_harness.trainer.plugins import StepRecorder
from trainer_support import ToyTask, make_trainer

#: each method's parameters on the toy task, so that prefix states are trained within a few steps
METHODS = {
    "vsr": {"rho": 0.5},
    "prefix_sampling": {"controller": "adaptive"},
    "pros": {"sweeps": 10, "share": 1.0},
}
STEPS = 4


class RecordingTask(ToyTask):
    """The toy task graded on the completion's *last* character (so a prefix leaves the outcome open and prefix
    groups are mixed), remembering every (problem id, text) it verified."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, str]] = []

    def grade(self, completion: str) -> float:
        return 1.0 if completion and completion[-1] in self.good else 0.0

    def verify(self, problem, completion):
        self.seen.append((problem.id, completion))
        return VerifyResult(self.grade(completion), ParseStatus.OK, extracted=completion[-1:])


@pytest.fixture(scope="module", params=sorted(METHODS))
def run(request, tmp_path_factory):
    name = request.param
    task = RecordingTask()
    rec = StepRecorder()
    tr = make_trainer(str(tmp_path_factory.mktemp(name)), task=task, extra_plugins=[rec], steps=STEPS,
                      plugins={name: METHODS[name]}, algo=AlgoConfig(ppo_epochs=2, old_logprobs="recompute"))
    calls: list[dict] = []
    objective = tr.objective

    def recording_objective(lp, old, adv, mask, **kw):
        out = objective(lp, old, adv, mask, **kw)
        (grad,) = torch.autograd.grad(out.loss, lp, retain_graph=True)
        first = not any(c["step"] == tr.step for c in calls)
        calls.append({"step": tr.step, "lp": lp.detach().clone(), "old": old.detach().clone(), "mask": mask.clone(),
                      "grad": grad.detach().clone(),
                      # the weights the step's rollouts were sampled with (nothing has moved before the first epoch)
                      "weights": {k: v.detach().clone() for k, v in tr.model.state_dict().items()} if first else None})
        return out

    tr.objective = recording_objective
    tr.fit()
    tr.close()
    return name, tr, task, rec.records, calls


def _prefix_steps(records):
    return [s for s in records if any(g.start.origin is Origin.REPLAYED_PREFIX and g.start.prefix_ids for g in s.trained)]


def _first_epoch_call(calls, step):
    mine = [c for c in calls if c["step"] == step]
    assert len(mine) == 2  # two PPO epochs of one mini-batch
    return mine[0]


def test_prefix_states_are_trained(run):
    name, tr, task, records, calls = run
    assert _prefix_steps(records), f"{name}: no step trained a prefix state"


def test_prefix_ids_are_sampled_ids_reused_verbatim(run):
    name, tr, task, records, calls = run
    for s in _prefix_steps(records):
        earlier = [(g.start.problem.id, g.start.prompt_ids, r) for e in records[: s.index] for g in e.groups
                   if not g.start.prefix_ids for r in g.response_ids]
        batch = build_batch(s.trained, tr.codec.pad_token_id)
        row = 0
        for g in s.trained:
            pre = g.start.prefix_ids
            for i in range(g.size):
                ctx = g.start.prompt_ids + pre
                assert batch.input_ids[row, : len(ctx)].tolist() == list(ctx)
                assert batch.input_ids[row, len(ctx): len(ctx) + len(g.response_ids[i])].tolist() == list(g.response_ids[i])
                row += 1
            if g.start.origin is Origin.REPLAYED_PREFIX and pre:
                assert any(p == g.start.problem.id and q == g.start.prompt_ids and r[: len(pre)] == pre
                           for p, q, r in earlier), f"{name}: a prefix that is no earlier sample's ids"


def test_mask_and_gradient_are_zero_on_prompt_and_prefix(run):
    name, tr, task, records, calls = run
    for s in _prefix_steps(records):
        c = _first_epoch_call(calls, s.index)
        batch = build_batch(s.trained, tr.codec.pad_token_id)
        w = c["mask"].shape[1]
        assert torch.equal(c["mask"], batch.loss_mask[:, :w].to(c["mask"].dtype))  # the mask the trainer used
        assert torch.all(c["grad"][c["mask"] == 0] == 0)
        assert torch.any(c["grad"][c["mask"] > 0] != 0)  # (the loss does reach the response tokens)
        row = 0
        for g in s.trained:
            n_ctx = len(g.start.context_ids)
            for i in range(g.size):
                m = c["mask"][row]
                assert torch.all(m[: n_ctx - 1] == 0)  # targets 1 .. n_ctx-1: prompt and prefix tokens
                assert torch.all(m[n_ctx - 1: n_ctx - 1 + len(g.response_ids[i])] == 1)
                row += 1


def test_behaviour_logprobs_sit_on_the_mask_and_match_the_training_pass(run):
    name, tr, task, records, calls = run
    for s in _prefix_steps(records):
        c = _first_epoch_call(calls, s.index)
        batch = build_batch(s.trained, tr.codec.pad_token_id)
        w = c["mask"].shape[1]
        row = 0
        for g in s.trained:
            for i in range(g.size):
                m = c["mask"][row] > 0
                blp = g.behaviour_logprobs[i]
                assert int(m.sum()) == len(blp) == len(g.response_ids[i])
                assert torch.all(batch.old_logprobs[row, :w][~m] == 0)
                np.testing.assert_allclose(batch.old_logprobs[row, :w][m].numpy(), blp, rtol=0, atol=1e-6)
                np.testing.assert_allclose(c["lp"][row][m].numpy(), blp, rtol=0, atol=1e-4)
                row += 1


def test_dropping_the_prefix_changes_the_scored_logprobs(run):
    """The check above has power: the same response scored without its prefix disagrees with the behaviour
    log-probs (what a prefix moved out of the context would train on)."""
    name, tr, task, records, calls = run
    assert tr.backend.model is tr.model
    gaps = []
    for s in _prefix_steps(records):
        tr.model.load_state_dict(_first_epoch_call(calls, s.index)["weights"])
        for g in s.trained:
            if g.start.origin is Origin.REPLAYED_PREFIX and g.start.prefix_ids:
                for i in range(g.size):
                    with_p = tr.backend.score(g.start.context_ids, g.response_ids[i], temperature=tr.cfg.rollout.temperature, with_entropy=False)
                    np.testing.assert_allclose(with_p.logprobs, g.behaviour_logprobs[i], rtol=0, atol=1e-4)
                    without = tr.backend.score(g.start.prompt_ids, g.response_ids[i], temperature=tr.cfg.rollout.temperature, with_entropy=False)
                    gaps.append(float(np.max(np.abs(without.logprobs - g.behaviour_logprobs[i]))))
    assert gaps and max(gaps) > 1e-3


def test_importance_ratio_is_one_at_the_first_epoch(run):
    """Against the recomputed π_old the first epoch's log-ratio is exactly 0 (the same pass twice); against the
    *sampler's* behaviour log-probs it is 1 to float rounding — the check a prefix re-tokenised into the response
    fails (the policy would be scored on tokens it never sampled)."""
    name, tr, task, records, calls = run
    for s in _prefix_steps(records):
        c = _first_epoch_call(calls, s.index)
        assert torch.all((c["lp"] - c["old"])[c["mask"] > 0] == 0)
        row = 0
        for g in s.trained:
            for i in range(g.size):
                m = c["mask"][row] > 0
                ratio = np.exp(c["lp"][row][m].numpy().astype(np.float64) - np.asarray(g.behaviour_logprobs[i], np.float64))
                np.testing.assert_allclose(ratio, 1.0, rtol=0, atol=1e-3)
                row += 1


def test_the_verifier_reads_prefix_and_continuation(run):
    name, tr, task, records, calls = run
    seen = set(task.seen)
    n = 0
    for s in _prefix_steps(records):
        for g in s.groups:
            if g.start.origin is not Origin.REPLAYED_PREFIX or not g.start.prefix_ids:
                continue
            for i in range(g.size):
                text = tr.codec.decode(g.start.prefix_ids + completion_ids(g.response_ids[i], g.finish_reasons[i] == "stop"))
                assert (g.start.problem.id, text) in seen
                assert text.startswith(tr.codec.decode(g.start.prefix_ids))
                assert g.rewards[i] == task.grade(text)
                n += 1
    assert n > 0
