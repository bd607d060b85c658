"""Re-export of :mod:`llm_harness.embedders` (its home before: the trainer's evaluation uses the embedders too,
so they live below both the trainer and the methods)."""

from llm_harness.embedders import *  # noqa: F401,F403
from llm_harness.embedders import EMBEDDERS, __all__  # noqa: F401
