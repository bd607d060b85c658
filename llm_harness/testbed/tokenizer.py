"""Character-level tokenizer of the test bed (arithmetic and agents).

One token per character of an alphabet plus four special tokens. The arithmetic test bed uses the
step-arithmetic alphabet (:data:`llm_harness.tasks.ALPHABET`, 19 symbols; 23 ids in all), the
agent test beds their environment family's rendering alphabet (``AGENT_FAMILIES`` in ``llm_harness.testbed.agents``)::

    0 <pad>   1 <bos>   2 <eos>   3 <unk>   4.. the alphabet in order   then auxiliary byte tokens

It is a real ``transformers`` fast tokenizer, saved with ``save_pretrained`` and loaded with
``AutoTokenizer.from_pretrained(path)`` from a local folder exactly like a real model's:
``encode``/``decode``, ``__call__`` with padding, ``pad_token_id``/``eos_token_id``/``bos_token_id``
and ``chat_template = None`` (prompts use the task's plain template).

Why byte-level BPE without merges (and not a plain character WordLevel model): transformers 5
loads the tokenizer of a ``qwen2`` checkpoint folder as ``Qwen2Tokenizer`` whatever
``tokenizer_config.json`` says, and that class rebuilds its pipeline from the vocabulary with a
byte-level pre-tokenizer. Storing the vocabulary in the GPT-2 byte-to-unicode alphabet (newline is
the token ``"Ċ"``) and using no merges makes every loader — this fast tokenizer, transformers 5's
``Qwen2Tokenizer``, transformers 4's ``PreTrainedTokenizerFast`` — produce one id per character
with identical ids (tested). The one difference: a character outside the alphabet becomes
``<unk>`` here but is dropped by ``Qwen2Tokenizer``.

Non-ASCII characters (Sokoban's ``√``, UTF-8 ``E2 88 9A``): the byte-level pre-tokenizer turns
such a character into one symbol per UTF-8 byte, so one token per character needs BPE merges.
For a character of bytes ``b1 .. bk`` the vocabulary also holds the byte symbols and the partial
merges ``b1b2``, ``b1b2b3``, ... (auxiliary ids after the alphabet, never produced for a text of
the alphabet) and the merges ``(b1, b2), (b1b2, b3), ...``; the whole character keeps the id
``4 + alphabet.index(ch)``. ASCII alphabets need no merges (the arithmetic tokenizer is unchanged).
Merges never cross characters: every merge rebuilds the bytes of one alphabet character.

Conventions: no special token is added on encoding (like Qwen tokenizers), so
``tokenizer(text)`` and ``tokenizer.encode(text, add_special_tokens=False)`` agree and the ids of
``prompt + prefix`` are the ids of ``prompt`` followed by those of ``prefix`` (character-level
tokenization is concatenative). ``<bos>`` exists for API completeness and is never used in
training. The model learns to end a solution with ``<eos>``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from llm_harness.tasks import ALPHABET
from vsr_util.checks import check_number

__all__ = [
    "BOS_TOKEN",
    "EOS_TOKEN",
    "PAD_TOKEN",
    "SPECIAL_TOKENS",
    "UNK_TOKEN",
    "build_tokenizer",
    "byte_unicode_map",
    "char_merges",
    "char_vocab",
    "save_tokenizer",
]

PAD_TOKEN = "<pad>"
BOS_TOKEN = "<bos>"
EOS_TOKEN = "<eos>"
UNK_TOKEN = "<unk>"
#: Special tokens, in id order (ids 0..3).
SPECIAL_TOKENS = (PAD_TOKEN, BOS_TOKEN, EOS_TOKEN, UNK_TOKEN)


def byte_unicode_map() -> dict[int, str]:
    """GPT-2's reversible byte -> printable unicode character map (used by byte-level BPE).

    Printable Latin-1 bytes (``!``..``~``, ``¡``..``¬``, ``®``..``ÿ``) map to themselves; the other
    bytes, in increasing order, map to ``chr(256)``, ``chr(257)``, ... (so ``"\\n"`` -> ``"Ċ"``).
    """
    keep = set(range(ord("!"), ord("~") + 1)) | set(range(0xA1, 0xAC + 1)) | set(range(0xAE, 0xFF + 1))
    out, n = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + n)
            n += 1
    return out


def _check_alphabet(alphabet: str) -> str:
    if not isinstance(alphabet, str) or not alphabet:
        raise ValueError("alphabet: must be a non-empty string")
    if len(set(alphabet)) != len(alphabet):
        raise ValueError(f"alphabet: characters must be distinct, got {alphabet!r}")
    return alphabet


def _byte_symbols(ch: str, bmap: dict[int, str]) -> list[str]:
    """The byte-level symbols of ``ch`` (one per UTF-8 byte)."""
    return [bmap[b] for b in ch.encode("utf-8")]


def char_vocab(alphabet: str = ALPHABET) -> dict[str, int]:
    """``token -> id``: the special tokens first, then every character of ``alphabet`` in order,
    written in the byte-level alphabet (:func:`byte_unicode_map`), then the auxiliary byte and
    partial-merge tokens of the multi-byte characters (module doc; none for an ASCII alphabet)."""
    _check_alphabet(alphabet)
    bmap = byte_unicode_map()
    tokens = list(SPECIAL_TOKENS) + ["".join(_byte_symbols(ch, bmap)) for ch in alphabet]
    vocab = {tok: i for i, tok in enumerate(tokens)}
    for ch in alphabet:
        syms = _byte_symbols(ch, bmap)
        for aux in syms + ["".join(syms[:k]) for k in range(2, len(syms))]:
            vocab.setdefault(aux, len(vocab))
    return vocab


def char_merges(alphabet: str = ALPHABET) -> list[tuple[str, str]]:
    """BPE merges that rebuild each multi-byte character of ``alphabet`` from its bytes (module doc)."""
    _check_alphabet(alphabet)
    bmap = byte_unicode_map()
    merges: list[tuple[str, str]] = []
    for ch in alphabet:
        syms = _byte_symbols(ch, bmap)
        merges += [("".join(syms[:k]), syms[k]) for k in range(1, len(syms))]
    return merges


def build_tokenizer(alphabet: str = ALPHABET, *, model_max_length: int = 256):
    """The character-level ``PreTrainedTokenizerFast`` of the test bed (module docstring).

    ``model_max_length`` should equal the model's ``max_position_embeddings``.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    check_number("model_max_length", model_max_length, 1, integer=True)
    # byte-level BPE: one token per character; merges only rebuild multi-byte characters (module docstring)
    core = Tokenizer(models.BPE(vocab=char_vocab(alphabet), merges=char_merges(alphabet), unk_token=UNK_TOKEN))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    core.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token=PAD_TOKEN,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        unk_token=UNK_TOKEN,
        clean_up_tokenization_spaces=False,
        model_max_length=model_max_length,
    )
    tok.chat_template = None
    return tok


def save_tokenizer(tokenizer, path: str | os.PathLike) -> Path:
    """``tokenizer.save_pretrained(path)`` with ``tokenizer_class`` written as
    ``PreTrainedTokenizerFast`` (a name transformers 4.x and 5.x both resolve; 5.x writes its
    internal ``TokenizersBackend``, which 4.x does not know)."""
    path = Path(path)
    tokenizer.save_pretrained(path)
    cfg_file = path / "tokenizer_config.json"
    cfg = json.loads(cfg_file.read_text())
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    from vsr_util.atomic import write_json

    write_json(cfg_file, cfg)
    return path
