"""The corpus check of a character task (schema.check_text) reads and cleans a file once per process and version:
a sweep's every job checks the same file (about 78 ms of CPU each for Alice), and a changed file is checked again."""

from pathlib import Path

import pytest

from initnorm import schema
from initnorm.errors import ConfigError


def text_config(path: Path) -> dict:
    return {"data": {"kind": "char_lm", "name": "text", "path": str(path), "context": 8}}


def test_a_text_is_read_once_per_version_and_a_shortened_file_is_refused_again(tmp_path, monkeypatch):
    f = tmp_path / "t.txt"
    f.write_text("abcdefghij" * 20)
    schema.check_text(text_config(f))

    def no_read(self):
        raise AssertionError(f"{self} read again")

    with monkeypatch.context() as m:
        m.setattr(Path, "read_bytes", no_read)
        schema.check_text(text_config(f))  # the same version: not read

    f.write_text("abc")  # another version (size and mtime): checked again, and now too short for one window
    with pytest.raises(ConfigError, match=r"gives 3 characters after cleaning.*data.context=8"):
        schema.check_text(text_config(f))
