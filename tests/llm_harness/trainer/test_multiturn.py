"""The multi-turn collector: batched turns, loss masks per turn, episode advantages, restarts, resume."""

from __future__ import annotations

import numpy as np
import pytest

from llm_harness.envs.prompt import render_agent_prompt
from llm_harness.tasks import get_task
from llm_harness.trainer.advantages import group_advantages
from llm_harness.trainer.config import AgentConfig, AlgoConfig, ModelConfig, RolloutConfig, RunConfig
from llm_harness.trainer.data import StartState, build_batch
from llm_harness.trainer.gigpo import GiGPOParams, gigpo_advantages
from llm_harness.trainer.multiturn import episode_group_advantages, multiturn_groups
from trainer_support import check_resume_is_bit_identical, make_trainer

B, G = 2, 3


def _trainer(d, adv="grpo", steps=2, **over):
    task = get_task("env", env="sokoban", n_train=40, window=1)
    return make_trainer(
        str(d), task=task, steps=steps,
        model=ModelConfig(random_init=True, alphabet="text", hidden_size=16, num_layers=1, num_heads=2, max_context=512),
        rollout=RolloutConfig(prompts_per_step=B, group_size=G, max_new_tokens=8, verify_timeout_s=0.0),
        algo=AlgoConfig(collector="multiturn", advantage=adv, filter_zero_variance=False), agent=AgentConfig(turn_tokens=5, max_turns=4),
        **over,
    )


class CountingBackend:
    """Wraps a backend and records the batch size of every generate call."""

    def __init__(self, inner):
        self.inner, self.calls = inner, []
        self.max_context = getattr(inner, "max_context", None)

    def generate(self, prompts, n, sp):
        self.calls.append(len(prompts))
        return self.inner.generate(prompts, n, sp)


def test_all_active_episodes_advance_in_one_call_per_turn(tmp_path):
    tr = _trainer(tmp_path)
    spy = CountingBackend(tr.backend)
    import dataclasses

    ctx = dataclasses.replace(tr.ctx, backend=spy)
    states = tr.fresh.draw(B)
    groups, stats = multiturn_groups(states, step=0, round=0, ctx=ctx)
    tr.close()
    lengths = [int(np.sum(g.info["episode"] == e)) for g in groups for e in range(G)]
    assert len(spy.calls) == max(lengths)  # one call per turn
    assert spy.calls[0] == B * G and all(a >= b for a, b in zip(spy.calls, spy.calls[1:]))  # finished ones drop out
    assert spy.calls == [sum(L > t for L in lengths) for t in range(max(lengths))]
    assert stats.samples == B * G and stats.new_tokens == sum(g.n_new_tokens for g in groups)


def test_rows_are_turns_with_their_own_prompt_and_only_the_reply_in_the_loss(tmp_path):
    tr = _trainer(tmp_path)
    (g,) = multiturn_groups(tr.fresh.draw(1), step=0, round=0, ctx=tr.ctx)[0]
    batch = build_batch([g.with_advantages(np.ones(g.size))], tr.codec.pad_token_id)
    for k in range(g.size):
        ctx_len, resp = len(g.context(k)), g.response_ids[k]
        np.testing.assert_array_equal(batch.input_ids[k, : ctx_len + len(resp)].numpy(), list(g.context(k)) + list(resp))
        mask = batch.loss_mask[k].numpy()
        assert mask.sum() == len(resp) and np.all(mask[ctx_len - 1 : ctx_len - 1 + len(resp)] == 1)
    # turn 0's prompt is the first-turn prompt of the problem; turns count up within each episode
    assert tr.codec.decode(g.context(0)) == g.start.problem.prompt
    for e in range(G):
        turns = g.info["turn"][g.info["episode"] == e]
        assert turns.tolist() == list(range(len(turns)))
    # the last row of an episode carries its outcome, the others none
    ends = [int(np.flatnonzero(g.info["episode"] == e)[-1]) for e in range(G)]
    assert [k for k, v in enumerate(g.verify) if v is not None] == ends
    np.testing.assert_allclose(g.rewards, g.info["episode_return"][g.info["episode"]])
    tr.close()


