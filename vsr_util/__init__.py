"""The ground floor of the project: small utilities every package uses and that import nothing of it.

* :mod:`vsr_util.atomic` — atomic writes, bounded reads, JSON/CSV writers, figure saving;
* :mod:`vsr_util.checks` — argument checks with messages naming the field;
* :mod:`vsr_util.config_io` — YAML/JSON config files to frozen dataclasses and back, with file and line in errors;
* :mod:`vsr_util.registry` — the one ``name -> entry`` registry type;
* :mod:`vsr_util.runlock` — one writer per run folder;
* :mod:`vsr_util.seeding` — seeds derived from names.

The command line that sits above every package is :mod:`vsr` (``vsr.cli``); nothing here imports it.
"""
