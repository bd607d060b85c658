"""Math task inputs: JSONL/parquet loaders and their errors, hash splits, step splitting."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llm_harness.tasks import MathFields, MathTask, MathTaskConfig, get_task, load_math_file, split_math_steps
from llm_harness.tasks.math_task import load_math_hf, load_math_jsonl

ROWS = [
    {"problem": "What is $1+1$?", "answer": "2", "solution": "One plus one.\n\n$\\boxed{2}$", "level": 1},
    {"problem": "What is $2/4$?", "answer": "\\frac{1}{2}", "solution": "Halve it: \\boxed{\\frac12}"},
    {"problem": "Largest prime below 10?", "answer": 7},
]


def write_jsonl(path, rows, raw_lines=()):
    with open(path, "w") as fh:
        for r in rows:
            fh.write(json.dumps(r) + "\n")
        for line in raw_lines:
            fh.write(line + "\n")
    return path


def test_jsonl_loader_defaults(tmp_path):
    path = write_jsonl(tmp_path / "m.jsonl", ROWS[:2])
    with open(path, "a") as fh:
        fh.write("\n   \n" + json.dumps(ROWS[2]) + "\n")  # blank lines are skipped but counted
    ps = load_math_file(path)
    assert [p.id for p in ps] == ["m.jsonl:1", "m.jsonl:2", "m.jsonl:5"]
    assert [p.answer for p in ps] == ["2", "\\frac{1}{2}", "7"]  # numbers become text
    assert ps[0].solution.startswith("One plus one") and ps[2].solution is None
    assert ps[0].metadata["level"] == 1 and ps[0].metadata["source"] == f"{path}:1"
    assert len(load_math_file(path, max_rows=2)) == 2


def test_jsonl_custom_fields_and_answer_from_solution(tmp_path):
    rows = [{"q": "A?", "sol": "so \\boxed{\\dfrac{3}{4}}", "uid": "x1"}, {"q": "B?", "sol": "\\boxed{5}", "uid": "x2"}]
    path = write_jsonl(tmp_path / "c.jsonl", rows)
    ps = load_math_file(path, MathFields(question="q", answer=None, solution="sol", id="uid"))
    assert [(p.id, p.prompt, p.answer) for p in ps] == [("x1", "A?", "\\dfrac{3}{4}"), ("x2", "B?", "5")]


@pytest.mark.parametrize(
    "raw, line, message",
    [
        ('{"problem": "x", "answer": "1"', 2, "invalid JSON"),
        ('{"answer": "1"}', 2, "'problem' (question) is missing"),
        ('{"problem": "x"}', 2, "'answer' (answer) is missing"),
        ('{"problem": "x", "answer": ""}', 2, "'answer' (answer) is missing"),
        ('{"problem": "x", "answer": [1]}', 2, "not a string/number"),
        ('{"problem": "   ", "answer": "1"}', 2, "'problem'"),
        ('["problem", "answer"]', 2, "expected a JSON object"),
        ('{"problem": "x", "answer": "1", "solution": 5}', 2, "'solution' (solution) must be a string"),
    ],
)
def test_jsonl_malformed_rows_name_file_and_line(tmp_path, raw, line, message):
    path = write_jsonl(tmp_path / "bad.jsonl", ROWS[:1], [raw])
    with pytest.raises(ValueError) as info:
        load_math_file(path)
    assert f"{path}:{line}:" in str(info.value) and message in str(info.value)


def test_jsonl_file_level_errors(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    with pytest.raises(ValueError, match="no problems"):
        load_math_file(empty)
    dup = write_jsonl(tmp_path / "dup.jsonl", [{"problem": "a", "answer": "1", "id": "k"}, {"problem": "b", "answer": "2", "id": "k"}])
    with pytest.raises(ValueError, match=r"dup.jsonl:2: duplicate id 'k' \(first at .*dup.jsonl:1\)"):
        load_math_jsonl(dup, MathFields(id="id"))
    nobox = write_jsonl(tmp_path / "nobox.jsonl", [{"problem": "a", "solution": "no box here"}])
    with pytest.raises(ValueError, match=r"nobox.jsonl:1: no \\boxed"):
        load_math_file(nobox, MathFields(answer=None))
    with pytest.raises(ValueError, match="unsupported file type '.csv'"):
        load_math_file(tmp_path / "m.csv")


def test_parquet_loader_and_row_errors(tmp_path):
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    good = tmp_path / "m.parquet"
    pd.DataFrame(ROWS[:2]).to_parquet(good)
    ps = load_math_file(good)
    assert [p.id for p in ps] == ["m.parquet:row0", "m.parquet:row1"]
    assert ps[1].answer == "\\frac{1}{2}"
    bad = tmp_path / "bad.parquet"
    pd.DataFrame([{"problem": "x", "answer": "1"}, {"problem": "y", "answer": None}]).to_parquet(bad)
    with pytest.raises(ValueError, match=r"bad.parquet: row 1: field 'answer'"):
        load_math_file(bad)


def test_single_file_is_hash_split_disjointly(tmp_path):
    rows = [{"problem": f"What is {i}+{i}?", "answer": str(2 * i)} for i in range(300)]
    path = write_jsonl(tmp_path / "all.jsonl", rows)
    t1 = get_task("math", files={"all": str(path)})
    t2 = get_task("math", files={"all": str(path)}, split_fractions=(0.8, 0.1, 0.1))
    ids = {s: [p.id for p in t1.problems(s)] for s in t1.splits}
    assert t1.splits == ("train", "validation", "test")
    assert sorted(sum(ids.values(), [])) == sorted(f"all.jsonl:{i + 1}" for i in range(300))
    assert all(len(v) > 0 for v in ids.values())
    assert ids == {s: [p.id for p in t2.problems(s)] for s in t2.splits}
    with pytest.raises(ValueError, match="'all' cannot be combined"):
        get_task("math", files={"all": str(path), "test": str(path)})


def test_files_per_split_and_config_errors(tmp_path):
    a = write_jsonl(tmp_path / "train.jsonl", ROWS[:2])
    b = write_jsonl(tmp_path / "test.jsonl", ROWS[2:])
    t = get_task("math", files={"train": str(a), "test": str(b)}, grader="math_verify")
    assert t.splits == ("train", "test") and len(t.problems("train")) == 2
    assert t.config.grader == "math_verify"
    with pytest.raises(ValueError, match="unknown split 'validation'"):
        t.problems("validation")
    with pytest.raises(ValueError, match="^files: give files"):
        get_task("math")
    with pytest.raises(ValueError, match="^files: give either"):
        get_task("math", files={"test": str(b)}, hf_dataset="x/y")
    with pytest.raises(ValueError, match="^timeout_s"):
        MathTaskConfig(timeout_s=0)
    with pytest.raises(ValueError, match="^user_template"):
        MathTaskConfig(user_template="no placeholder")
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) answer_feild"):
        get_task("math", files={"test": str(b)}, fields={"answer_feild": "x"})
    with pytest.raises(ValueError, match="^problems_by_split"):
        MathTask({})


def test_hugging_face_loader_refuses_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ValueError, match="offline"):
        load_math_hf("HuggingFaceH4/MATH-500")
    with pytest.raises(ValueError, match="offline"):
        get_task("math", hf_dataset="HuggingFaceH4/MATH-500")


# ---------------------------------------------------------------------------- steps
def test_math_steps_paragraphs_and_markers():
    text = "First, note x = 2.\n\nThen y = 3.\n\n\nSo \\boxed{5}."
    steps = split_math_steps(text)
    assert [s.text for s in steps] == ["First, note x = 2.\n\n", "Then y = 3.\n\n\n", "So \\boxed{5}."]
    marked = "Step 1: expand.\nStep 2: simplify.\n**Step 3** done\nstep 10: \\boxed{1}"
    assert [s.text for s in split_math_steps(marked)] == [
        "Step 1: expand.\n",
        "Step 2: simplify.\n",
        "**Step 3** done\n",
        "step 10: \\boxed{1}",
    ]
    assert [s.text for s in split_math_steps("one line\nsame step\n")] == ["one line\nsame step\n"]
    assert split_math_steps("") == ()
    mixed = "Intro.\n\nStep 1: a\nStep 2: b\n\nEnd"
    assert [s.text for s in split_math_steps(mixed)] == ["Intro.\n\n", "Step 1: a\n", "Step 2: b\n\n", "End"]
    # "Step" inside a line is not a marker
    assert len(split_math_steps("We take a step 1 further.")) == 1


@given(st.text(alphabet=st.sampled_from(list("ab \nStep1")), max_size=60))
def test_math_steps_partition(text):
    steps = split_math_steps(text)
    assert "".join(s.text for s in steps) == text
    assert all(text[s.start : s.end] == s.text and s.end > s.start for s in steps)