def test_episode_advantages_broadcast_grpo_and_match_gigpo(tmp_path):
    tr = _trainer(tmp_path)
    (g,) = multiturn_groups(tr.fresh.draw(1), step=0, round=0, ctx=tr.ctx)[0]
    g.info["episode_return"] = np.array([1.0, 0.0, 0.5])  # distinct returns: a non-trivial group
    a = episode_group_advantages("grpo", g, 1e-6, 1, {})
    want = group_advantages("grpo", [[1.0, 0.0, 0.5]])[0]
    np.testing.assert_allclose(a, want[g.info["episode"]])
    p = {"gamma": 0.9, "step_weight": 0.5}
    got = episode_group_advantages("gigpo", g, 1e-6, 1, p)
    ref = gigpo_advantages(np.zeros(g.size, dtype=int), g.info["episode"], g.info["turn"], g.info["step_reward"],
                           g.info["anchor"], GiGPOParams(gamma=0.9, step_weight=0.5), penalty=g.info["penalty"]).advantage
    np.testing.assert_array_equal(got, ref)
    with pytest.raises(ValueError, match=r"algo.advantage_params: unknown key\(s\) \[.gama.\]"):
        episode_group_advantages("gigpo", g, 1e-6, 1, {"gama": 0.9})
    tr.close()


def test_gigpo_refuses_single_turn_groups(tmp_path):
    tr = make_trainer(str(tmp_path), steps=1, algo=AlgoConfig(advantage="gigpo"))
    with pytest.raises(ValueError, match="'gigpo' needs multi-turn episode groups"):
        tr.fit()
    tr.close()


def test_a_restarted_state_continues_from_its_snapshot_with_its_history(tmp_path):
    tr = _trainer(tmp_path)
    task = tr.task
    p = task.problems("train")[0]
    env = task.make_env()
    obs0 = env.reset(task.seed_of(p))
    actions = env.expert_actions(task.seed_of(p))[:2]
    history = []
    obs = obs0
    for a in actions:
        history.append({"observation": obs, "action": a})
        obs = env.step(a)[0]
    s = StartState(tr.codec.encode(p.prompt), p, history=tuple(history), snapshot=env.snapshot())
    (g,) = multiturn_groups([s], step=0, round=0, ctx=tr.ctx)[0]
    assert g.info["turn"].min() == len(actions)  # turns count from the start of the environment episode
    from llm_harness.envs.prompt import Turn

    want = render_agent_prompt(env.instruction, [Turn(h["observation"], h["action"]) for h in history], obs, window=1)
    assert tr.codec.decode(g.context(0)) == want
    assert g.info["anchor"][0] == obs
    tr.close()


def test_agent_training_runs_and_resumes_bit_identically(tmp_path):
    def make(d, **run_kw):
        return _trainer(d, adv="gigpo", steps=3, plugins={"vsr": {"rho": 0.3, "window": 5}},
                        run=RunConfig(run_dir=str(d), checkpoint_every=1, progress=False, **run_kw))

    _, _, rows = check_resume_is_bit_identical(make, tmp_path, stop_after=2, checkpoint_step=2)
    assert all(r["gen_samples"] == B * G for r in rows) and all(r["trained_samples"] > 0 for r in rows)


def test_a_prompt_longer_than_the_context_is_refused(tmp_path):
    task = get_task("env", env="sokoban", n_train=5, window=None)
    tr = make_trainer(str(tmp_path), task=task, steps=1,
                      model=ModelConfig(random_init=True, alphabet="text", hidden_size=16, num_layers=1, num_heads=2,
                                        max_context=300),
                      rollout=RolloutConfig(prompts_per_step=1, group_size=1, max_new_tokens=8, verify_timeout_s=0.0),
                      algo=AlgoConfig(collector="multiturn"), agent=AgentConfig(turn_tokens=5))
    with pytest.raises(ValueError, match=r"agent.turn_tokens: the prompt of episode 0 \(seed 10000, turn 0, window None\) has \d+ tokens; with 5 reply "
                       r"tokens it does not fit the model context of 300"):
        tr.fit()
    tr.close()


def test_vsr_eval_env_reports_success_over_the_fixed_seeds(tmp_path):
    import json

    from vsr.cli import main

    out = tmp_path / "ev"
    rc = main(["eval", "--env", "sokoban", "--model.random-init", "--model.alphabet", "text", "--model.max-context", "512",
               "--model.hidden-size", "16", "--model.num-layers", "1", "--model.num-heads", "2", "--n-problems", "3",
               "--k", "2", "--turn-tokens", "4", "--out-dir", str(out)])
    assert rc == 0
    res = json.loads((out / "eval.json").read_text())
    assert res["seeds"] == [0, 1, 2] and res["k"] == 2 and len(res["success_by_seed"]) == 3
    assert 0.0 <= res["ci_low"] <= res["success"] <= res["ci_high"] <= 1.0 and res["turns_mean"] > 0
    assert main(["eval", "--env", "chess", "--model.random-init", "--out-dir", str(out)]) == 2


