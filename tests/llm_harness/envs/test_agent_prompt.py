"""The per-turn agent prompt: instruction, a window of past turns, the current observation, open action tag."""

from __future__ import annotations

import pytest

from llm_harness.envs.prompt import Turn, render_agent_prompt


def test_window_keeps_the_last_turns_and_ends_with_the_action_tag():
    turns = [Turn("o1", "up"), Turn("o2\n", " left "), Turn("o3", "<action>down</action>")]
    assert render_agent_prompt("Go.", turns, "o4", window=2) == "Go.\nO:o2\nA:left\nO:o3\nA:<action>down</action>\nO:o4\nA:"
    assert render_agent_prompt("Go.", turns, "o4", window=0) == "Go.\nO:o4\nA:"
    assert render_agent_prompt("Go.", turns, "o4", window=None).count("O:") == 4
    with pytest.raises(ValueError, match="window"):
        render_agent_prompt("Go.", turns, "o4", window=-1)



def test_reply_formats_extend_the_instruction_only_when_asked():
    """``word`` (the test-bed agents) leaves every prompt as before; ``tagged`` tells an instruct model
    the ``<action>WORD</action>`` format, in the task's first prompt and in every turn the runner renders."""
    from llm_harness.backends.protocol import Sample
    from llm_harness.envs.episodes import EpisodeStart, run_episodes
    from llm_harness.envs.prompt import REPLY_FORMATS, with_reply_format
    from llm_harness.tasks import get_task
    from llm_harness.testbed.tokenizer import build_tokenizer
    from llm_harness.trainer.modeling import Codec

    note = REPLY_FORMATS["tagged"]
    assert with_reply_format("Push.", "word") == "Push." and with_reply_format("Push. ", "tagged") == f"Push. {note}"
    assert "<action>WORD</action>" in note
    with pytest.raises(ValueError, match="reply_format"):
        with_reply_format("Push.", "json")
    with pytest.raises(ValueError, match="reply_format"):
        get_task("env", env="sokoban", reply_format="json")
    plain, tagged = (get_task("env", env="sokoban", n_train=2, window=0, reply_format=f) for f in ("word", "tagged"))
    p0, p1 = plain.problems("validation")[0].prompt, tagged.problems("validation")[0].prompt
    assert p0.splitlines()[0] == _instruction(plain)  # "word": the instruction alone, as before
    assert p1.splitlines()[0] == f"{_instruction(plain)} {note}" and p1.splitlines()[1:] == p0.splitlines()[1:]

    tok = build_tokenizer("\n" + "".join(chr(c) for c in range(32, 127)) + "√", model_max_length=4096)
    codec = Codec(tok)

    class Echo:
        max_context = 4096

        def __init__(self):
            self.prompts = []

        def generate(self, prompts, n, sampling):
            self.prompts += prompts
            ids = tuple(codec.encode("<action>up</action>")) + (tok.eos_token_id,)
            return [[Sample(ids, (0.0,) * len(ids), "stop")] for _ in prompts]

    be = Echo()
    (r,) = run_episodes(tagged.make_env, [EpisodeStart(0)], be, codec, window=0, max_turns=2, reply_format="tagged")
    assert r.length == 2 and all(t.valid for t in r.turns) and all(note in codec.decode(p) for p in be.prompts)
    assert codec.decode(be.prompts[0]) == p1


def _instruction(task):
    env = task.make_env()
    env.reset(0)
    return env.instruction
