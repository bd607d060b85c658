"""Exact formulas and theorem checks for VSR, rollout replay and ExTra (VSR App. B–C, Replay App. E, ExTra App. E).

Every function is pure, takes explicit finite arrays, validates them, and cites the
paper's equation or lemma in its docstring.
"""
