"""verl ``reward.custom_reward_function`` for the test bed's step arithmetic (used by the agent-loop tests)."""

from llm_harness.tasks.step_arith import verify_step_arith


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    """1.0 iff the integer after the last ``A:`` equals ``ground_truth``."""
    return verify_step_arith(solution_str, int(ground_truth)).reward