def test_vsr_replays_interaction_states_of_successful_episodes(tmp_path):
    """VSR over interaction states: a successful episode's intermediate states enter
    the buffer with sigma-hat at alpha = i / L, a drawn state restarts G episodes from the restored
    environment with its history as context, and the restarts form their own group."""
    from llm_harness.methods.vsr import VSRConfig, VSRPlugin
    from llm_harness.trainer.step import Step
    from theory.prefix_scores import variance_hat

    tr = _trainer(tmp_path, plugins={"vsr": {"rho": 0.5, "window": 5}})
    (g,) = multiturn_groups(tr.fresh.draw(1), step=0, round=0, ctx=tr.ctx)[0]
    # make episode 1 the (first) successful one: a 3-turn success among G = 3 episodes
    L = int(np.sum(g.info["episode"] == 1))
    assert L >= 2
    g.info["episode_success"] = np.array([False, True, False])
    v = VSRPlugin(VSRConfig(rho=0.5, window=5), tr.ctx)
    v.after_step(Step(index=0, groups=(g,), kept=(g,), fresh=(g,)), tr.ctx)
    t = v.buffer[g.start.problem.id]
    np.testing.assert_array_equal(t.positions, np.arange(1, L))
    np.testing.assert_allclose(t.scores, variance_hat(np.arange(1, L) / L, 1 / 3, 1.0))
    c = v.claim(Step(index=1), 2, tr.ctx)
    (s,) = c.states
    i = int(s.meta["vsr_alpha"] * L + 0.5)
    rows = np.flatnonzero(g.info["episode"] == 1)
    assert len(s.history) == i and s.snapshot == g.info["snapshot"][rows[i]]
    assert [h["observation"] for h in s.history] == [g.info["anchor"][k] for k in rows[:i]]
    (rg,) = multiturn_groups([s], step=1, round=0, ctx=tr.ctx)[0]
    assert rg.info["turn"].min() == i and rg.info["anchor"][0] == g.info["anchor"][rows[i]]
    assert set(rg.info["episode"].tolist()) == {0, 1, 2}  # G restarts: one episode group of their own
    # and it survives a checkpoint (plain data)
    from llm_harness.trainer.checkpoint import check_plain

    state = v.state_dict()
    check_plain(state)
    w = VSRPlugin(VSRConfig(rho=0.5, window=5), tr.ctx)
    w.load_state_dict(state)
    from llm_harness.trainer.data import start_state_to_plain

    assert [start_state_to_plain(x) for x in w.claim(Step(index=1), 2, tr.ctx).states] == [start_state_to_plain(s)]
    tr.close()


def test_static_reset_control_restarts_from_expert_episode_states(tmp_path):
    """VSR's static-reset ablation for agents: the buffer holds the expert episodes'
    interaction states and never changes; a drawn state restores the environment mid-episode."""
    from llm_harness.methods.vsr import VSRConfig, VSRPlugin
    from llm_harness.trainer.step import Step

    tr = _trainer(tmp_path)
    v = VSRPlugin(VSRConfig(cold_start=True, cold_start_problems=4, insert_policy=False, recency=False, score="uniform",
                            rho=1.0), tr.ctx)
    assert len(v.buffer) >= 3 and all(t.source == "expert" and t.states for t in v.buffer.values())
    t = next(iter(v.buffer.values()))
    env = tr.task.make_env()
    obs = env.restore(t.states[1]["snapshot"])  # the state after one expert move
    assert t.states[1]["history"][0]["observation"] == tr.task.make_env().reset(tr.task.seed_of(t.problem))
    (s, *_) = v.claim(Step(index=0), 2, tr.ctx).states
    (g,) = multiturn_groups([s], step=0, round=0, ctx=tr.ctx)[0]
    assert g.info["turn"].min() == len(s.history) >= 1 and obs
    tr.close()


def test_validation_of_an_agent_is_success_over_the_fixed_seeds(tmp_path):
    """``validation.every`` on an env task evaluates episodes (not ``task.verify``): avg@k is the success
    rate over the first ``n_problems`` evaluation seeds, equal to ``evaluate_agent`` on them."""
    from llm_harness.trainer.config import ValidationConfig
    from llm_harness.trainer.multiturn import evaluate_agent
    from vsr_util.seeding import derive_seed

    tr = _trainer(tmp_path, steps=1, validation=ValidationConfig(every=1, n_problems=3, k=2))
    (row,) = tr.fit()
    assert row["val_avg_at_2"] == row["val_success"] and 0.0 <= row["val_ci_low"] <= row["val_success"] <= row["val_ci_high"]
    assert row["val_turns_mean"] >= 1 and "val_pass_at_2" in row
    ev = evaluate_agent(tr.backend, tr.codec, tr.task, tr.task.problems("validation")[:3], k=2, temperature=1.0, top_p=1.0,
                        turn_tokens=5, seed=derive_seed(0, 0x7A1, 0), max_turns=4)
    assert ev["seeds"] == [0, 1, 2] and ev["n_problems"] == 3 and len(ev["success_by_seed"]) == 3
    assert ev["turns_mean"] <= 4 and ev["new_tokens"] <= 3 * 2 * 4 * 5
    tr.close()


