"""GiGPO advantages (``llm_harness.trainer.gigpo``).

Checked four ways: a hand-worked example, a deliberately slow looped reference written from the
definitions (hypothesis, random batches in random order), derived properties (permutation
invariance, identical episodes, ω = 0 is GRPO, mean_std_norm vs mean_norm, singletons), and a
float64 transcription of verl-agent's torch functions (``gigpo/core_gigpo.py``), compared to
1e-12 on inputs whose sums are exact.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from llm_harness.trainer.advantages import group_advantages
from llm_harness.trainer.gigpo import (
    NORM_MODES,
    GiGPOParams,
    anchor_groups,
    discounted_returns,
    episode_returns,
    gigpo_advantages,
)

TOL = 4 * math.sqrt(np.finfo(float).eps)  # rtol 4·sqrt(eps), absolute floor scaled to magnitude

# ---------------------------------------------------------------------------- hand-worked example
# Two episode groups, γ = 0.5 (columns: group, episode, turn, reward, anchor, penalty):
#
# group 0 (G = 2):  ep 0: (t0, r 0, "A") (t1, r 0, "B") (t2, r 1, "C")      R = 1
#                   ep 1: (t0, r 0, "A") (t1, r 0, "D")                      R = 0
# group 1 (G = 3):  ep 2: (t0, r 0, "A") (t1, r 1, "A", penalty 0.1)        R = 1 (revisits "A")
#                   ep 3: (t0, r 1, "A")                                     R = 1
#                   ep 4: (t0, r 0, "A") (t1, r 0, "E")                      R = 0
#
# step values v = G_t − p (the penalty is not discounted back: ep 2's t0 keeps 0.5, not 0.45):
#   ep 0: 0.25, 0.5, 1   ep 1: 0, 0   ep 2: 0.5, 1 − 0.1 = 0.9   ep 3: 1   ep 4: 0, 0
# episode scores s = R − p: ep 0: 1, 1, 1  ep 1: 0, 0  ep 2: 1, 0.9  ep 3: 1  ep 4: 0, 0
GRP = [0, 0, 0, 0, 0, 1, 1, 1, 1, 1]
EP = [0, 0, 0, 1, 1, 2, 2, 3, 4, 4]
TURN = [0, 1, 2, 0, 1, 0, 1, 0, 0, 1]
REW = [0, 0, 1, 0, 0, 0, 1, 1, 0, 0]
ANCHOR = ["A", "B", "C", "A", "D", "A", "A", "A", "A", "E"]
PEN = [0, 0, 0, 0, 0, 0, 0.1, 0, 0, 0]


def test_hand_worked_example_mean_norm():
    """mean_norm, ω = 1.

    A^E, episode_stats="steps" (verl-agent default): group 0 rows s = [1,1,1,0,0], μ = 0.6 →
    ep 0: +0.4, ep 1: −0.6; group 1 rows s = [1,0.9,1,0,0], μ = 0.58 → 0.42, 0.32 | 0.42 | −0.58 ×2.
    A^S: group 0 "A" = {0.25, 0}, μ = 0.125 → ±0.125; "B", "C", "D" singletons → 0.
    group 1 "A" = {0.5, 0.9, 1, 0} (ep 2 twice, ep 3, ep 4), μ = 0.6 → −0.1, 0.3, 0.4, −0.6; "E" → 0.
    A = A^E + A^S.
    """
    res = gigpo_advantages(GRP, EP, TURN, REW, ANCHOR, GiGPOParams(gamma=0.5), penalty=PEN)
    np.testing.assert_allclose(res.step_value, [0.25, 0.5, 1, 0, 0, 0.5, 0.9, 1, 0, 0], rtol=1e-12)
    np.testing.assert_allclose(res.episode_return, [1, 1, 1, 0, 0, 1, 1, 1, 0, 0])
    np.testing.assert_allclose(res.episode_advantage, [0.4, 0.4, 0.4, -0.6, -0.6, 0.42, 0.32, 0.42, -0.58, -0.58],
                               rtol=1e-12)
    np.testing.assert_allclose(res.step_advantage, [0.125, 0, 0, -0.125, 0, -0.1, 0.3, 0.4, -0.6, 0], atol=1e-15)
    np.testing.assert_allclose(res.advantage, [0.525, 0.4, 0.4, -0.725, -0.6, 0.32, 0.62, 0.82, -1.18, -0.58],
                               rtol=1e-12)
    assert res.step_group_size.tolist() == [2, 1, 1, 2, 1, 4, 4, 4, 4, 1]


def test_hand_worked_example_trajectory_statistics():
    """episode_stats="trajectories": one sample per trajectory, its mean score.

    group 0: samples {1, 0}, μ = 0.5 → ±0.5. group 1: samples {ep 2: (1 + 0.9)/2 = 0.95, 1, 0},
    μ = 0.65 → ep 2: 1 − 0.65 = 0.35, 0.9 − 0.65 = 0.25; ep 3: 0.35; ep 4: −0.65 ×2.
    """
    res = gigpo_advantages(GRP, EP, TURN, REW, ANCHOR, GiGPOParams(gamma=0.5, episode_stats="trajectories"),
                           penalty=PEN)
    np.testing.assert_allclose(res.episode_advantage, [0.5, 0.5, 0.5, -0.5, -0.5, 0.35, 0.25, 0.35, -0.65, -0.65],
                               rtol=1e-12)


def test_hand_worked_example_mean_std_norm():
    """mean_std_norm, ε = 1e-6, Bessel std.

    group 0 rows [1,1,1,0,0]: Σ(x − 0.6)² = 3·0.16 + 2·0.36 = 1.2, σ = sqrt(1.2/4) = sqrt(0.3) →
    ep 0: 0.4/(sqrt(0.3) + ε), ep 1: −0.6/(sqrt(0.3) + ε).
    group 0 anchor "A" = {0.25, 0}: σ = 0.25/sqrt(2) → ±0.125/(0.25/sqrt(2) + ε) ≈ ±1/sqrt(2).
    """
    res = gigpo_advantages(GRP, EP, TURN, REW, ANCHOR, GiGPOParams(gamma=0.5, mode="mean_std_norm"), penalty=PEN)
    s0 = math.sqrt(0.3) + 1e-6
    np.testing.assert_allclose(res.episode_advantage[:5], [0.4 / s0] * 3 + [-0.6 / s0] * 2, rtol=1e-12)
    sa = 0.25 / math.sqrt(2) + 1e-6
    np.testing.assert_allclose(res.step_advantage[:5], [0.125 / sa, 0, 0, -0.125 / sa, 0], rtol=1e-12)


def test_discounted_returns_by_hand_at_default_gamma():
    # rewards 0, 0, 1 with γ = 0.95: G = 0.9025, 0.95, 1; γ = 0 gives the rewards, γ = 1 suffix sums
    np.testing.assert_allclose(discounted_returns([7, 7, 7], [0, 1, 2], [0, 0, 1]), [0.9025, 0.95, 1.0], rtol=1e-15)
    np.testing.assert_allclose(discounted_returns([7, 7, 7], [2, 0, 1], [1, 2, 3], gamma=0.0), [1, 2, 3])
    np.testing.assert_allclose(discounted_returns([7, 7, 7], [2, 0, 1], [1, 2, 3], gamma=1.0), [1, 6, 4])
    np.testing.assert_allclose(episode_returns([5, 6, 5], [1.0, 2.0, 3.0]), [4, 2, 4])


# ---------------------------------------------------------------------------- slow looped reference
def reference(grp, ep, turn, rew, anchor, pen, gamma, mode, eps, omega, episode_stats):
    """Plain loops over dicts, written from the definitions (module doc of ``gigpo``)."""
    k_all = range(len(grp))
    steps_of = defaultdict(list)
    for k in k_all:
        steps_of[ep[k]].append(k)
    ret, value = {}, {}
    for e, ks in steps_of.items():
        ks = sorted(ks, key=lambda k: turn[k])
        running = 0.0
        for k in reversed(ks):
            running = rew[k] + gamma * running
            value[k] = running - pen[k]
        for k in ks:
            ret[k] = sum(rew[j] for j in ks)

    def stats(xs, singleton_mean):
        if len(xs) == 1:
            return singleton_mean, 1.0
        m = sum(xs) / len(xs)
        return m, math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))

    def norm(x, m, s):
        return x - m if mode == "mean_norm" else (x - m) / (s + eps)

    a_e, a_s = [0.0] * len(grp), [0.0] * len(grp)
    for g in set(grp):
        ks = [k for k in k_all if grp[k] == g]
        if episode_stats == "steps":
            samples = [ret[k] - pen[k] for k in ks]
        else:
            samples = [sum(ret[j] - pen[j] for j in steps_of[e]) / len(steps_of[e]) for e in {ep[k] for k in ks}]
        m, s = stats(samples, 0.0)
        for k in ks:
            a_e[k] = norm(ret[k] - pen[k], m, s)
        for a in {anchor[k] for k in ks}:
            members = [k for k in ks if anchor[k] == a]
            if len(members) == 1:
                continue  # singleton anchor group: step advantage 0
            m, s = stats([value[k] for k in members], None)
            for k in members:
                a_s[k] = norm(value[k], m, s)
    return np.array([a_e[k] + omega * a_s[k] for k in k_all]), np.array(a_e), np.array(a_s)


@st.composite
def batches(draw, rewards=None, penalties=(0.0, 0.0, 0.1), anchors=("A", "B", "C", ("x", 1))):
    """Episode groups of 1–4 episodes of 1–5 turns (turns may start > 0), steps in random order."""
    rewards = rewards if rewards is not None else st.one_of(st.sampled_from([0.0, 1.0, -0.1, 0.5, 10.0]),
                                   st.floats(-2, 2, allow_nan=False, allow_subnormal=False))
    rows, e = [], 0
    for g in range(draw(st.integers(1, 4))):
        for _ in range(draw(st.integers(1, 4))):
            t0 = draw(st.integers(0, 3))
            for j in range(draw(st.integers(1, 5))):
                rows.append((3 * g + 1, 10 * e + 2, t0 + j, draw(rewards), draw(st.sampled_from(anchors)),
                             draw(st.sampled_from(penalties))))
            e += 1
    perm = draw(st.permutations(range(len(rows))))
    return [list(c) for c in zip(*[rows[i] for i in perm])]


params_st = st.builds(
    GiGPOParams,
    gamma=st.one_of(st.sampled_from([0.0, 0.5, 0.95, 1.0]), st.floats(0, 1)),
    step_weight=st.sampled_from([0.0, 0.5, 1.0, 2.0]),
    mode=st.sampled_from(NORM_MODES.names()),
    episode_stats=st.sampled_from(["steps", "trajectories"]),
)


def _close(got, want):
    np.testing.assert_allclose(got, want, rtol=TOL, atol=TOL * (1 + np.abs(want).max(initial=0)))


@given(batches(), params_st)
def test_matches_looped_reference(batch, p):
    grp, ep, turn, rew, anc, pen = batch
    res = gigpo_advantages(grp, ep, turn, rew, anc, p, penalty=pen)
    want, want_e, want_s = reference(grp, ep, turn, rew, anc, pen, p.gamma, p.mode, p.eps, p.step_weight,
                                     p.episode_stats)
    _close(res.episode_advantage, want_e)
    _close(res.step_advantage, want_s)
    _close(res.advantage, want)


# ---------------------------------------------------------------------------- properties
@given(batches(), params_st, st.randoms(use_true_random=False))
def test_permuting_the_steps_leaves_each_advantage_unchanged(batch, p, rnd):
    a = gigpo_advantages(*batch[:5], p, penalty=batch[5]).advantage
    perm = list(range(len(batch[0])))
    rnd.shuffle(perm)
    shuffled = [[col[i] for i in perm] for col in batch]
    b = gigpo_advantages(*shuffled[:5], p, penalty=shuffled[5]).advantage
    np.testing.assert_array_equal(b, a[perm])  # bit for bit: computed in a canonical order


@given(st.integers(1, 6), st.integers(1, 6), st.lists(st.floats(-3, 3, allow_subnormal=False), min_size=6, max_size=6),
       params_st)
def test_a_group_of_identical_episodes_gives_exactly_zero(g, length, rewards, p):
    # G identical trajectories (same rewards, same anchors): every advantage is exactly 0
    grp = [5] * (g * length)
    ep = [e for e in range(g) for _ in range(length)]
    turn = list(range(length)) * g
    rew = rewards[:length] * g
    anchor = [f"s{t}" for t in range(length)] * g
    res = gigpo_advantages(grp, ep, turn, rew, anchor, p)
    if g == 1 and length == 1 and p.episode_stats == "steps" or g == 1 and p.episode_stats == "trajectories":
        return  # a single-sample episode group keeps its score (mean 0, std 1; next test)
    assert np.all(res.advantage == 0.0)


def test_single_sample_episode_group_gets_mean_zero_std_one():
    res = gigpo_advantages([0], [0], [0], [0.7], ["A"])
    assert res.advantage.tolist() == [0.7] and res.step_advantage.tolist() == [0.0]
    res = gigpo_advantages([0], [0], [0], [0.7], ["A"], GiGPOParams(mode="mean_std_norm"))
    assert res.advantage[0] == pytest.approx(0.7 / (1 + 1e-6), rel=1e-15)


@given(batches(), st.sampled_from([0.0, 0.95, 1.0]), st.sampled_from(["steps", "trajectories"]))
def test_mean_std_norm_is_mean_norm_divided_by_the_group_std(batch, gamma, stats):
    grp, ep, turn, rew, anc, pen = batch
    a = gigpo_advantages(*batch[:5], GiGPOParams(gamma=gamma, episode_stats=stats), penalty=pen)
    b = gigpo_advantages(*batch[:5], GiGPOParams(gamma=gamma, episode_stats=stats, mode="mean_std_norm"), penalty=pen)
    for part in ("episode_advantage", "step_advantage"):
        x, y = getattr(a, part), getattr(b, part)
        groups = np.asarray(grp) if part == "episode_advantage" else a.step_group
        for g in np.unique(groups):
            i = groups == g
            assert np.all(np.sign(x[i][np.abs(x[i]) > 1e-9]) == np.sign(y[i][np.abs(x[i]) > 1e-9]))
            ratio = y[i][np.abs(x[i]) > 1e-9] / x[i][np.abs(x[i]) > 1e-9]
            np.testing.assert_allclose(ratio, ratio[:1].repeat(ratio.size), rtol=1e-6)  # one 1/(σ+ε) per group


def test_two_sample_groups_pin_the_bessel_std():
    # values {a, b}: mean_norm ±(a−b)/2; Bessel σ = |a−b|/sqrt(2) → ±1/sqrt(2) (population σ: ±1)
    res = gigpo_advantages([0, 0], [0, 1], [0, 0], [3.0, 1.0], ["A", "A"], GiGPOParams(mode="mean_std_norm"))
    np.testing.assert_allclose(res.episode_advantage, [1 / (math.sqrt(2) + 1e-6), -1 / (math.sqrt(2) + 1e-6)],
                               rtol=1e-12)
    np.testing.assert_allclose(res.step_advantage, res.episode_advantage, rtol=1e-12)


@given(batches(anchors=tuple("ABCDEFGHIJKLMNOPQRSTUVWXYZ")), params_st)
def test_singleton_anchor_groups_get_zero_step_advantage(batch, p):
    res = gigpo_advantages(*batch[:5], p, penalty=batch[5])
    single = res.step_group_size == 1
    assert np.all(res.step_advantage[single] == 0.0)
    assert np.all(res.advantage[single] == res.episode_advantage[single])
    unique = [f"{g}/{e}/{t}" for g, e, t in zip(*batch[:3])]  # every anchor distinct: A = A^E for any ω
    res = gigpo_advantages(*batch[:4], unique, p, penalty=batch[5])
    assert np.all(res.step_advantage == 0.0) and np.all(res.advantage == res.episode_advantage)


@given(batches(penalties=(0.0,)), st.sampled_from(["mean_norm", "mean_std_norm"]))
def test_omega_zero_is_episode_level_grpo(batch, mode):
    grp, ep, turn, rew, anc, _ = batch
    res = gigpo_advantages(grp, ep, turn, rew, anc, GiGPOParams(step_weight=0.0, mode=mode))
    traj = gigpo_advantages(grp, ep, turn, rew, anc, GiGPOParams(step_weight=0.0, mode=mode,
                                                                 episode_stats="trajectories"))
    assert np.all(res.advantage == res.episode_advantage)
    est = "drgrpo" if mode == "mean_norm" else "grpo"  # the project's estimators; ddof 1, ε 1e-6
    R = dict(zip(ep, res.episode_return))
    for g in set(grp):
        rows = [k for k in range(len(grp)) if grp[k] == g]
        trajs = sorted({ep[k] for k in rows})
        if len(rows) > 1:  # "steps": GRPO over the group's step rows, each carrying R(τ)
            _close(res.advantage[rows], group_advantages(est, [[R[ep[k]] for k in rows]])[0])
        if len(trajs) > 1:  # "trajectories": GRPO over the G episode returns, broadcast to steps
            per_traj = dict(zip(trajs, group_advantages(est, [[R[e] for e in trajs]])[0]))
            _close(traj.advantage[rows], np.array([per_traj[ep[k]] for k in rows]))


def test_an_episode_group_restarted_mid_episode():
    # A replayed state after 3 actions: its G = 2 episodes form a new episode group (id 1) whose
    # turns count on from 3. Same advantages as if they had started at turn 0, and their anchor
    # "B" does not join group 0's "B" (same observation, other group).
    grp = [0, 0, 0, 0, 1, 1, 1, 1]
    ep = [0, 0, 1, 1, 2, 2, 3, 3]
    rew = [0, 1, 0, 0, 0, 1, 0, 0.5]
    anchor = ["A", "B", "A", "B", "B", "C", "B", "D"]
    res = gigpo_advantages(grp, ep, [0, 1, 0, 1, 3, 4, 3, 4], rew, anchor)
    alone = gigpo_advantages(grp[4:], ep[4:], [0, 1, 0, 1], rew[4:], anchor[4:])
    np.testing.assert_array_equal(res.advantage[4:], alone.advantage)
    assert res.step_group_size.tolist() == [2, 2, 2, 2, 2, 1, 2, 1]
    assert len(set(res.step_group[[1, 3]]) & set(res.step_group[[4, 6]])) == 0


def test_anchor_groups_are_keyed_by_episode_group_and_exact_anchor():
    ids = anchor_groups([0, 0, 1, 0, 0], ["x", "x", "x", "x ", ("x",)])
    assert ids.tolist() == [0, 0, 1, 2, 3]


def test_empty_batch():
    res = gigpo_advantages([], [], [], [], [])
    assert res.advantage.shape == (0,) and res.step_group.shape == (0,)


@pytest.mark.parametrize(
    "kw, where",
    [
        (dict(reward=[0.0, 1.0]), "reward"),
        (dict(anchor=["A"]), "anchor"),
        (dict(turn=[0, 1, 0]), "turn"),
        (dict(penalty=[0.1]), "penalty"),
        (dict(turn=[0, 2, 0, 1]), "turn"),  # a gap
        (dict(turn=[0, 0, 0, 1]), "turn"),  # a repeat
        (dict(episode_group=[0, 1, 0, 0]), "episode"),  # a trajectory in two groups
        (dict(episode=[0.0, 0.0, 1.0, 1.0]), "episode"),
        (dict(reward=[0.0, float("nan"), 0.0, 1.0]), "reward"),
        (dict(anchor=[["A"], "B", "A", "B"]), "anchor"),
        (dict(params="mean_norm"), "params"),
    ],
)
def test_bad_input_names_the_argument(kw, where):
    args = dict(episode_group=[0, 0, 0, 0], episode=[0, 0, 1, 1], turn=[0, 1, 0, 1], reward=[0.0, 1.0, 0.0, 0.0],
                anchor=["A", "B", "A", "B"])
    args.update(kw)
    with pytest.raises(ValueError, match=f"^{where}"):
        gigpo_advantages(**args)


@pytest.mark.parametrize(
    "kw, where",
    [(dict(gamma=1.5), "gamma"), (dict(gamma=-0.1), "gamma"), (dict(mode="mean"), "mode"),
     (dict(step_weight=-1.0), "step_weight"), (dict(eps=0.0), "eps"), (dict(episode_stats="episodes"), "episode_stats"),
     (dict(gamma=float("nan")), "gamma")],
)
def test_bad_params_name_the_field(kw, where):
    with pytest.raises(ValueError, match=f"^{where}"):
        GiGPOParams(**kw)


def test_discounted_returns_checks_gamma():
    with pytest.raises(ValueError, match="^gamma"):
        discounted_returns([0], [0], [1.0], gamma=2.0)


# ---------------------------------------------------------------------------- verl-agent transcription
# TRANSCRIPTION FOR CHECKING ONLY — not project code. verl-agent ``gigpo/core_gigpo.py``
# (``compute_step_discounted_returns``, ``episode_norm_reward``, ``build_step_group`` exact-match
# branch, ``step_norm_reward``, ``compute_gigpo_outcome_advantage``) and ``ray_trainer.py``
# ``apply_invalid_action_penalty``, transcribed with two changes: float64 instead of float32 (also
# the singleton constants ``torch.tensor(0.0)``, ``torch.tensor(1.0)``: in float32, ``1.0 + 1e-6``
# rounds to 1.00000095), and a counter instead of ``uuid4`` for the step-group labels. Rows come in verl-agent's batch order
# (trajectory by trajectory, turns in order; ``gather_rollout_data``).
F64 = torch.float64


def verl_step_discounted_returns(rewards, traj_uids, gamma):
    returns_by_traj = {}
    for uid in np.unique(traj_uids):
        traj_indices = np.where(traj_uids == uid)[0]
        traj_rewards = rewards[traj_indices]
        traj_returns = np.zeros_like(traj_rewards)
        running_return = 0
        for t in reversed(range(len(traj_rewards))):
            running_return = traj_rewards[t] + gamma * running_return
            traj_returns[t] = running_return
        returns_by_traj[uid] = traj_returns
    all_returns = np.zeros_like(rewards)
    for i, uid in enumerate(traj_uids):
        traj_indices = np.where(traj_uids == uid)[0]
        idx_in_traj = np.where(traj_indices == i)[0][0]
        all_returns[i] = returns_by_traj[uid][idx_in_traj]
    return torch.tensor(all_returns, dtype=torch.float64)


def verl_normalise_rows(scores, index, id2mean, id2std, epsilon, remove_std, response_mask):
    """The closing loop both verl-agent normalisers share (factored out here, identical there)."""
    response_length = response_mask.shape[-1]
    for i in range(scores.shape[0]):
        if remove_std:
            scores[i] = scores[i] - id2mean[index[i]]
        else:
            scores[i] = (scores[i] - id2mean[index[i]]) / (id2std[index[i]] + epsilon)
    return scores.unsqueeze(-1).tile([1, response_length]) * response_mask


def verl_episode_norm_reward(token_level_rewards, response_mask, index, traj_index, epsilon, remove_std,
                             compute_mean_std_cross_steps=True):
    scores = token_level_rewards.sum(dim=-1)
    id2score, id2mean, id2std, seen_pairs = defaultdict(list), {}, {}, set()
    for i in range(scores.shape[0]):
        if (index[i], traj_index[i]) in seen_pairs:
            continue
        id2score[index[i]].append(scores[i])
        if not compute_mean_std_cross_steps:
            seen_pairs.add((index[i], traj_index[i]))
    for idx in id2score:
        if len(id2score[idx]) == 1:
            id2mean[idx], id2std[idx] = torch.tensor(0.0, dtype=F64), torch.tensor(1.0, dtype=F64)
        else:
            id2mean[idx] = torch.mean(torch.tensor(id2score[idx]))
            id2std[idx] = torch.std(torch.tensor([id2score[idx]]))
    return verl_normalise_rows(scores, index, id2mean, id2std, epsilon, remove_std, response_mask)


def verl_build_step_group(anchor_obs, index):
    step_group_uids = np.empty(len(anchor_obs), dtype=object)
    counter = 0
    for idx in np.unique(index):
        indices = np.where(index == idx)[0]
        clusters = defaultdict(list)
        for i, obs in enumerate(anchor_obs[indices]):
            clusters[obs].append(indices[i])  # to_hashable(str or tuple) is the identity here
        for _, original_indices in clusters.items():
            counter += 1
            for original_idx in original_indices:
                step_group_uids[original_idx] = f"uid{counter}"
    return step_group_uids


def verl_step_norm_reward(step_rewards, response_mask, index, epsilon, remove_std):
    scores = step_rewards.clone()
    id2score, id2mean, id2std = defaultdict(list), {}, {}
    for i in range(scores.shape[0]):
        id2score[index[i]].append(scores[i])
    for idx in id2score:
        id2mean[idx] = torch.mean(torch.tensor(id2score[idx]))
        id2std[idx] = torch.tensor(1.0, dtype=F64) if len(id2score[idx]) == 1 else torch.std(torch.tensor([id2score[idx]]))
    return verl_normalise_rows(scores, index, id2mean, id2std, epsilon, remove_std, response_mask)


def verl_gigpo(batch, valid_len, gamma, mode, omega, cross_steps, eps=1e-6):
    """The verl-agent pipeline on rows in batch order; returns the advantage of each row."""
    grp, ep, rew, pen = (np.asarray(batch[i]) for i in (0, 1, 3, 5))
    rew, pen = rew.astype(np.float64), pen.astype(np.float64)
    n, length = len(grp), 3
    anc = np.empty(n, dtype=object)  # verl-agent's anchor_obs: an object array of observations
    anc[:] = batch[4]
    step_rewards = verl_step_discounted_returns(rew, ep, gamma)  # at rollout time
    episode_rewards = {e: rew[ep == e].sum() for e in np.unique(ep)}
    token_level_scores = torch.zeros(n, length, dtype=torch.float64)  # EpisodeRewardManager
    response_mask = torch.zeros(n, length, dtype=torch.float64)
    for i in range(n):
        response_mask[i, : valid_len[i]] = 1
        token_level_scores[i, valid_len[i] - 1] = episode_rewards[ep[i]]
        token_level_scores[i, valid_len[i] - 1] -= pen[i]  # apply_invalid_action_penalty (coef · invalid)
        step_rewards[i] -= pen[i]
    remove_std = mode == "mean_norm"
    episode_adv = verl_episode_norm_reward(token_level_scores, response_mask, grp, ep, eps, remove_std, cross_steps)
    step_adv = verl_step_norm_reward(step_rewards, response_mask, verl_build_step_group(anc, grp), eps, remove_std)
    scores = episode_adv + omega * step_adv
    return scores[:, 0].numpy(), scores, response_mask


DYADIC = st.sampled_from([0.0, 0.25, 0.5, 1.0, -0.125, 2.0])


@st.composite
def verl_cases(draw):
    batch = draw(batches(rewards=DYADIC, penalties=(0.0, 0.0, 0.125)))
    order = np.lexsort((batch[2], batch[1]))  # verl-agent's batch order: by trajectory, turns in order
    batch = [[c[i] for i in order] for c in batch]
    mode = draw(st.sampled_from(["mean_norm", "mean_std_norm"]))
    # exact sums for mean_std_norm (a rounding residue of an all-equal group would be divided by ε)
    gamma = draw(st.sampled_from([0.5, 0.75, 1.0] + ([0.95, 0.0] if mode == "mean_norm" else [])))
    stats = draw(st.sampled_from(["steps", "trajectories"] if not any(batch[5]) else ["steps"]))
    valid = draw(st.lists(st.integers(1, 3), min_size=len(batch[0]), max_size=len(batch[0])))
    return batch, GiGPOParams(gamma=gamma, mode=mode, step_weight=draw(st.sampled_from([0.0, 0.5, 1.0])),
                              episode_stats=stats), valid


@given(verl_cases())
def test_matches_a_transcription_of_verl_agent(case):
    batch, p, valid = case
    want, tokens, mask = verl_gigpo(batch, valid, p.gamma, p.mode, p.step_weight, p.episode_stats == "steps")
    got = gigpo_advantages(*batch[:5], p, penalty=batch[5]).advantage
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    # every response token of a step carries the step's scalar (the caller broadcasts)
    torch.testing.assert_close(tokens, torch.from_numpy(got)[:, None] * mask, rtol=1e-12, atol=1e-12)
