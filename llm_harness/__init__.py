"""Tasks, generation backends, text environments, the GRPO trainer and the papers' methods as its plug-ins.

Subpackages in layer order, commands, tests and import rules: ``llm_harness/README.md``.
"""
