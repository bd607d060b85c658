"""The model-import tests' fixtures (defined in ``tests/tiny_models.py``, shared with the model card's test)."""

from tiny_models import make_gguf, tiny_chat_folder  # noqa: F401  (fixtures)
