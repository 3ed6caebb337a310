"""Workload prompt sets: the loader, its validation, and every shipped set."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.core.workloads import (
    MIN_PROMPTS,
    SHIPPED_PROMPTS,
    WORKLOADS_DIR,
    Workload,
    WorkloadError,
    list_workloads,
    load_workload,
    parse_workload,
    shipped_names,
)

REQUIRED_SETS = {"code-completion", "code-editing", "explanation", "summarization", "creative"}


def valid(n: int = 10) -> dict:
    return {
        "name": "my-set",
        "description": "prompts for a test",
        "prompts": [{"id": f"p{i}", "text": f"def f{i}():\n"} for i in range(n)],
    }


def write(tmp_path: Path, data, name: str = "set.json") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return path


# -- the shipped sets ---------------------------------------------------------
def test_the_required_sets_are_shipped():
    assert REQUIRED_SETS <= set(shipped_names())


def test_every_shipped_set_is_valid_and_named_after_its_file():
    sets = list_workloads()
    assert [w.name for w in sets] == shipped_names()
    for w in sets:
        assert w.path == WORKLOADS_DIR / f"{w.name}.json"
        assert SHIPPED_PROMPTS[0] <= len(w.prompts) <= SHIPPED_PROMPTS[1]
        assert len({p.id for p in w.prompts}) == len(w.prompts)
        assert all(p.text.strip() for p in w.prompts)
        # the prompts differ from each other, not copies with new ids
        assert len({p.text for p in w.prompts}) == len(w.prompts)


def test_code_editing_prompts_restate_code_the_answer_can_copy():
    """The set exists to be n-gram friendly: each prompt already holds a stretch of code twice."""
    width = 20
    for p in load_workload("code-editing").prompts:
        windows = [p.text[i : i + width] for i in range(len(p.text) - width + 1)]
        assert len(windows) != len(set(windows)), f"{p.id} repeats no {width}-character stretch"


def test_load_by_name_and_by_path_agree():
    by_name = load_workload("creative")
    by_str_path = load_workload(str(WORKLOADS_DIR / "creative.json"))
    by_path = load_workload(WORKLOADS_DIR / "creative.json")
    assert by_name == by_str_path == by_path
    assert by_name.texts() == [p.text for p in by_name.prompts]


# -- errors ---------------------------------------------------------------------
def test_unknown_name_lists_the_shipped_sets():
    with pytest.raises(WorkloadError, match="unknown workload 'nope'.*code-editing"):
        load_workload("nope")


def test_missing_file_and_error_type(tmp_path):
    with pytest.raises(WorkloadError, match="not found"):
        load_workload(tmp_path / "absent.json")
    assert issubclass(WorkloadError, ValueError)


def test_bad_json_says_where(tmp_path):
    path = write(tmp_path, '{"name": "x",\n "prompts": [}')
    with pytest.raises(WorkloadError, match=r"not valid JSON.*line 2"):
        load_workload(path)


def test_not_utf8(tmp_path):
    path = tmp_path / "latin1.json"
    path.write_bytes(b'{"name": "caf\xe9"}')
    with pytest.raises(WorkloadError, match="not UTF-8"):
        load_workload(path)


def test_a_user_file_loads(tmp_path):
    w = load_workload(write(tmp_path, valid(12)))
    assert isinstance(w, Workload) and w.name == "my-set" and len(w.prompts) == 12
    assert w.prompts[3].id == "p3" and w.prompts[3].text == "def f3():\n"


def broken(change) -> dict:
    data = valid()
    change(data)
    return data


@pytest.mark.parametrize(
    "data, message",
    [
        ([], "top level must be an object"),
        (broken(lambda d: d.pop("description")), "missing field.*description"),
        (broken(lambda d: d.update(extra=1)), "unknown field.*extra"),
        (broken(lambda d: d.update(name="Has Spaces")), "name must be"),
        (broken(lambda d: d.update(name="")), "name must be"),
        (broken(lambda d: d.update(description="  ")), "description must be a non-empty"),
        (broken(lambda d: d.update(description="two\nlines")), "one line"),
        (broken(lambda d: d.update(prompts="def f():")), "prompts must be a list"),
        (valid(0), "at least one prompt, this one has none"),
        (broken(lambda d: d["prompts"][2].update(id="p1")), "prompt 3: duplicate id 'p1'"),
        (broken(lambda d: d["prompts"][0].update(text="")), "prompt 1 .p0.: text must be a non-empty"),
        (broken(lambda d: d["prompts"][0].update(text=" \n\t")), "text must be a non-empty"),
        (broken(lambda d: d["prompts"][4].update(text=7)), "prompt 5 .p4.: text must be"),
        (broken(lambda d: d["prompts"][0].update(id="")), "prompt 1: id must be"),
        (broken(lambda d: d["prompts"][0].update(id=3)), "prompt 1: id must be"),
        (broken(lambda d: d["prompts"][1].update(note="x")), "prompt 2 must be an object with exactly"),
        (broken(lambda d: d["prompts"].__setitem__(0, "text only")), "prompt 1 must be an object"),
    ],
)
def test_validation_rejects(tmp_path, data, message):
    with pytest.raises(WorkloadError, match=message):
        parse_workload(data)
    # through a file, the message also names the file
    with pytest.raises(WorkloadError, match="set.json: "):
        load_workload(write(tmp_path, data))


def test_boundaries_are_accepted():
    assert len(parse_workload(valid(MIN_PROMPTS)).prompts) == MIN_PROMPTS == 1
    assert len(parse_workload(valid(7)).prompts) == 7  # a user's own file of any size (issue 14)
    assert len(parse_workload(valid(60)).prompts) == 60


def test_a_code_model_is_tried_on_code_and_others_on_explanations():
    """What a pair from the Models page gets when the Lab has no workload (issue 30 #3)."""
    from engine.core.workloads import shipped_names, suggested_workload

    hub = "~/.cache/huggingface/hub/models--Qwen--Qwen2.5-Coder-1.5B-Instruct-GGUF/snapshots/x/q4_k_m.gguf"
    assert suggested_workload(hub) == "code-editing"
    assert suggested_workload("codellama-7b.Q4_K_M.gguf") == "code-editing"
    assert suggested_workload("Codestral-22B") == "code-editing"
    assert suggested_workload("gemma-3-270m-it-Q8_0.gguf") == "explanation"
    assert {suggested_workload("coder"), suggested_workload("llama")} <= set(shipped_names())
