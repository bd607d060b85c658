"""Prefix Sampling on verl: the prefix buffer holding the toolkit's ``PrefixSamplingPlugin``
(``algorithm.vsr.prefix.method: prefix_sampling``), driven directly with scripted groups (triage, cut,
claim share, step clock, config errors), then through the ``vsr_prefix`` agent loop behind a scripted
server with the test bed's tokenizer, and the ``ps`` / ``ps_hard`` recipes composed against verl's config.
The cut lengths are recomputed here from the rule (PS's module doc), not with the plug-in's own helpers."""

from __future__ import annotations

import asyncio
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

verl = pytest.importorskip("verl")
from omegaconf import OmegaConf  # noqa: E402
from verl.experimental.agent_loop.agent_loop import DictConfigWrap  # noqa: E402
from verl.workers.rollout.replica import TokenOutput  # noqa: E402

from llm_harness.integrations.verl import agent_loop as agent_loop_mod  # noqa: E402
from llm_harness.integrations.verl.agent_loop import VSRPrefixAgentLoop  # noqa: E402
from llm_harness.integrations.verl.prefix_buffer import PREFIX_METHODS, PrefixBuffer, needs_tokenizer  # noqa: E402
from llm_harness.methods.prefix_sampling import PrefixSamplingPlugin  # noqa: E402
from llm_harness.methods.vsr import VSRPlugin  # noqa: E402

N, B, RESP = 4, 4, 64
EOS, NL = 1, 10
ROOT = Path(__file__).resolve().parents[4]
REWARD = str(Path(__file__).with_name("testbed_reward.py"))


class CharTok:
    """A tokenizer whose token 10 decodes to a line break (every other id to a letter); EOS is 1."""

    eos_token_id = EOS

    def decode_ids(self, ids):
        return "".join("\n" if i == NL else chr(ord("a") + i % 26) for i in ids)


def response(uid: str, i: int, length: str = "stop") -> list[int]:
    """12 completion tokens with line breaks after the 4th and 8th (line ends j = 4, 8), then EOS when stopped."""
    h = sum(map(ord, uid)) % 7
    body = [20 + h, 30 + i, 31, NL, 40 + i, 41, 42, NL, 50 + h, 51 + i, 52, 53]
    return body + [EOS] if length == "stop" else body


def expected_cut(ids: list[int], fraction: float, budget: int, snap: bool = True) -> int:
    """PS's cut, from its module doc: ⌊fraction · L⌋ capped at budget − 1, moved back to the last line end <= c."""
    c = min(math.floor(fraction * len(ids) + 1e-9), budget - 1, len(ids))
    ends = [j + 1 for j, t in enumerate(ids) if t == NL and 1 <= j + 1 <= c] if snap else []
    return max(ends) if ends else c


def fresh(k: int) -> dict:
    return {"prompt_ids": [100 + k, 200 + k, 7], "problem_id": f"p{k}", "data_source": "d", "ground_truth": str(k),
            "extra_info": {"k": k}}


def ps(b: int = B, seed: int = 0, tokenizer=CharTok(), **cfg) -> PrefixBuffer:
    return PrefixBuffer({"method": "prefix_sampling", **cfg}, n=N, prompts_per_step=b, max_response_tokens=RESP, seed=seed,
                        tokenizer=tokenizer)


def play(buf: PrefixBuffer, step: int, uid: str, k: int, outcomes, n: int | None = None, finish: str = "stop") -> dict:
    """One group: every sample asks for its state (all get the same), then reports its response and reward."""
    states = [buf.start_state(uid, step, fresh(k)) for _ in outcomes]
    assert all(s == states[0] for s in states)
    for i, ok in enumerate(outcomes[: n if n is not None else len(outcomes)]):
        r = response(uid, i, finish)
        buf.report(uid, step, i, {"response_ids": r, "logprobs": [-0.1] * len(r), "reward": float(ok), "finish_reason": finish})
    return states[0]


HARD, EASY, MID, NONE, ALL = [0, 1, 0, 0], [1, 1, 0, 1], [1, 0, 1, 0], [0, 0, 0, 0], [1, 1, 1, 1]


# ------------------------------------------------------------------------------ triage and cut


