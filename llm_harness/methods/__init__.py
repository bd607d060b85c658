"""The three papers' methods as trainer plug-ins (VSR Alg. 1, Replay Alg. 1, ExTra §4).

Importing this package registers them in :data:`llm_harness.trainer.plugins.PLUGINS` (the
trainer imports it before looking plug-ins up):

* ``vsr`` — prefix-state resampling ∝ σ̂ with a recency window (:mod:`.vsr`);
* ``replay`` — rollout-level |A| replay and the query-level baselines (:mod:`.replay`);
* ExTra's novelty bonus and MTE-guided regeneration (:mod:`.extra`);
* `reinforce_ada_est` and `dapo` (dynamic sampling) on the refill mechanism (:mod:`.sampling`).

Any subset composes in one run: list several under ``plugins:`` in the config.
"""

from llm_harness.methods import extra, replay, sampling, vsr  # noqa: F401  (registration side effects)

__all__ = ["extra", "replay", "sampling", "vsr"]
