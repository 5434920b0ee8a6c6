import pytest
import torch

from initnorm.data.corpus import load_corpus, locate
from initnorm.data.modules import WindowStream, fixed_windows
from initnorm.errors import ConfigError


def test_alice_normalised_to_28_symbols():
    c = load_corpus("alice")
    assert c.symbols == " .abcdefghijklmnopqrstuvwxyz"
    n = len(c.train) + len(c.val)
    assert 130_000 < n < 140_000  # about 135,000 characters
    assert len(c.train) == int(n * 0.9)
    text = c.decode(c.train[:40].tolist())
    assert text.startswith("chapter i.down the rabbit hole")


def test_shakespeare_keeps_every_character():
    c = load_corpus("shakespeare")
    assert c.vocab_size == 65
    assert len(c.train) == int(1_115_394 * 0.9)


def test_windows_are_seeded_and_shifted():
    c = load_corpus("alice")
    a = next(iter(WindowStream(c.train, 32, 4, seed=1)))
    b = next(iter(WindowStream(c.train, 32, 4, seed=1)))
    other = next(iter(WindowStream(c.train, 32, 4, seed=2)))
    assert a[0].equal(b[0]) and not a[0].equal(other[0])
    assert a[0][:, 1:].equal(a[1][:, :-1])
    x, y = fixed_windows(c.val, 32)
    assert x.shape[1] == 32 and x[:, 1:].equal(y[:, :-1])


def test_missing_path_is_one_clear_line(tmp_path):
    with pytest.raises(ConfigError, match="data.path="):
        locate("alice", str(tmp_path / "nope.txt"))


def test_bad_checksum_is_reported(tmp_path, monkeypatch):
    (tmp_path / "alice_pg11.txt").write_text("not alice")
    monkeypatch.setenv("INITNORM_DATA_DIR", str(tmp_path))
    with pytest.raises(ConfigError, match="sha256"):
        locate("alice")


def test_offline_without_copy_says_where_to_put_it(tmp_path, monkeypatch):
    monkeypatch.delenv("INITNORM_DATA_DIR", raising=False)
    monkeypatch.setenv("INITNORM_CACHE", str(tmp_path))
    import urllib.request

    def offline(*a, **k):
        raise OSError("network unreachable")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    with pytest.raises(ConfigError, match=str(tmp_path)):
        locate("shakespeare")


def test_a_corpus_is_read_once_per_process_and_again_when_its_file_changes(tmp_path, monkeypatch):
    # Kept per process (a sweep's jobs read it again and again), keyed by the file's identity: an edit is read anew.
    from initnorm.data import corpus

    text = tmp_path / "own.txt"
    text.write_text("abab" * 100)
    first = corpus.load_corpus("own", str(text))
    monkeypatch.setattr(corpus, "keep_all", lambda raw: pytest.fail("normalised again"))
    again = corpus.load_corpus("own", str(text))
    assert again.symbols == "ab" and torch.equal(again.train, first.train) and again.train is not first.train
    text.write_text("xyz" * 100)
    monkeypatch.undo()
    assert corpus.load_corpus("own", str(text)).symbols == "xyz"