@pytest.mark.parametrize("snap", [True, False])
def test_a_hard_group_keeps_its_success_and_next_step_replays_its_cut_verbatim(snap):
    buf = ps(max_share=0.5, snap_to_line=snap)
    assert isinstance(buf.plugin, PrefixSamplingPlugin)
    for j, (uid, outcomes) in enumerate([("u0", HARD), ("u1", MID), ("u2", NONE), ("u3", ALL)]):
        assert play(buf, 0, uid, j, outcomes)["origin"] == "fresh"
    s1 = [play(buf, 1, f"v{j}", 4 + j, HARD) for j in range(B)]  # the replayed group is hard too: never triaged
    replayed = [s for s in s1 if s["origin"] == "replayed_prefix"]
    assert len(replayed) == 1 and s1[0]["origin"] == "replayed_prefix"  # the first uid that asks
    s = replayed[0]
    src = response("u0", 1)[:-1]  # the one success of u0, its stop token dropped: L = 12
    c = expected_cut(src, 1 - 0.25, RESP, snap)
    assert c == (8 if snap else 9)
    assert s["prefix_ids"] == src[:c]  # the reported response ids verbatim
    assert s["prompt_ids"] == fresh(0)["prompt_ids"] and s["problem_id"] == "p0"  # the source problem, scored against its answer
    assert (s["ground_truth"], s["data_source"], s["extra_info"]) == ("0", "d", {"k": 0})
    assert s["meta"] == {"ps_bucket": "hard", "ps_ratio": 0.25, "ps_birth": 0, "ps_source_pass_rate": 0.25, "ps_cut": c,
                         "ps_length": 12}
    assert json.loads(json.dumps(s)) == s  # plain data: what crosses Ray
    assert all(x["origin"] == "fresh" and x["prefix_ids"] == [] and x["meta"] == {} for x in s1[1:])
    play(buf, 2, "w0", 8, MID)  # closes step 1
    h0, h1 = buf.history
    assert (h0["ps_kept_hard"], h0["ps_kept_easy"], h0["ps_pending"], h0["vsr_groups_reported"]) == (1, 0, 1, 4)
    assert h1["ps_claimed_hard"] == 1 and h1["ps_dropped"] == 0
    # the prefix group's meta came back with it: the controller read its pass rate; the 3 fresh hard groups were triaged
    assert h1["ps_pass_rate_hard"] == 0.25 and math.isnan(h1["ps_pass_rate_easy"]) and h1["ps_kept_hard"] == 3
    assert buf.summary()["controller"]["hard"]["observations"] == 1 and buf.summary()["pending"] == 0  # claimed at step 2


def test_an_easy_group_keeps_a_failed_trajectory_cut_to_its_first_quarter():
    buf = ps(max_share=1.0)
    play(buf, 0, "u0", 0, EASY)
    play(buf, 0, "u1", 1, HARD)
    states = [play(buf, 1, f"v{j}", 4 + j, MID) for j in range(2)]
    by = {s["meta"]["ps_bucket"]: s for s in states}
    assert set(by) == {"hard", "easy"} and all(s["origin"] == "replayed_prefix" for s in states)
    fail = response("u0", 2)[:-1]  # u0's only failure
    c = expected_cut(fail, 0.25, RESP)
    assert c == 3 and by["easy"]["prefix_ids"] == fail[:c] and by["easy"]["problem_id"] == "p0"
    assert by["easy"]["meta"]["ps_source_pass_rate"] == 0.75
    succ = response("u1", 1)[:-1]  # u1's only success
    assert by["hard"]["prefix_ids"] == succ[:expected_cut(succ, 0.75, RESP)] and by["hard"]["problem_id"] == "p1"


def test_hard_only_never_keeps_a_failed_trajectory():
    buf = ps(max_share=1.0, hard_only=True)
    outcomes = {0: [EASY, EASY, HARD, [1, 0, 1, 1]], 1: [[0, 1, 1, 1], HARD, HARD, EASY], 2: [EASY] * 4, 3: [MID] * 4}
    successes: dict[tuple, set] = {}
    for step, groups in outcomes.items():
        states = [play(buf, step, f"s{step}u{j}", 4 * step + j, o) for j, o in enumerate(groups)]
        for s in states:
            if s["origin"] == "replayed_prefix":
                assert s["meta"]["ps_bucket"] == "hard"
                key = (s["problem_id"],)
                assert any(list(r[: len(s["prefix_ids"])]) == s["prefix_ids"] for r in successes[key])
        for j, (s, o) in enumerate(zip(states, groups)):
            if s["origin"] == "fresh":
                successes[(s["problem_id"],)] = {tuple(response(f"s{step}u{j}", i)) for i in range(N) if o[i]}
    h = buf.history
    assert [x["ps_kept_easy"] for x in h] == [0, 0, 0] and [x["ps_kept_hard"] for x in h] == [1, 2, 0]
    assert [x.get("ps_claimed_easy", 0) for x in h] == [0, 0, 0] and [x.get("ps_claimed_hard", 0) for x in h] == [0, 1, 2]


