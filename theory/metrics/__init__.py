"""Metrics shared by every study and the trainer's evaluation (sources per module below).

* :mod:`theory.metrics.passk`: unbiased pass@k (Chen et al. 2021), avg@k, a pass@k table.
* :mod:`theory.metrics.efficiency`: the Accuracy Efficiency Score of Replay §6.1.
* :mod:`theory.metrics.correlation`: Pearson/Spearman with Fisher-z or bootstrap CIs, and
  within-group correlation averaged through Fisher's z (ExTra App. C.1).
* :mod:`theory.metrics.diversity`: Distinct-n, Self-BLEU, LogDet(I + alpha K) (ExTra §5.4).
* :mod:`theory.metrics.intervals`: the project's one Student-t interval of a mean.
* :mod:`theory.metrics.paired`: paired-seed contrasts, seed × problem (crossed) contrasts, Holm's correction, the
  power of a paired t-test.
* :mod:`theory.metrics.binomial`: binomial and clustered intervals of sampled accuracies (Clopper-Pearson,
  Korn-Graubard, Wilson) and the paired consistency test.

Everything public is re-exported here.
"""

from theory.metrics.correlation import (
    BCA_TIE_ATOL,
    CI_METHODS,
    CORRELATIONS,
    SPEARMAN_FISHER_VARIANCE,
    WITHIN_GROUP_WEIGHTINGS,
    CorrelationResult,
    WithinGroupCorrelation,
    correlation,
    fisher_z_interval,
    pearson,
    spearman,
    within_group_correlation,
    cochran_q,
    two_stage_interval,
    cluster_bootstrap_correlation,
)
from theory.metrics.diversity import (
    BLEU_EPSILON,
    BLEU_SMOOTHINGS,
    SELF_BLEU_MODES,
    bleu,
    cosine_kernel,
    distinct_n,
    logdet_diversity,
    ngrams,
    self_bleu,
)
from theory.metrics.efficiency import AES_BETA_GAIN, AES_BETA_LOSS, AESTerms, aes, aes_terms
from theory.metrics.intervals import t_interval
from theory.metrics.paired import Contrast, CrossedContrast, crossed_contrast, holm, paired_contrast, paired_power, seeds_for_power
from theory.metrics.passk import avg_at_k, correct_matrix, pass_at_k, pass_at_k_table

__all__ = [
    "Contrast",
    "holm",
    "paired_contrast",
    "crossed_contrast",
    "CrossedContrast",
    "paired_power",
    "seeds_for_power",
    "t_interval",
    # pass@k
    "pass_at_k",
    "avg_at_k",
    "pass_at_k_table",
    "correct_matrix",
    # AES
    "AES_BETA_GAIN",
    "AES_BETA_LOSS",
    "AESTerms",
    "aes",
    "aes_terms",
    # correlation
    "BCA_TIE_ATOL",
    "CI_METHODS",
    "CORRELATIONS",
    "SPEARMAN_FISHER_VARIANCE",
    "WITHIN_GROUP_WEIGHTINGS",
    "CorrelationResult",
    "WithinGroupCorrelation",
    "correlation",
    "pearson",
    "spearman",
    "fisher_z_interval",
    "within_group_correlation",
    "cochran_q",
    "two_stage_interval",
    "cluster_bootstrap_correlation",
    # diversity
    "BLEU_EPSILON",
    "BLEU_SMOOTHINGS",
    "SELF_BLEU_MODES",
    "bleu",
    "self_bleu",
    "distinct_n",
    "ngrams",
    "cosine_kernel",
    "logdet_diversity",
]
