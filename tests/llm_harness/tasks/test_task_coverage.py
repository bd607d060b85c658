"""The encodability check at the edge and the test bed's unknown token."""

from __future__ import annotations

import pytest

from llm_harness.tasks import get_task
from llm_harness.tasks.coverage import check_task_encodable
from llm_harness.testbed.paths import shipped_checkpoint
from llm_harness.trainer.config import ModelConfig
from llm_harness.trainer.modeling import Codec, build_model


def test_the_shipped_tokenizer_maps_unknown_characters_to_unk_instead_of_dropping_them():
    _, tok = build_model(ModelConfig(path=str(shipped_checkpoint("mid"))), 0)
    ids = tok.encode("1+a=?")
    assert len(ids) == 5 and ids[2] == tok.unk_token_id  # 'a' is not in the alphabet
    assert tok.encode("1+2=?") == [tok.convert_tokens_to_ids(c) for c in "1+2=?"]


def test_an_unencodable_task_is_refused_naming_the_characters(tmp_path):
    _, tok = build_model(ModelConfig(path=str(shipped_checkpoint("mid"))), 0)
    task = get_task("env", env="sokoban", n_train=2)
    with pytest.raises(ValueError, match=r"tokenizer: cannot encode .* used by task 'env': .*'P'"):
        check_task_encodable(Codec(tok), task, task.problems("train"), tok)
    check_task_encodable(Codec(tok), get_task("step_arith"), get_task("step_arith").problems("train")[:5], tok)