def test_the_stop_token_is_not_part_of_the_cut_trajectory():
    stop, length = ps(max_share=1.0), ps(max_share=1.0)
    play(stop, 0, "u0", 0, HARD, finish="stop")
    play(length, 0, "u0", 0, HARD, finish="length")
    a, b = play(stop, 1, "v0", 1, MID), play(length, 1, "v0", 1, MID)
    assert a["meta"]["ps_length"] == 12 and b["meta"]["ps_length"] == 12  # 12 + EOS stopped, 12 cut by the budget
    no_reason = ps(max_share=1.0)  # a loop that reports no finish reason: the last token stays (L = 13)
    no_reason.start_state("u0", 0, fresh(0))
    for i, ok in enumerate(HARD):
        r = response("u0", i)
        no_reason.report("u0", 0, i, {"response_ids": r, "logprobs": [0.0] * len(r), "reward": float(ok)})
    assert play(no_reason, 1, "v0", 1, MID)["meta"]["ps_length"] == 13
    with pytest.raises(ValueError, match="finish_reason"):
        no_reason.report("v0", 1, 0, {"response_ids": [3], "logprobs": [0.0], "reward": 0.0, "finish_reason": "eos"})


def test_the_cut_leaves_at_least_one_token_of_the_response_budget():
    buf = PrefixBuffer({"method": "prefix_sampling", "max_share": 1.0, "snap_to_line": False}, n=N, prompts_per_step=B,
                       max_response_tokens=5, seed=0)
    play(buf, 0, "u0", 0, HARD)
    s = play(buf, 1, "v0", 1, MID)
    assert s["prefix_ids"] == response("u0", 1)[:4] and s["meta"]["ps_cut"] == 4  # ⌊0.75 · 12⌋ = 9, capped at 5 − 1


# ------------------------------------------------------------------------------ claim share and step clock


@pytest.mark.parametrize("share,claimed", [(0.5, 2), (0.25, 1), (0.0, 0), (1.0, 4), (0.6, 2)])
def test_prefix_tasks_take_at_most_max_share_of_the_prompts_per_step(share, claimed):
    buf = ps(max_share=share)
    for j in range(B):
        play(buf, 0, f"u{j}", j, HARD)
    states = [play(buf, 1, f"v{j}", 4 + j, MID) for j in range(B)]
    assert [s["origin"] for s in states] == ["replayed_prefix"] * claimed + ["fresh"] * (B - claimed)
    assert [s["problem_id"] for s in states[claimed:]] == [f"p{4 + j}" for j in range(claimed, B)]  # the rows' own prompts
    play(buf, 2, "w0", 8, MID)
    assert buf.history[1]["ps_claimed_hard"] == claimed and buf.history[1]["ps_dropped"] == B - claimed
    # a rerun with the same seed claims the same seeded subset (which uids get them follows arrival order)
    again = ps(max_share=share)
    for j in range(B):
        play(again, 0, f"u{j}", j, HARD)
    assert [play(again, 1, f"x{j}", 4 + j, MID)["problem_id"] for j in range(B)] == [s["problem_id"] for s in states]


def test_prefix_tasks_are_offered_at_the_next_step_only():
    buf = ps(max_share=0.25)  # one slot of four
    for j in range(3):
        play(buf, 0, f"u{j}", j, HARD)
    play(buf, 0, "u3", 3, MID)
    s1 = [play(buf, 1, f"v{j}", 4 + j, MID) for j in range(B)]
    assert sum(s["origin"] == "replayed_prefix" for s in s1) == 1
    s2 = [play(buf, 2, f"w{j}", 8 + j, MID) for j in range(B)]
    assert all(s["origin"] == "fresh" for s in s2)  # the two dropped at step 1 do not come back
    assert buf.history[1]["ps_dropped"] == 2 and buf.history[1]["ps_pending"] == 0