def test_shared_prefix_logprobs_equal_the_plain_pass_with_gradients(tmp_path):
    """``rollout.share_prefix`` in the loss forward: the rows' common instruction runs once; log-probs,
    entropies and gradients equal the unshared pass (float rounding), and the shared length stops
    before the first target."""
    import torch

    from llm_harness.trainer.modeling import _shared_length, sequence_logprobs

    tr = _trainer(tmp_path)
    groups = multiturn_groups(tr.fresh.draw(2), step=0, round=0, ctx=tr.ctx)[0]
    batch = build_batch([g.with_advantages(np.ones(g.size)) for g in groups], tr.codec.pad_token_id)
    n = _shared_length(batch.input_ids, batch.loss_mask)
    first = int(batch.loss_mask.to(torch.int64).argmax(dim=1).min())
    assert 0 < n <= first and not batch.loss_mask[:, :n].any()
    out = []
    for share in (False, True):
        tr.model.zero_grad(set_to_none=True)
        lp, ent = sequence_logprobs(tr.model, batch.input_ids, batch.attention_mask, batch.loss_mask, share_prefix=share)
        (lp * batch.loss_mask).sum().backward()
        out.append((lp.detach(), ent, [p.grad.clone() for p in tr.model.parameters()]))
    (lp0, e0, g0), (lp1, e1, g1) = out
    torch.testing.assert_close(lp1, lp0, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(e1, e0, rtol=1e-5, atol=1e-5)
    for a, b in zip(g0, g1):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)
    assert np.count_nonzero(lp0.numpy()) == int(batch.loss_mask.sum())
    tr.close()


def test_agent_curve_writes_the_plotted_numbers(tmp_path):
    import csv
    import json

    from llm_harness.trainer.agent_curve import plot_agent_run

    run = tmp_path / "run"
    run.mkdir()
    rows = [{"step": s, "accuracy_fresh": 0.1 * s, "success_mixed_frac_fresh": 0.5} for s in range(3)]
    rows[-1].update(val_success=0.3, val_ci_low=0.2, val_ci_high=0.4)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    png = plot_agent_run(run, tmp_path / "fig", title="t", base={"success": 0.2, "ci_low": 0.1, "ci_high": 0.3})
    assert png.name == "curve.png" and png.is_file() and not (tmp_path / "fig" / "curve.pdf").exists()
    table = list(csv.DictReader((tmp_path / "fig" / "curve.csv").open()))
    assert [int(t["update"]) for t in table] == [0, 1, 2, 3]
    assert float(table[0]["val_success"]) == 0.2 and float(table[3]["val_success"]) == 0.3
    assert float(table[2]["train_success_fresh"]) == pytest.approx(0.1)
    with pytest.raises(ValueError, match="no metrics"):
        plot_agent_run(tmp_path / "nothing", tmp_path / "fig2", title="t")


def test_vsr_eval_env_takes_the_level_and_budget(tmp_path):
    """``vsr eval --env babyai --level L --max-steps N`` evaluates that level under that budget (both go
    into ``env_params`` and the report); contradictions and agent-only options without an env are refused."""
    import json

    from llm_harness.trainer.config import EvalConfig
    from vsr.cli import main

    pytest.importorskip("minigrid")
    out = tmp_path / "ev"
    rc = main(["eval", "--env", "babyai", "--level", "MiniBoss", "--max-steps", "3", "--model.random-init",
               "--model.alphabet", "text", "--model.max-context", "2048", "--model.hidden-size", "16",
               "--model.num-layers", "1", "--model.num-heads", "2", "--n-problems", "2", "--k", "1",
               "--turn-tokens", "2", "--window", "0", "--out-dir", str(out)])
    assert rc == 0
    res = json.loads((out / "eval.json").read_text())
    assert res["env_params"] == {"level": "MiniBoss", "max_steps": 3}
    assert 0 < res["turns_mean"] <= 3
    assert EvalConfig(env="babyai", env_params={"level": "SynthLoc"}, max_steps=16).env_params == {"level": "SynthLoc", "max_steps": 16}
    with pytest.raises(ValueError, match="contradicts"):
        EvalConfig(env="babyai", env_params={"level": "SynthLoc"}, level="MiniBoss")
    with pytest.raises(ValueError, match="only for agents"):
        EvalConfig(max_steps=16)
