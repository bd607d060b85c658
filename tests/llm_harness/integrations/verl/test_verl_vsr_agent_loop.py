"""VSR's agent loop on the real verl 0.9.1 ``AgentLoopBase``, generating with the toolkit's HF
test-bed backend behind a stub server manager; the buffer as a plain object and as a Ray actor."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("verl")
from omegaconf import OmegaConf  # noqa: E402
from verl.experimental.agent_loop.agent_loop import DictConfigWrap, _agent_loop_registry  # noqa: E402
from verl.workers.rollout.replica import TokenOutput  # noqa: E402

from llm_harness.backends import HFBackend, SamplingParams  # noqa: E402
from llm_harness.integrations.verl.agent_loop import VSRPrefixAgentLoop, prompt_key  # noqa: E402
from llm_harness.integrations.verl.prefix_buffer import PrefixBuffer  # noqa: E402
from llm_harness.tasks.step_arith import StepArithConfig, StepArithTask, verify_step_arith  # noqa: E402
from llm_harness.testbed.model import load_testbed  # noqa: E402
from llm_harness.testbed.paths import shipped_checkpoint  # noqa: E402
from llm_harness.trainer.modeling import Codec  # noqa: E402
from theory.prefix_scores import variance_hat  # noqa: E402

N, B, RESPONSE = 4, 4, 64
REWARD = str(Path(__file__).with_name("testbed_reward.py"))


class HFServerManager:
    """Stands in for verl's ``LLMServerClient``: ``generate`` through the toolkit's HF backend, seeded per call."""

    def __init__(self, backend: HFBackend):
        self.backend, self.calls = backend, 0

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        sp = SamplingParams(temperature=float(sampling_params.get("temperature", 1.0)), top_p=float(sampling_params.get("top_p", 1.0)),
                            max_new_tokens=int(sampling_params["max_tokens"]), seed=1000 + self.calls)
        self.calls += 1
        s = self.backend.generate([list(prompt_ids)], 1, sp)[0][0]
        return TokenOutput(token_ids=list(s.token_ids), log_probs=list(s.sampling_logprobs))


@pytest.fixture(scope="module")
def testbed():
    model, tok = load_testbed(shipped_checkpoint("high"))
    task = StepArithTask(StepArithConfig(n_train=64, n_validation=8, n_test=8, n_hard=4, min_terms=3, max_terms=4))
    probs = list(task.problems("train"))
    codec = Codec(tok)
    return HFBackend(model, tok), tok, probs, [list(codec.encode(task.render_prompt(p, tok))) for p in probs]


def config(n: int = N, b: int = B, **vsr):
    return OmegaConf.create({
        "actor_rollout_ref": {"rollout": {"response_length": RESPONSE, "prompt_length": 64, "n": n}},
        "data": {"train_batch_size": b, "seed": 0},
        "reward": {"custom_reward_function": {"path": REWARD, "name": "compute_score"}},
        "algorithm": {"vsr": {"prefix": vsr}},
    })


def make_loop(cfg, backend, tok, buffer):
    return VSRPrefixAgentLoop(trainer_config=DictConfigWrap(cfg), server_manager=HFServerManager(backend), tokenizer=tok,
                              processor=None, dataset_cls=None, data_config=DictConfigWrap(cfg.data), buffer=buffer)


def row(uid, step, prompt_ids, problem):
    return {"uid": uid, "global_steps": step, "vsr_prompt_ids": prompt_ids, "raw_prompt": [],
            "data_source": "testbed/step_arith", "reward_model": {"ground_truth": problem.answer}, "extra_info": {}}


def run_step(loop, step, rows, n=N):
    out = {}
    for uid, kw in rows:  # sequential: the stub's seeds follow the call order
        out[uid] = [asyncio.run(loop.run({"temperature": 1.0, "top_p": 1.0}, session_id=i, **kw)) for i in range(n)]
    return out


def test_registered_under_its_agent_name():
    assert _agent_loop_registry["vsr_prefix"]["_target_"].endswith("agent_loop.VSRPrefixAgentLoop")


def test_fresh_step_then_replayed_prefixes_scored_against_their_own_problem(testbed):
    backend, tok, probs, prompts = testbed
    buf = PrefixBuffer({"rho": 0.5, "window": 5}, n=N, prompts_per_step=B, max_response_tokens=RESPONSE, seed=0)
    loop = make_loop(config(), backend, tok, buf)
    step1 = run_step(loop, 1, [(f"a{k}", row(f"a{k}", 1, prompts[k], probs[k])) for k in range(B)])
    for k in range(B):
        for o in step1[f"a{k}"]:
            assert o.prompt_ids == prompts[k] and o.extra_fields["vsr_prefix_len"] == 0 and all(m == 1 for m in o.response_mask)
            assert o.reward_score == verify_step_arith(tok.decode(o.response_ids, skip_special_tokens=True), int(probs[k].answer)).reward
    succ = {k for k in range(B) if any(o.reward_score > 0 for o in step1[f"a{k}"])}
    assert succ, "the 'high' test-bed model solved none of 4 groups of 4; the test needs a success"

    rows2 = [(f"b{k}", row(f"b{k}", 2, prompts[B + k], probs[B + k])) for k in range(B)]
    step2 = run_step(loop, 2, rows2)
    # the first step's successful groups entered the buffer: the first successful sample of each
    traj = loop.buffer.plugin.buffer
    assert set(traj) == {prompt_key(prompts[k]) for k in succ}
    for k in succ:
        first = next(o for o in step1[f"a{k}"] if o.reward_score > 0)
        t = traj[prompt_key(prompts[k])]
        assert list(t.response_ids) == first.response_ids and t.p0 == np.mean([o.reward_score > 0 for o in step1[f"a{k}"]])
    replayed = [u for u, outs in step2.items() if outs[0].extra_fields["vsr_origin"] == "replayed_prefix"]
    assert len(replayed) == round(0.5 * B)  # round(rho x B) slots, the buffer has enough states
    for u in replayed:
        outs = step2[u]
        plen = outs[0].extra_fields["vsr_prefix_len"]
        src = next(k for k in succ if outs[0].prompt_ids == prompts[k])  # a stored prompt, not the row's own
        t = traj[prompt_key(prompts[src])]
        i = int(np.flatnonzero(t.positions == plen)[0])
        assert outs[0].extra_fields["vsr_score"] == pytest.approx(float(variance_hat(t.alphas[i], t.p0, t.reward)))
        for o in outs:  # every sample of the group starts from the same state
            assert o.prompt_ids == prompts[src] and o.response_ids[:plen] == list(t.response_ids[:plen])
            assert o.response_mask == [0] * plen + [1] * (len(o.response_ids) - plen)
            assert o.response_logprobs[:plen] == [0.0] * plen
            text = tok.decode(o.response_ids, skip_special_tokens=True)
            assert o.reward_score == verify_step_arith(text, int(probs[src].answer)).reward
            assert len(o.response_ids) <= RESPONSE
    fresh = [u for u in step2 if u not in replayed]
    assert all(step2[u][0].extra_fields["vsr_prefix_len"] == 0 for u in fresh)
    asyncio.run(loop.run({"temperature": 1.0}, session_id=0, **row("c0", 3, prompts[0], probs[0])))
    h = loop.buffer.summary()["history"]
    assert [x["step"] for x in h] == [0.0, 1.0] and h[0]["vsr_inserted"] == len(succ) and h[1]["vsr_replayed"] == len(replayed)


def test_buffer_refuses_what_needs_the_toolkits_task_objects_and_stale_steps():
    with pytest.raises(ValueError, match="positions"):
        PrefixBuffer({"positions": "steps"}, n=2, prompts_per_step=2, max_response_tokens=8)
    with pytest.raises(ValueError, match=r"algorithm\.vsr\.prefix.*nope"):
        PrefixBuffer({"nope": 1}, n=2, prompts_per_step=2, max_response_tokens=8)
    b = PrefixBuffer({}, n=2, prompts_per_step=2, max_response_tokens=8)
    b.start_state("u", 3, {"prompt_ids": [1, 2], "problem_id": "p", "ground_truth": "1"})
    with pytest.raises(ValueError, match="older"):
        b.start_state("v", 2, {"prompt_ids": [1, 2], "problem_id": "p"})
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        b.report("u", 3, 0, {"response_ids": [1], "logprobs": [-0.1], "reward": 2.0})


@pytest.mark.xdist_group("ray")
def test_buffer_as_a_named_ray_actor_shared_by_two_loops(testbed, local_ray):
    ray = local_ray
    backend, tok, probs, prompts = testbed
    try:
        cfg = config(n=2, b=2, rho=0.5)
        a, b = make_loop(cfg, backend, tok, None), make_loop(cfg, backend, tok, None)  # each looks the actor up by name
        run_step(a, 1, [("a0", row("a0", 1, prompts[0], probs[0]))], n=2)
        run_step(b, 1, [("a1", row("a1", 1, prompts[1], probs[1]))], n=2)
        asyncio.run(a.run({"temperature": 1.0}, session_id=0, **row("b0", 2, prompts[2], probs[2])))
        s = ray.get(b.buffer.summary.remote())
        assert s["step"] == 1 and len(s["history"]) == 1 and s["history"][0]["vsr_groups_reported"] == 2
        assert s["trajectories"] == s["history"][0]["vsr_inserted"]
    finally:
        ray.kill(ray.get_actor("vsr_prefix_buffer"))