def test_a_skipped_step_expires_the_pending_tasks():
    buf = ps(max_share=1.0)
    play(buf, 0, "u0", 0, HARD)
    s = play(buf, 2, "w0", 8, MID)  # no row of the loop ran at step 1
    assert s["origin"] == "fresh"
    assert [x["step"] for x in buf.history] == [0.0, 1.0] and buf.history[1]["vsr_groups_reported"] == 0
    assert buf.history[1]["ps_pending"] == 0
    with pytest.raises(ValueError, match="older"):
        buf.start_state("x", 1, fresh(1))
    with pytest.raises(ValueError, match="not started"):
        buf.report("u0", 2, 0, {"response_ids": [3], "logprobs": [0.0], "reward": 1.0})


def test_an_incomplete_group_is_not_triaged():
    buf = ps(max_share=1.0)
    play(buf, 0, "u0", 0, HARD, n=3)  # one sample failed: 3 reports of 4 (its success among them)
    assert play(buf, 1, "v0", 1, MID)["origin"] == "fresh"
    assert buf.history[0]["vsr_groups_reported"] == 0 and buf.history[0]["ps_kept_hard"] == 0


# ------------------------------------------------------------------------------ configuration


@pytest.mark.parametrize("params,match", [
    ({"rho": 0.5}, r"algorithm\.vsr\.prefix: unknown key.*'rho'.*method: prefix_sampling"),
    ({"nope": 1}, r"algorithm\.vsr\.prefix: unknown key.*'nope'"),
    ({"low": 0.8}, r"algorithm\.vsr\.prefix\.high"),
    ({"controller": "pid"}, r"algorithm\.vsr\.prefix\.controller"),
    ({"hard_only": "yes"}, r"algorithm\.vsr\.prefix\.hard_only"),
    ({"max_share": 1.5}, r"algorithm\.vsr\.prefix\.max_share"),
])
def test_bad_keys_are_named_with_the_verl_key(params, match):
    with pytest.raises(ValueError, match=match):
        ps(**params)


def test_an_unknown_method_lists_the_registered_ones():
    with pytest.raises(ValueError, match=r"algorithm\.vsr\.prefix\.method: .*'nope'.*prefix_sampling.*vsr"):
        PrefixBuffer({"method": "nope"}, n=N, prompts_per_step=B, max_response_tokens=RESP)
    assert set(PREFIX_METHODS) == {"vsr", "prefix_sampling"}


def test_pros_is_refused_with_the_reason():
    """PROS is a toolkit plug-in verl cannot serve (no token entropies in the agent loop's report, no hook over what is
    generated): asking for it says so and names the methods that work, rather than 'unknown method'."""
    with pytest.raises(ValueError, match=r"algorithm\.vsr\.prefix\.method: 'pros' is not available on verl: .*entropies"
                                         r".*custom_sampler.*plugins\.pros.*\['prefix_sampling', 'vsr'\]"):
        PrefixBuffer({"method": "pros"}, n=N, prompts_per_step=B, max_response_tokens=RESP)


def test_line_snapping_without_a_tokenizer_is_named():
    assert needs_tokenizer({"method": "prefix_sampling"}) and not needs_tokenizer({"method": "prefix_sampling", "snap_to_line": False})
    buf = ps(max_share=1.0, tokenizer=None)
    play(buf, 0, "u0", 0, HARD)
    with pytest.raises(ValueError, match=r"algorithm\.vsr\.prefix\.snap_to_line.*tokenizer"):
        buf.start_state("v0", 1, fresh(1))
    plain = ps(max_share=1.0, tokenizer=None, snap_to_line=False)  # no decoding: no tokenizer needed
    play(plain, 0, "u0", 0, HARD)
    assert plain.start_state("v0", 1, fresh(1))["meta"]["ps_cut"] == 9


