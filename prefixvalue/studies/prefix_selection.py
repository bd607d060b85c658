"""Which prefix to regenerate from? (ExTra §5.6, Fig. 4)

Protocol, per problem: ``n_trajectories`` trajectories from the bare prompt (T = 1); with
``group_filter="all-fail"`` (ExTra: regeneration is only triggered by all-incorrect groups) only
problems whose trajectories all fail are kept. Candidates are the step-prefixes of those
trajectories (cut after every step boundary ``k = 1..S-1``; duplicates dropped; at most
``max_candidates``, ExTra's cache size 128). Each candidate gets its MTE (teacher-forced, exact
entropies at T = 1), an embedding (the trainer's ExTra embedders, :mod:`llm_harness.embedders`;
``policy_hidden`` by default, from one forward pass per source trajectory), the
embedding-smoothed MTE ``H̃_j = Σ_k softmax_k(cos(e_j, e_k)/τ) H_k`` over the problem's candidates,
and a Monte-Carlo value from ``mc_continuations`` continuations.

Selectors (:data:`SELECTORS`): ``low_mte`` (argmin MTE), ``smoothed_mte`` (argmin H̃, ExTra's
rule), ``random`` (uniform, seeded per problem) and ``oracle`` (argmax MC value); ``scratch`` is
the bare prompt. Each choice gets ``eval_continuations`` (16) *fresh* continuations, so the
oracle's evaluation is not the sample it was selected on; pass@k (unbiased, k = 1..16) over
problems compares the selectors.

Continuations use ExTra's evaluation sampling (T = 0.7, top-p 0.9). Departures from the paper:
ExTra's Fig. 4 does not state its exact protocol; the test bed uses the policy's own hidden states
as the embedding (MiniLM is optional), groups of 8 trajectories and the 5-6-term validation chains.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from llm_harness.embedders import EMBEDDERS, EmbedContext, build_embedder
from llm_harness.methods.mte import char_to_token_cut, mean_token_entropy
from prefixvalue.analysis import bits, bits_matrix, fmt_ci, markdown_table, mean_success, pyplot, save_figure, within_dict
from prefixvalue.config import StudyConfig, check_samples, check_temperature, check_top_p, size_limits
from prefixvalue.engine import StudyContext, policy_model
from prefixvalue.prefixes import smoothed_mte
from prefixvalue.registry import Study, register_study, study_name
from vsr_util.checks import check_number
from vsr_util.registry import Registry
from vsr_util.seeding import derive_seed

NAME = study_name(__name__)  # the file name is the study's name (prefixvalue.registry)
GROUP_FILTERS = ("all-fail", "any")

Selector = Callable[[np.ndarray, np.ndarray, np.ndarray, np.random.Generator], int]
#: selector name -> ``(mte[n], smoothed[n], mc_value[n], rng) -> chosen candidate index``.
SELECTORS: Registry[Selector] = Registry("selector")


def register_selector(name: str, fn: Selector) -> Selector:
    """Add a prefix selector (duplicates rejected; ``scratch``, the bare prompt, is reserved)."""
    if name == "scratch":
        raise ValueError(f"name: selector {name!r} is reserved (the bare prompt)")
    return SELECTORS.add(name, fn)


register_selector("low_mte", lambda mte, sm, mc, rng: int(np.argmin(mte)))
register_selector("smoothed_mte", lambda mte, sm, mc, rng: int(np.argmin(sm)))
register_selector("random", lambda mte, sm, mc, rng: int(rng.integers(len(mte))))
register_selector("oracle", lambda mte, sm, mc, rng: int(np.argmax(mc)))

#: Methods compared in the figure: the bare prompt, then every selector.
def methods() -> tuple[str, ...]:
    """``("scratch", *SELECTORS)``."""
    return ("scratch", *SELECTORS)


@dataclass(frozen=True)
class PrefixSelectionConfig(StudyConfig):
    """``vsr study prefix-selection``: pass@k from the prefix chosen by low MTE / smoothed MTE / random / oracle."""

    min_difficulty: float = 5.0
    """Keep problems with ``difficulty >= min_difficulty`` (test bed: the 5-6-term chains)."""
    n_trajectories: int = 8
    """Trajectories per problem (the group whose failure triggers regeneration)."""
    init_temperature: float = 1.0
    """Sampling temperature of the trajectories."""
    group_filter: str = "all-fail"
    """``all-fail``: only problems whose trajectories all fail (ExTra's trigger); ``any``: all problems."""
    max_candidates: int = 128
    """Most step-prefixes kept per problem (ExTra's per-prompt cache)."""
    embedder: str = "policy_hidden"
    """Prefix embedder for the smoothing: a ``llm_harness.embedders.EMBEDDERS`` name, the same
    embedders ExTra's plug-in uses (``policy_hidden``, ``ngram4``, ``char-ngram``, ``minilm``: optional package)."""
    tau: float = 0.1
    """Softmax temperature τ of the cosine-similarity smoothing."""
    mc_continuations: int = 0
    """Continuations per candidate for its MC value (oracle); 0 = study default (quick 8, full 16)."""
    eval_continuations: int = 16
    """Fresh continuations of every chosen prefix (pass@k for k up to this)."""
    temperature: float = 0.7
    """Sampling temperature of all continuations."""
    top_p: float = 0.9
    """Nucleus mass of all continuations."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.group_filter not in GROUP_FILTERS:
            raise ValueError(f"group_filter: must be one of {GROUP_FILTERS}, got {self.group_filter!r}")
        EMBEDDERS.check(self.embedder, where="embedder")
        check_samples(self, "n_trajectories", "eval_continuations")
        check_samples(self, "mc_continuations", lo=0)
        check_number("max_candidates", self.max_candidates, 1, size_limits()["max_candidates"], integer=True)
        check_temperature(self.init_temperature, "init_temperature")
        check_temperature(self.temperature, "temperature")
        check_temperature(self.tau, "tau")
        check_top_p(self.top_p, "top_p")


SIZES = {
    "quick": {"n_problems": 60, "mc_continuations": 8, "chunk_problems": 15, "response_budget": 160},
    "full": {"n_problems": 200, "mc_continuations": 16, "chunk_problems": 20, "response_budget": 160},
}


def _candidates(ctx: StudyContext, p, group) -> list[tuple[int, int, int, tuple[int, ...]]]:
    """``(trajectory, step k, cut, prefix ids)`` for every distinct step-prefix of the group."""
    cfg: PrefixSelectionConfig = ctx.cfg  # type: ignore[assignment]
    seen, out = set(), []
    for j in range(group.size):
        traj = group.completion_ids(j)
        steps = ctx.task.split_steps(group.completion_text(j, ctx.codec))
        for k in range(1, len(steps)):
            cut = char_to_token_cut(traj, steps[k - 1].end, ctx.decode)
            ids = traj[:cut]
            if not 0 < cut < len(traj) or ids in seen:
                continue
            seen.add(ids)
            out.append((j, k, cut, ids))
            if len(out) >= cfg.max_candidates:
                return out
    return out


def embedder_for(ctx: StudyContext):
    """The ``cfg.embedder`` embedder of the trainer's registry, on the study's model and codec."""
    try:
        model = policy_model(ctx.backend)
    except ValueError:
        model = None  # text/token embedders need no model; policy_hidden says so when built
    return build_embedder(ctx.cfg.embedder, {}, EmbedContext(model=model, codec=ctx.codec), "embedder")  # type: ignore[attr-defined]


def _embed_candidates(ctx: StudyContext, kept, traj_keys, cand_meta) -> np.ndarray:
    """``e[candidate, d]``: each candidate prefix embedded as a prefix of its source trajectory
    (``Embedder.embed_prefixes``: one forward pass per trajectory for ``policy_hidden``)."""
    rows = {key: [c for c, m in enumerate(cand_meta) if (m[0], m[1]) == key] for key in traj_keys}
    parts = embedder_for(ctx).embed_prefixes(
        [list(ctx.prompt_ids(kept[i][0])) for i, _ in traj_keys],
        [list(kept[i][1].completion_ids(j)) for i, j in traj_keys],
        [[cand_meta[c][3] for c in rows[key]] for key in traj_keys],
    )
    out: list[np.ndarray | None] = [None] * len(cand_meta)
    for key, part in zip(traj_keys, parts):
        for c, e in zip(rows[key], part):
            out[c] = e
    return np.stack(out).astype(np.float64)  # type: ignore[arg-type]


def collect(ctx: StudyContext, problems: Sequence, chunk: int) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Candidate rows (MTE, smoothed MTE, MC value) and selection rows (eval outcomes) per problem."""
    cfg: PrefixSelectionConfig = ctx.cfg  # type: ignore[assignment]
    init = ctx.sample([ctx.state(p) for p in problems], cfg.n_trajectories, temperature=cfg.init_temperature,
                      top_p=1.0, seed=derive_seed(cfg.seed, NAME, "init", chunk))
    kept, filtered, no_cand = [], 0, 0
    for p, group in zip(problems, init):
        if cfg.group_filter == "all-fail" and any(v.correct for v in group.verify):
            filtered += 1
            continue
        cands = _candidates(ctx, p, group)
        if not cands:
            no_cand += 1
            continue
        kept.append((p, group, cands))
    counts = {"problems": len(problems), "eligible": len(kept), "removed_by_group_filter": filtered,
              "no_candidate_prefix": no_cand}
    if not kept:
        return [], counts
    # MTE of every candidate: one teacher-forced trace per source trajectory
    traj_keys = sorted({(i, j) for i, (_, _, cands) in enumerate(kept) for j, _, _, _ in cands})
    traces = ctx.backend.score_batch([list(ctx.prompt_ids(kept[i][0])) for i, _ in traj_keys],
                                     [list(kept[i][1].completion_ids(j)) for i, j in traj_keys],
                                     temperature=1.0, with_entropy=True)
    mte_of = {key: mean_token_entropy(t.entropies) for key, t in zip(traj_keys, traces)}  # the trainer's MTE
    cand_states, cand_meta = [], []
    for i, (p, _, cands) in enumerate(kept):
        for j, k, cut, ids in cands:
            cand_states.append(ctx.state(p, ids))
            cand_meta.append((i, j, k, cut, float(mte_of[(i, j)][cut - 1])))
    emb = _embed_candidates(ctx, kept, traj_keys, cand_meta)
    mc = ctx.sample(cand_states, cfg.mc_continuations, temperature=cfg.temperature, top_p=cfg.top_p,
                    seed=derive_seed(cfg.seed, NAME, "mc", chunk))
    rows: list[dict[str, Any]] = []
    eval_states, eval_meta = [], []
    for i, (p, _, cands) in enumerate(kept):
        idx = [c for c, m in enumerate(cand_meta) if m[0] == i]
        mte = np.array([cand_meta[c][4] for c in idx])
        sm = smoothed_mte(mte, emb[idx], cfg.tau)
        mcv = np.array([np.mean([v.correct for v in mc[c].verify]) for c in idx])
        for local, c in enumerate(idx):
            _, j, k, cut, h = cand_meta[c]
            cb = [v.correct for v in mc[c].verify]
            rows.append({"row_type": "candidate", "problem_id": p.id, "difficulty": p.difficulty, "method": "",
                         "candidate": local, "n_candidates": len(idx), "trajectory": j, "steps_in_prefix": k,
                         "prefix_tokens": cut, "mte": h, "smoothed_mte": float(sm[local]), "mc_value": float(mcv[local]),
                         "n": len(cb), "n_correct": int(sum(cb)), "correct_bits": bits(cb)})
        rng = np.random.default_rng(derive_seed(cfg.seed, NAME, "random", p.id))
        eval_states.append(ctx.state(p))
        eval_meta.append((i, "scratch", None))
        for name, sel in SELECTORS.items():
            local = sel(mte, sm, mcv, rng)
            eval_states.append(cand_states[idx[local]])
            eval_meta.append((i, name, local))
        counts["candidates"] = counts.get("candidates", 0) + len(idx)
    ev = ctx.sample(eval_states, cfg.eval_continuations, temperature=cfg.temperature, top_p=cfg.top_p,
                    seed=derive_seed(cfg.seed, NAME, "eval", chunk))
    cand_row = {(r["problem_id"], r["candidate"]): r for r in rows}
    for (i, name, local), g in zip(eval_meta, ev):
        p = kept[i][0]
        cand = cand_row[(p.id, local)] if local is not None else None
        cb = [v.correct for v in g.verify]
        rows.append({"row_type": "selection", "problem_id": p.id, "difficulty": p.difficulty, "method": name,
                     "candidate": -1 if local is None else local,
                     "n_candidates": cand["n_candidates"] if cand else 0,
                     "trajectory": cand["trajectory"] if cand else -1,
                     "steps_in_prefix": cand["steps_in_prefix"] if cand else 0,
                     "prefix_tokens": cand["prefix_tokens"] if cand else 0,
                     "mte": cand["mte"] if cand else float("nan"),
                     "smoothed_mte": cand["smoothed_mte"] if cand else float("nan"),
                     "mc_value": cand["mc_value"] if cand else float("nan"),
                     "n": len(cb), "n_correct": int(sum(cb)), "correct_bits": bits(cb)})
    return rows, counts


def analyze(table, cfg: PrefixSelectionConfig) -> dict[str, Any]:
    """pass@k (k = 1..eval_continuations) per method, pass@1 CIs, and MTE-vs-MC on the candidates."""
    from theory.metrics import pass_at_k_table

    sel = table[table["row_type"] == "selection"]
    cand = table[table["row_type"] == "candidate"]
    ks = list(range(1, cfg.eval_continuations + 1))
    out: dict[str, Any] = {"methods": {}, "ks": ks, "n_problems": int(sel["problem_id"].nunique()),
                           "n_candidates": int(len(cand)), "eval_continuations": int(cfg.eval_continuations),
                           "mc_continuations": int(cfg.mc_continuations), "embedder": cfg.embedder, "tau": cfg.tau}
    for name in methods():
        grp = sel[sel["method"] == name].sort_values("problem_id")
        if grp.empty:
            continue
        c = bits_matrix(grp["correct_bits"].tolist())
        table_k = pass_at_k_table(c, ks)
        out["methods"][name] = {
            "pass_at_k": [table_k[k] for k in ks],
            "pass_at_1": mean_success(c),
            "mean_selection_mc_value": float(np.nanmean(grp["mc_value"])) if name != "scratch" else None,
            "mean_prefix_tokens": float(grp["prefix_tokens"].mean()),
        }
    out["contrasts"] = contrasts(sel)
    per_problem = cand.groupby("problem_id")["mc_value"].mean()
    out["random_expected_value"] = float(per_problem.mean()) if len(per_problem) else float("nan")
    out["candidate_mte_vs_mc"] = within_dict(cand["mte"], cand["mc_value"], cand["problem_id"].to_numpy(), "spearman")
    out["candidate_smoothed_vs_mc"] = within_dict(cand["smoothed_mte"], cand["mc_value"],
                                                  cand["problem_id"].to_numpy(), "spearman")
    return out


CONTRASTS: tuple[tuple[str, str], ...] = (("low_mte", "random"), ("smoothed_mte", "random"), ("low_mte", "scratch"),
                                          ("oracle", "scratch"))
"""The paired comparisons of ExTra Fig. 4's claims: a low-MTE pick beats a random one, and restarting from a
chosen prefix beats restarting from the prompt (with the oracle pick as the ceiling of the latter)."""


def contrasts(sel) -> list[dict[str, Any]]:
    """Per-problem pass@1 differences of :data:`CONTRASTS` (problems paired: every method is evaluated on the same
    all-fail problems), with the paired t interval, Holm's adjustment over the family and the power to detect a
    10-point difference at Holm's strictest level (0.05 / the number of contrasts present)."""
    from theory.metrics.paired import holm, paired_contrast, paired_power

    rate = {name: dict(zip(grp["problem_id"], bits_matrix(grp["correct_bits"].tolist()).mean(axis=1)))
            for name, grp in sel.groupby("method")}
    rows = []
    for a, b in CONTRASTS:
        if a not in rate or b not in rate:
            continue
        common = sorted(set(rate[a]) & set(rate[b]))
        c = paired_contrast([rate[a][p] - rate[b][p] for p in common])
        rows.append({"a": a, "b": b, "n_problems": c.n, "diff": c.mean, "sd": c.sd, "lo": c.ci_low, "hi": c.ci_high,
                     "p": c.p})
    for r, adj in zip(rows, holm([r["p"] for r in rows])):
        r["p_holm"] = adj
        r["power_10pp"] = paired_power(0.10, r["sd"], r["n_problems"], 0.05 / len(rows))
    return rows


def render(summary: dict[str, Any]) -> str:
    """Markdown summary: pass@k per method."""
    ks = summary["ks"]
    show = [k for k in (1, 2, 4, 8, 16) if k in ks]
    rows = []
    for name, m in summary["methods"].items():
        p1 = m["pass_at_1"]
        mc = m["mean_selection_mc_value"]
        rows.append((name, f"{p1['mean']:.3f} [{p1['lo']:.3f}, {p1['hi']:.3f}]",
                     *[f"{m['pass_at_k'][k - 1]:.3f}" for k in show[1:]],
                     "" if mc is None else f"{mc:.3f}", f"{m['mean_prefix_tokens']:.1f}"))
    lines = [
        f"# Prefix selection ({summary['model']}, {summary['task']}/{summary['split']}, {summary['n_problems']} problems, "
        f"{summary['n_candidates']} candidate prefixes, embedder {summary['embedder']}, tau {summary['tau']})",
        "",
        markdown_table(("method", "pass@1 [95% CI]", *[f"pass@{k}" for k in show[1:]], "MC value at selection",
                        "prefix tokens"), rows),
        "",
        f"* expected MC value of a uniformly random candidate: {summary['random_expected_value']:.3f}",
        f"* candidates: within-problem Spearman(MTE, MC value) = {fmt_ci(summary['candidate_mte_vs_mc'])}; "
        f"(smoothed MTE, MC value) = {fmt_ci(summary['candidate_smoothed_vs_mc'])}",
        *_render_contrasts(summary.get("contrasts") or []),
    ]
    return "\n".join(lines) + "\n"


def _render_contrasts(rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    body = [(f"{r['a']} - {r['b']}", f"{r['diff']:+.3f} [{r['lo']:+.3f}, {r['hi']:+.3f}]", f"{r['p']:.2g}",
             f"{r['p_holm']:.2g}", f"{r['power_10pp']:.2f}", r["n_problems"]) for r in rows]
    return ["", "Paired over problems (pass@1 difference, t interval; Holm over these rows; power to detect 10 points at "
            "0.05 / rows):", "",
            markdown_table(("contrast", "difference [95% CI]", "p", "Holm p", "power at 10 pp", "problems"), body)]


def plot(table, summary: dict[str, Any], out_dir) -> list:
    """pass@k vs k for each selection method."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.6, 4))
    ks = summary["ks"]
    for name, style in zip(summary["methods"], ("k:", "o-", "s-", "^--", "d-.")):
        ax.plot(ks, summary["methods"][name]["pass_at_k"], style, ms=4, label=name)
    ax.set_xscale("log", base=2)
    ax.set_xticks(ks if len(ks) <= 8 else [k for k in ks if k & (k - 1) == 0], minor=False)
    ax.get_xaxis().set_major_formatter(plt.matplotlib.ticker.ScalarFormatter())
    ax.set_xlabel("k")
    ax.set_ylabel("pass@k of continuations")
    ax.set_ylim(-0.02, 1.02)
    ax.legend(fontsize=8)
    ax.set_title(f"Prefix selection: {summary['model']} on {summary['split']} ({summary['n_problems']} problems)", fontsize=9)
    fig.tight_layout()
    return save_figure(fig, out_dir, "prefix_selection")


STUDY = register_study(Study(
    name=NAME,
    title="ExTra Fig. 4: pass@k from the prefix chosen by low MTE, smoothed MTE, random or oracle",
    config_cls=PrefixSelectionConfig,
    default_split="validation",
    sizes=SIZES,
    eligibility="initial group passes group_filter and yields at least one step-prefix",
    collect=collect,
    analyze=analyze,
    render=render,
    plot=plot,
))
