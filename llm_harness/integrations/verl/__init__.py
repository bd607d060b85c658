"""verl 0.9.1 plug-ins of the toolkit, loaded by verl's ``verl.plugins`` entry point (docs/scaling-out.md).

``import verl`` imports this package (entry point ``vsr-toolkit`` of the distribution), which
registers the advantage estimators of :mod:`.estimators` (``vsr_grpo``, ``vsr_drgrpo``,
``vsr_rloo``, ``vsr_constant``, ``vsr_extra_grpo``, ``vsr_gigpo``), the ``cpu`` platform of :mod:`.cpu_platform` and the ``vsr_hf`` rollout of :mod:`.hf_rollout` (verl's own trainer on the CPU), the VSR agent loops of
:mod:`.agent_loop` (``vsr_prefix``, token prefixes) and :mod:`.env_loop` (``vsr_env``, agents' interaction states) and the ``vsr_sync`` trainer mode of :mod:`.trainer`. verl
swallows a plug-in's import error (logged at debug level): :data:`REGISTERED` lists what this
import registered, and the tests check it in a fresh interpreter.
"""

from __future__ import annotations

# first: other verl modules ask for the platform when they are imported
from llm_harness.integrations.verl import cpu_platform as _cpu_platform  # noqa: I001  (registers on import)
from llm_harness.integrations.verl.estimators import register_all as _register_estimators

#: what importing this package registered with verl, by kind
REGISTERED: dict[str, tuple[str, ...]] = {"platform": (_cpu_platform.PLATFORM,), "adv_estimator": _register_estimators()}

from llm_harness.integrations.verl import agent_loop as _agent_loop  # noqa: E402  (registers on import)
from llm_harness.integrations.verl import env_loop as _env_loop  # noqa: E402  (registers on import)
from llm_harness.integrations.verl import hf_rollout as _hf_rollout  # noqa: E402  (registers on import)
from llm_harness.integrations.verl import trainer as _trainer  # noqa: E402  (registers on import)

_cpu_platform.register_engines()

REGISTERED["agent_loop"] = _agent_loop.REGISTERED + _env_loop.REGISTERED
REGISTERED["trainer_mode"] = _trainer.REGISTERED
REGISTERED["rollout"] = _hf_rollout.REGISTERED