def test_the_default_method_is_vsr_and_unchanged():
    for params in ({}, {"method": "vsr"}, {"rho": 0.5, "window": 5}, {"method": "vsr", "rho": 0.5, "window": 5}):
        b = PrefixBuffer(params, n=N, prompts_per_step=B, max_response_tokens=RESP)
        assert b.method == "vsr" and isinstance(b.plugin, VSRPlugin) and not needs_tokenizer(params)
        assert b.plugin.cfg.rho == params.get("rho", b.plugin.cfg.__class__().rho)
        assert set(b.summary()) >= {"trajectories", "states", "step", "history", "warnings"}
    with pytest.raises(ValueError, match=r"algorithm\.vsr\.prefix: unknown key.*'max_share'.*method: vsr"):
        PrefixBuffer({"max_share": 0.5}, n=N, prompts_per_step=B, max_response_tokens=RESP)


# ------------------------------------------------------------------------------ the agent loop


class ScriptedServer:
    """``generate``: the next scripted text's tokens (then EOS), log-prob −0.5 each; records each request."""

    def __init__(self, tok):
        self.tok, self.texts, self.requests = tok, [], []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        self.requests.append((list(prompt_ids), int(sampling_params["max_tokens"])))
        ids = list(self.tok.encode(self.texts.pop(0), add_special_tokens=False)) + [self.tok.eos_token_id]
        ids = ids[: int(sampling_params["max_tokens"])]
        return TokenOutput(token_ids=ids, log_probs=[-0.5] * len(ids))


@pytest.fixture(scope="module")
def testbed():
    from llm_harness.tasks.step_arith import StepArithConfig, StepArithTask
    from llm_harness.testbed.model import load_testbed
    from llm_harness.testbed.paths import shipped_checkpoint
    from llm_harness.trainer.modeling import Codec

    tok = load_testbed(shipped_checkpoint("high"))[1]
    task = StepArithTask(StepArithConfig(n_train=16, n_validation=4, n_test=4, n_hard=2, min_terms=3, max_terms=4))
    probs = list(task.problems("train"))
    return tok, probs, [list(Codec(tok).encode(task.render_prompt(p, tok))) for p in probs]


def test_the_agent_loop_runs_ps_prefix_tasks_from_its_own_trajectories(testbed, monkeypatch):
    from llm_harness.tasks.step_arith import verify_step_arith

    tok, probs, prompts = testbed
    made = {}

    def local_actor(params, **kwargs):  # the buffer actor, in this process: what the loop hands it
        made.update(kwargs)
        return PrefixBuffer(params, **kwargs)

    monkeypatch.setattr(agent_loop_mod, "buffer_actor", local_actor)
    cfg = OmegaConf.create({
        "actor_rollout_ref": {"rollout": {"response_length": RESP, "prompt_length": 64, "n": N}},
        "data": {"train_batch_size": 2, "seed": 0},
        "reward": {"custom_reward_function": {"path": REWARD, "name": "compute_score"}},
        "algorithm": {"vsr": {"prefix": {"method": "prefix_sampling", "max_share": 1.0}}},
    })
    server = ScriptedServer(tok)
    loop = VSRPrefixAgentLoop(trainer_config=DictConfigWrap(cfg), server_manager=server, tokenizer=tok, processor=None,
                              dataset_cls=None, data_config=DictConfigWrap(cfg.data))
    assert made["tokenizer"] is tok and made["max_response_tokens"] == RESP and loop.buffer.method == "prefix_sampling"

    def run(step, uid, k, texts):
        server.texts += texts
        kw = {"uid": uid, "global_steps": step, "vsr_prompt_ids": prompts[k], "raw_prompt": [], "data_source": "testbed/step_arith",
              "reward_model": {"ground_truth": probs[k].answer}, "extra_info": {}}
        return [asyncio.run(loop.run({"temperature": 1.0}, session_id=i, **kw)) for i in range(len(texts))]

    def text(k, ok):
        return f"1+2=3\n3+4=7\nA:{int(probs[k].answer) + (0 if ok else 1)}"

    first = {0: run(1, "a0", 0, [text(0, ok) for ok in HARD]), 1: run(1, "a1", 1, [text(1, ok) for ok in EASY])}
    assert [o.reward_score for o in first[0]] == [float(x) for x in HARD] and all(o.extra_fields["vsr_ps_bucket"] == "" for o in first[0])
    second = {u: run(2, u, 2 + j, ["A:0"] * N) for j, u in enumerate(("b0", "b1"))}
    seen = set()
    for outs in second.values():
        f = outs[0].extra_fields
        assert f["vsr_origin"] == "replayed_prefix" and math.isnan(f["vsr_score"])
        bucket, plen = f["vsr_ps_bucket"], f["vsr_prefix_len"]
        seen.add(bucket)
        src, ok = (0, HARD) if bucket == "hard" else (1, EASY)
        kept = next(o for o, y in zip(first[src], ok) if y == (bucket == "hard"))  # the only success / failure
        ids = kept.response_ids[:-1]  # stopped: the EOS is not part of L
        nl = [t for t in set(ids) if "\n" in tok.decode([t])]
        c = min(math.floor((0.75 if bucket == "hard" else 0.25) * len(ids) + 1e-9), RESP - 1)
        ends = [j + 1 for j, t in enumerate(ids) if t in nl and j + 1 <= c]
        assert plen == (max(ends) if ends else c) > 0
        for o in outs:  # every sample of the group continues the kept trajectory's first tokens, under mask 0
            assert o.prompt_ids == prompts[src] and o.response_ids[:plen] == kept.response_ids[:plen]
            assert o.response_mask == [0] * plen + [1] * (len(o.response_ids) - plen) and o.response_logprobs[:plen] == [0.0] * plen
            text_all = tok.decode(o.response_ids, skip_special_tokens=True)
            assert o.reward_score == verify_step_arith(text_all, int(probs[src].answer)).reward  # the source problem's answer
    assert seen == {"hard", "easy"}
    assert [m for _, m in server.requests[-2 * N:]] == [RESP - o.extra_fields["vsr_prefix_len"] for outs in second.values() for o in outs]
    run(3, "c0", 4, ["A:0"])  # closes step 2: the controller read both buckets' prefix groups
    h = loop.buffer.summary()["history"]
    assert h[1]["ps_claimed_hard"] == h[1]["ps_claimed_easy"] == 1 and np.isfinite(h[1]["ps_pass_rate_hard"])
    assert h[1]["ps_kept_hard"] == h[1]["ps_kept_easy"] == 0  # prefix groups are never triaged


