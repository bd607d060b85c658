"""The toolkit's estimators registered with the real verl 0.9.1 equal verl's own formulas and the
toolkit's functions on the same groups. Runs in ``.venv-verl`` (``make verl-test``)."""

from __future__ import annotations

import numpy as np
import pytest

verl = pytest.importorskip("verl")
torch = pytest.importorskip("torch")

from verl.protocol import DataProto  # noqa: E402
from verl.trainer.ppo import core_algos  # noqa: E402
from verl.trainer.ppo.ray_trainer import compute_advantage  # noqa: E402

from llm_harness.integrations.verl.estimators import ESTIMATORS, NoveltyMemory  # noqa: E402
from llm_harness.embedders import EmbedContext, build_embedder  # noqa: E402
from llm_harness.methods.extra import shaped_advantages  # noqa: E402
from llm_harness.trainer.advantages import group_advantages  # noqa: E402
from llm_harness.trainer.gigpo import GiGPOParams, gigpo_advantages  # noqa: E402
from llm_harness.trainer.losses import k3_kl  # noqa: E402
from theory.extra import novelty_bonus  # noqa: E402


def random_batch(seed: int, n_groups: int = 12, binary: bool = False, length: int = 7):
    """Rows of ``n_groups`` groups (sizes 2..9, rows interleaved), rewards on the last valid token."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(2, 10, size=n_groups)
    uids = np.array([f"u{g}" for g, s in enumerate(sizes) for _ in range(s)], dtype=object)
    rng.shuffle(uids)
    bs = uids.size
    lengths = rng.integers(1, length + 1, size=bs)
    mask = (np.arange(length)[None, :] < lengths[:, None]).astype(np.float64)
    r = rng.integers(0, 2, size=bs).astype(np.float64) if binary else rng.random(bs)
    tlr = np.zeros((bs, length))
    tlr[np.arange(bs), lengths - 1] = r
    return torch.tensor(tlr), torch.tensor(mask), uids, r


def groups_of(uids, r):
    order = list(dict.fromkeys(uids.tolist()))
    return order, [r[uids == u] for u in order]


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("binary", [False, True])
def test_default_grpo_equals_verls_compute_grpo_outcome_advantage(seed, binary):
    tlr, mask, uids, _ = random_batch(seed, binary=binary)
    ours, _ = ESTIMATORS["vsr_grpo"](token_level_rewards=tlr, response_mask=mask, index=uids)
    theirs, _ = core_algos.compute_grpo_outcome_advantage(tlr.clone(), mask, uids)
    assert ours.dtype == theirs.dtype == torch.float64
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=0, atol=1e-12)
    assert torch.count_nonzero(ours).item() > 0


@pytest.mark.parametrize("seed", range(6))
def test_drgrpo_equals_verl_grpo_without_std_normalisation(seed):
    tlr, mask, uids, _ = random_batch(seed, binary=seed % 2 == 0)
    ours, _ = ESTIMATORS["vsr_drgrpo"](token_level_rewards=tlr, response_mask=mask, index=uids)
    theirs, _ = core_algos.compute_grpo_outcome_advantage(tlr.clone(), mask, uids, norm_adv_by_std_in_grpo=False)
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=0, atol=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_rloo_equals_verls_rloo(seed):
    tlr, mask, uids, _ = random_batch(seed)
    ours, _ = ESTIMATORS["vsr_rloo"](token_level_rewards=tlr, response_mask=mask, index=uids)
    theirs, _ = core_algos.compute_rloo_outcome_advantage(tlr.clone(), mask, uids)
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=0, atol=1e-12)


def test_verls_dispatch_reaches_the_registered_estimator_with_the_same_numbers():
    """Through verl's own ``compute_advantage`` on a ``DataProto`` (the trainer's call path)."""
    tlr, mask, uids, _ = random_batch(3)
    data = DataProto.from_dict(tensors={"token_level_rewards": tlr, "response_mask": mask}, non_tensors={"uid": uids})
    a = compute_advantage(data, adv_estimator="vsr_grpo", config=None).batch["advantages"]
    data2 = DataProto.from_dict(tensors={"token_level_rewards": tlr.clone(), "response_mask": mask}, non_tensors={"uid": uids})
    b = compute_advantage(data2, adv_estimator="grpo").batch["advantages"]
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=0, atol=1e-12)
    assert core_algos.get_adv_estimator_fn("vsr_grpo") is ESTIMATORS["vsr_grpo"]


def test_population_std_through_config_differs_from_verl_by_the_bessel_factor():
    tlr, mask, uids, r = random_batch(5)
    cfg = {"vsr": {"std_ddof": 0}}
    ours, _ = ESTIMATORS["vsr_grpo"](token_level_rewards=tlr, response_mask=mask, index=uids, config=cfg)
    order, groups = groups_of(uids, r)
    want = np.zeros(len(r))
    for u, a in zip(order, group_advantages("grpo", groups, ddof=0)):
        want[uids == u] = a
    np.testing.assert_allclose(ours.numpy()[np.arange(len(r)), mask.numpy().sum(1).astype(int) - 1], want, atol=1e-12)
    with pytest.raises(ValueError, match="algorithm.vsr.*nope"):
        ESTIMATORS["vsr_grpo"](token_level_rewards=tlr, response_mask=mask, index=uids, config={"vsr": {"nope": 1}})


def test_singleton_and_zero_variance_groups_are_the_documented_departures():
    tlr = torch.tensor([[0.7], [1.0], [1.0], [0.2], [0.5]], dtype=torch.float64)
    mask = torch.ones_like(tlr)
    uids = np.array(["a", "b", "b", "c", "c"], dtype=object)
    ours, _ = ESTIMATORS["vsr_grpo"](token_level_rewards=tlr, response_mask=mask, index=uids)
    theirs, _ = core_algos.compute_grpo_outcome_advantage(tlr.clone(), mask, uids)
    assert ours[0, 0] == 0.0 and theirs[0, 0] == pytest.approx(0.7 / (1 + 1e-6))  # singleton: ours 0
    assert ours[1, 0] == ours[2, 0] == 0.0 == theirs[1, 0]  # zero variance: both 0
    np.testing.assert_allclose(ours[3:].numpy(), theirs[3:].numpy(), atol=1e-12)


def test_k3_kl_with_cap_equals_verls_low_var_kl_everywhere():
    g = torch.Generator().manual_seed(0)
    logp = -torch.rand(4000, generator=g, dtype=torch.float64) * 30
    ref = -torch.rand(4000, generator=g, dtype=torch.float64) * 30  # |ref - logp| up to 30: both clamps active
    ours = k3_kl(logp, ref, cap=10.0)
    theirs = core_algos.kl_penalty(logp, ref, "low_var_kl")
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=0, atol=1e-12)
    assert (theirs == 10).any() and (theirs < 1).any()


# ------------------------------------------------------------------ ExTra novelty


def _extra_batch(seed: int):
    fixed = np.random.default_rng(100)  # the same prompts every step: the memory carries over
    prompts = {f"p{k}": [int(t) for t in fixed.integers(3, 40, size=5)] for k in range(3)}
    rng = np.random.default_rng(seed)
    rows, uids = [], []
    for k, p in enumerate(prompts.values()):
        for i in range(6):
            resp = [int(t) for t in rng.integers(3, 12, size=int(rng.integers(4, 9)))]
            rows.append((p, resp, float(rng.random() < 0.6)))
            uids.append(f"u{k}")
    L = max(len(r[1]) for r in rows)
    mask = torch.tensor([[1.0] * len(r[1]) + [0.0] * (L - len(r[1])) for r in rows], dtype=torch.float64)
    tlr = torch.zeros_like(mask)
    for b, r in enumerate(rows):
        tlr[b, len(r[1]) - 1] = r[2]
    nt = {"prompt_ids": np.array([r[0] for r in rows] + [None], dtype=object)[:-1],
          "response_ids": np.array([r[1] for r in rows] + [None], dtype=object)[:-1]}
    return tlr, mask, np.array(uids, dtype=object), nt, rows


def test_extra_novelty_equals_the_toolkits_formula_across_steps():
    """GRPO + γ·1[R>0](1 − max cos) with siblings and the per-prompt memory, two steps in a row."""
    mem = NoveltyMemory()
    emb = build_embedder("ngram4", {}, EmbedContext(model=None, codec=None), "t")
    memory: dict[str, np.ndarray] = {}
    cfg = {"vsr": {"extra": {"gamma": 0.7}}}
    for step in range(2):
        tlr, mask, uids, nt, rows = _extra_batch(step)
        ours, _ = ESTIMATORS["vsr_extra_grpo"](token_level_rewards=tlr, response_mask=mask, index=uids, config=cfg,
                                              non_tensor_batch=nt, memory=mem)
        for u in dict.fromkeys(uids.tolist()):
            idx = np.flatnonzero(uids == u)
            r = np.array([rows[i][2] for i in idx])
            z = emb.embed([rows[i][0] for i in idx], [rows[i][1] for i in idx])
            key = tuple(rows[idx[0]][0])
            b = novelty_bonus(z, r > 0, memory.get(key))
            c = z[r > 0] / np.linalg.norm(z[r > 0], axis=1, keepdims=True)
            memory[key] = np.concatenate([memory[key], c])[-6:] if key in memory else c[-6:]
            want = shaped_advantages(group_advantages("grpo", [r])[0], r, b, 0.7)
            got = ours.numpy()[idx, [len(rows[i][1]) - 1 for i in idx]]
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)  # float32 memory, as in the toolkit
        assert any(np.any(v > 0) for v in mem.memory.values())
    assert step == 1 and len(mem.memory) == 3


def test_extra_with_gamma_zero_is_grpo_and_missing_inputs_are_named():
    tlr, mask, uids, nt, _ = _extra_batch(0)
    a, _ = ESTIMATORS["vsr_extra_grpo"](token_level_rewards=tlr, response_mask=mask, index=uids,
                                         config={"vsr": {"extra": {"gamma": 0.0}}}, non_tensor_batch=nt, memory=NoveltyMemory())
    b, _ = ESTIMATORS["vsr_grpo"](token_level_rewards=tlr, response_mask=mask, index=uids)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    with pytest.raises(ValueError, match="prompt_ids"):
        ESTIMATORS["vsr_extra_grpo"](token_level_rewards=tlr, response_mask=mask, index=uids)


# ------------------------------------------------------------------ GiGPO


def test_gigpo_equals_the_toolkits_gigpo_per_turn_tokens():
    rng = np.random.default_rng(1)
    uids, ends, anchors, rewards, flat = [], [], [], [], []
    for g in range(3):
        for e in range(4):
            n_turns = int(rng.integers(1, 4))
            cuts = np.sort(rng.choice(np.arange(1, 12), size=n_turns, replace=False)).tolist()
            uids.append(f"g{g}")
            ends.append(cuts)
            anchors.append([f"s{int(rng.integers(0, 3))}" for _ in cuts])
            rewards.append([float(rng.integers(0, 2)) if j == n_turns - 1 else 0.0 for j in range(n_turns)])
    L = 12
    mask = torch.zeros((len(uids), L), dtype=torch.float64)
    for b, e in enumerate(ends):
        mask[b, : e[-1]] = 1.0
        if e[0] > 1:
            mask[b, e[0] - 1] = 0.0  # an observation token inside the response: masked, gets nothing
    tlr = torch.zeros_like(mask)
    nt = {"gigpo_turn_ends": ends, "gigpo_anchors": anchors, "gigpo_step_rewards": rewards}
    cfg = {"vsr": {"gigpo": {"gamma": 0.9, "mode": "mean_std_norm"}}}
    ours, _ = ESTIMATORS["vsr_gigpo"](token_level_rewards=tlr, response_mask=mask, index=np.array(uids, dtype=object),
                                       config=cfg, non_tensor_batch=nt)
    eg = [int(u[1:]) for b, u in enumerate(uids) for _ in ends[b]]
    ep = [b for b in range(len(uids)) for _ in ends[b]]
    tu = [j for b in range(len(uids)) for j in range(len(ends[b]))]
    res = gigpo_advantages(eg, ep, tu, [x for r in rewards for x in r], [a for an in anchors for a in an],
                           GiGPOParams(gamma=0.9, mode="mean_std_norm"))
    k = 0
    for b, e in enumerate(ends):
        lo = 0
        for hi in e:
            seg = ours[b, lo:hi].numpy()
            m = mask[b, lo:hi].numpy() > 0
            np.testing.assert_allclose(seg[m], res.advantage[k], rtol=0, atol=1e-12)
            assert np.all(seg[~m] == 0)
            lo, k = hi, k + 1
        assert np.all(ours[b, e[-1]:].numpy() == 0)
    assert np.any(res.step_advantage != 0)
    with pytest.raises(ValueError, match="gigpo_anchors"):
        ESTIMATORS["vsr_gigpo"](token_level_rewards=tlr, response_mask=mask, index=np.array(uids, dtype=object),
                                non_tensor_batch={"gigpo_turn_ends": ends, "gigpo_step_rewards": rewards})
