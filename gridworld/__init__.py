"""Exact tabular-MDP solvers and the gridworld experiments of VSR (§2.3, App. B–D.1).

Modules, commands, tests and import rules: ``gridworld/README.md``.
"""