def test_the_tokenizer_survives_the_trip_to_the_actor(testbed):
    import pickle

    tok = testbed[0]
    ids = list(tok.encode("1+2=3\nA:3", add_special_tokens=False))
    assert pickle.loads(pickle.dumps(tok)).decode(ids) == tok.decode(ids)


class SokobanServer:
    """``generate``: the BFS expert's next move on the context's last room with probability ``q``, else a random move,
    then EOS (the scripted policy of ``test_verl_env_loop``)."""

    def __init__(self, tok, q: float, seed: int = 0):
        self.tok, self.q, self.rng = tok, q, np.random.default_rng(seed)

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        from llm_harness.envs.prompt import OBS_TAG
        from llm_harness.envs.sokoban import MOVES, parse_room, solve

        grid = self.tok.decode(prompt_ids).rsplit(OBS_TAG, 1)[1].rsplit("\nA:", 1)[0]
        plan = solve(parse_room(grid), 20)
        word = plan[0] if plan and self.rng.random() < self.q else str(self.rng.choice(sorted(MOVES)))
        ids = (list(self.tok.encode(word, add_special_tokens=False)) + [self.tok.eos_token_id])[: int(sampling_params["max_tokens"])]
        return TokenOutput(token_ids=ids, log_probs=[-0.5] * len(ids))


