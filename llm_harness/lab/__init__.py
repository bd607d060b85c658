"""The allocation lab (``vsr lab``, ``vsr advise``): where should rollouts be spent?

All three papers argue through one chain: an allocation of rollouts (which prompts, which prefix states,
which stored rollouts, which bonus) changes the variance and signal of the policy-gradient estimator per
generated token, and that changes how fast a policy learns. The lab measures the first two links on one
model and task: it probes pass rates (:mod:`~llm_harness.lab.probe`), predicts each allocation's variance
per token from VSR App. B (:mod:`~llm_harness.lab.predict`), realises each allocation's estimator from the
same parameters (:mod:`~llm_harness.lab.allocations`, :mod:`~llm_harness.lab.engine`) and measures its
trace variance, signal and direction without storing gradients (:mod:`~llm_harness.lab.moments`);
:mod:`~llm_harness.lab.run` is the command.
"""
