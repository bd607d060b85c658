"""The three papers' methods as trainer plug-ins (VSR Alg. 1, Replay Alg. 1, ExTra §4).

Each module registers its plug-ins beside them (``register_plugin(name, config=..., cost=..., smoke=...)``) in
:data:`llm_harness.trainer.plugins.PLUGINS`; the trainer imports every module of this package before looking
plug-ins up, so a new module here needs no other edit:

* ``vsr`` — prefix-state resampling ∝ σ̂ with a recency window (:mod:`.vsr`);
* ``replay`` — rollout-level |A| replay and the query-level baselines (:mod:`.replay`);
* ExTra's novelty bonus and MTE-guided regeneration (:mod:`.extra`);
* `reinforce_ada_est` and `dapo` (dynamic sampling) on the refill mechanism (:mod:`.sampling`).

Any subset composes in one run: list several under ``plugins:`` in the config.
"""