def test_ps_over_the_env_loop_restarts_from_the_kept_episodes_turn():
    """Agents: PS cuts the kept episode in turns (no decoding, so the ``vsr_env`` loop needs no tokenizer in the actor)
    and the loop restores the state before turn ``c`` exactly (its room, its history)."""
    from llm_harness.envs.prompt import OBS_TAG
    from llm_harness.integrations.verl.env_loop import VSREnvAgentLoop
    from llm_harness.testbed.model import load_testbed
    from llm_harness.testbed.paths import CHECKPOINT_DIR

    tok = load_testbed(CHECKPOINT_DIR / "sokoban" / "mid")[1]
    params = json.dumps({"env": "sokoban", "window": 1, "n_train": 16}, sort_keys=True)
    prefix = {"method": "prefix_sampling", "max_share": 1.0}
    cfg = OmegaConf.create({"actor_rollout_ref": {"rollout": {"response_length": 2048, "prompt_length": 1024, "n": N}},
                            "data": {"train_batch_size": 2, "seed": 0},
                            "algorithm": {"vsr": {"prefix": prefix, "agent": {"turn_tokens": 8, "max_turns": 0}}}})
    buf = PrefixBuffer(prefix, n=N, prompts_per_step=2, max_response_tokens=2048, seed=0)  # no tokenizer
    loop = VSREnvAgentLoop(trainer_config=DictConfigWrap(cfg), server_manager=SokobanServer(tok, 0.5), tokenizer=tok,
                           processor=None, dataset_cls=None, data_config=DictConfigWrap(cfg.data), buffer=buf)

    def play_env(step, seeds):
        return {s: [asyncio.run(loop.run({}, session_id=i, uid=f"u{step}_{s}", global_steps=step, data_source="vsr/env", raw_prompt=[],
                                         extra_info={"params": params, "seed": s, "problem_id": f"sokoban/s{s}"})) for i in range(N)]
                for s in seeds}

    first = play_env(1, [10000, 10001])
    ok = {s: [o.extra_fields["vsr_success"] == 1.0 for o in outs] for s, outs in first.items()}
    assert sum(ok[10000]) == 3 and sum(ok[10001]) == 2  # the scripted policy's draw: one easy group, one in the middle
    second = play_env(2, [10002, 10003])
    replayed = [o for outs in second.values() for o in outs if o.extra_fields["vsr_origin"] == "replayed_prefix"]
    assert len(replayed) == N and {o.extra_fields["vsr_origin"] for o in second[10003]} == {"fresh"}
    kept = next(o for o, y in zip(first[10000], ok[10000]) if not y)  # the easy group's only failed episode
    turns = len(kept.extra_fields["gigpo_anchors"])
    c = min(math.floor(0.25 * turns + 1e-9), turns - 1)  # the first quarter of its turns, within [1, L − 1]
    assert c >= 1
    for o in replayed:
        assert o.extra_fields["gigpo_anchors"][0] == kept.extra_fields["gigpo_anchors"][c]  # the room before turn c
        text = tok.decode(o.prompt_ids)
        assert text.count(OBS_TAG) == 2 and kept.extra_fields["gigpo_anchors"][c - 1] in text  # window 1: turn c − 1 shown
    play_env(3, [10004])
    h = buf.summary()["history"]
    assert h[0]["ps_kept_easy"] == 1 and h[1]["ps_claimed_easy"] == 1 and np.isfinite(h[1]["ps_pass_rate_easy"])


# ------------------------------------------------------------------------------ recipes


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    import pandas as pd

    d = tmp_path_factory.mktemp("ps_data")
    for name, agent in (("ps", "vsr_prefix"), ("plain", "single_turn_agent")):
        (d / name).mkdir()
        pd.DataFrame({"agent_name": [agent] * 2}).to_parquet(d / name / "train.parquet")  # what train.sh checks
    return d


@pytest.mark.parametrize("method", ["ps", "ps_hard"])
def test_the_ps_recipes_compose_with_verls_config(rows, method):
    from hydra import compose, initialize_config_dir

    from llm_harness.integrations.verl.estimators import _params

    env = {**os.environ, "DRY_RUN": "1", "MODEL": "/m", "DATA": str(rows / "ps"), "OUT": "/tmp/unused", "PYTHON": sys.executable}
    out = subprocess.run(["bash", str(ROOT / "scripts/verl/train.sh"), method], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    with initialize_config_dir(config_dir=str(Path(verl.__file__).parent / "trainer" / "config"), version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=out.stdout.split())
    assert cfg.algorithm.adv_estimator == "vsr_grpo" and cfg.trainer.v1.trainer_mode == "vsr_sync"
    p = _params(cfg.algorithm)
    b = PrefixBuffer(p.prefix, n=cfg.actor_rollout_ref.rollout.n, prompts_per_step=cfg.data.train_batch_size,
                     max_response_tokens=cfg.data.max_response_length, tokenizer=CharTok())
    assert b.method == "prefix_sampling" and b.plugin.cfg.max_share == 0.5 and b.plugin.cfg.controller == "fixed"
    assert b.plugin.cfg.hard_only == (method == "ps_hard")
    bad = subprocess.run(["bash", str(ROOT / "scripts/verl/train.sh"), method], env={**env, "DATA": str(rows / "plain")},
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "--agent vsr_prefix" in bad.stderr
