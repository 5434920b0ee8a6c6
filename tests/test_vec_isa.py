"""training/vec_isa.py: the compiler's CPU check answered once per machine, and only where it would answer the same."""

import json
import platform

import pytest

from initnorm.training import vec_isa

pytest.importorskip("torch._inductor.cpu_vec_isa")
pytestmark = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="the check is x86's")

from torch._inductor import config
from torch._inductor import cpu_vec_isa as isa


def _advertised() -> list[str]:
    return vec_isa._advertised(isa, isa.x86_isa_checker())


class _Isa:
    def __init__(self, name):
        self.name = name

    def __str__(self):
        return self.name


@pytest.fixture
def probe(monkeypatch):
    """The compiler's own check, counted and answering ``answer`` (default: every advertised set passes)."""
    state = {"calls": 0, "answer": None}

    def valid():
        state["calls"] += 1
        names = state["answer"] if state["answer"] is not None else _advertised()
        return [_Isa(n) for n in names]

    monkeypatch.setattr(isa, "valid_vec_isa_list", valid)
    with config.patch({"cpp.vec_isa_ok": None}):  # as a fresh process starts; restored after the test
        yield state


def test_checked_once_then_kept_for_every_later_process(tmp_path, probe):
    assert vec_isa.settle(str(tmp_path)) == "checked" and probe["calls"] == 1
    assert config.cpp.vec_isa_ok is True  # the checking process compiles under the same setting (the cache's key)
    kept = json.loads((tmp_path / vec_isa.FILE).read_text())
    assert kept["valid"] == _advertised() and len(kept["key"]) == 64
    config.cpp.vec_isa_ok = None  # a new process
    assert vec_isa.settle(str(tmp_path)) == "kept" and probe["calls"] == 1
    assert config.cpp.vec_isa_ok is True


def test_a_set_that_failed_leaves_the_check_to_the_compiler(tmp_path, probe):
    probe["answer"] = _advertised()[1:]  # the widest set failed to build or load here
    assert vec_isa.settle(str(tmp_path)) == "checked"
    assert config.cpp.vec_isa_ok is None
    assert vec_isa.settle(str(tmp_path)) == "kept" and config.cpp.vec_isa_ok is None and probe["calls"] == 1


@pytest.mark.parametrize("text", ["not json", json.dumps({"key": "another machine", "valid": []}), json.dumps([1])])
def test_an_unreadable_or_foreign_answer_is_checked_again(tmp_path, probe, text):
    (tmp_path / vec_isa.FILE).write_text(text)
    assert vec_isa.settle(str(tmp_path)) == "checked" and probe["calls"] == 1
    assert json.loads((tmp_path / vec_isa.FILE).read_text())["valid"] == _advertised()


def test_the_users_own_answer_wins(tmp_path, probe):
    config.cpp.vec_isa_ok = False  # TORCHINDUCTOR_VEC_ISA_OK=0
    assert vec_isa.settle(str(tmp_path)) == "skipped" and probe["calls"] == 0
    assert config.cpp.vec_isa_ok is False and not (tmp_path / vec_isa.FILE).exists()


def test_a_cache_that_cannot_be_written_costs_only_the_next_check(tmp_path, probe):
    (tmp_path / "file").write_text("")
    assert vec_isa.settle(str(tmp_path / "file" / "below")) == "checked"  # a folder under a file: not made
    assert config.cpp.vec_isa_ok is True


def test_a_key_that_cannot_be_made_leaves_everything_to_the_compiler(tmp_path, monkeypatch, probe):
    def no_compiler(_isa, _flags):
        raise RuntimeError("no C++ compiler")  # the compiler's own check then fails, and says so, at the first compile

    monkeypatch.setattr(vec_isa, "_key", no_compiler)
    assert vec_isa.settle(str(tmp_path)) == "skipped" and probe["calls"] == 0
    assert config.cpp.vec_isa_ok is None and not (tmp_path / vec_isa.FILE).exists()


def test_by_default_the_answer_is_kept_in_the_compilers_own_cache_folder(tmp_path, monkeypatch, probe):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "cache"))  # as compiling.use_cache sets it
    assert vec_isa.settle() == "checked"
    assert (tmp_path / "cache" / vec_isa.FILE).is_file()


def test_avx512s_bf16_load_check_is_answered_from_the_kept_answer_not_a_new_process(tmp_path, probe, monkeypatch):
    """With ``vec_isa_ok`` the AVX-512 sets still build and load a bf16 probe, each in a fresh process (torch 2.13's
    ``VecAVX512.__bool__``); a kept answer says what that load gave, so no process starts (a compiled group's first step:
    three processes, about 0.35 s, fewer)."""
    sets = [s for s in isa.supported_vec_isa_list if hasattr(s, "_is_avx512_bf16_supported")]
    assert sets, "torch's AVX-512 sets carry _is_avx512_bf16_supported"
    assert vec_isa.settle(str(tmp_path)) == "checked"
    kept = json.loads((tmp_path / vec_isa.FILE).read_text())
    assert set(kept["bf16"]) == {str(s) for s in sets}  # what the check found, per set
    kept["bf16"] = {str(s): i % 2 == 0 for i, s in enumerate(sets)}
    (tmp_path / vec_isa.FILE).write_text(json.dumps(kept))
    monkeypatch.setattr("subprocess.run", lambda *a, **k: pytest.fail("a process started to load the bf16 probe"))
    config.cpp.vec_isa_ok = None  # a new process
    try:
        assert vec_isa.settle(str(tmp_path)) == "kept"
        assert [s._probe_load("any.so") for s in sets] == [i % 2 == 0 for i in range(len(sets))]
    finally:
        for s in sets:
            s.__dict__.pop("_probe_load", None)
    old = {k: v for k, v in kept.items() if k != "bf16"}  # an answer kept before the bf16 field: torch checks as before
    for answer in (old, {**old, "bf16": {str(s): "no" for s in sets}}):  # or one that is not a yes or no: the same
        (tmp_path / vec_isa.FILE).write_text(json.dumps(answer))
        config.cpp.vec_isa_ok = None
        assert vec_isa.settle(str(tmp_path)) == "kept" and all("_probe_load" not in s.__dict__ for s in sets)
