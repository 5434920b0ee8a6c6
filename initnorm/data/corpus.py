"""Character corpora: find (or download) the text, check its sha256, normalise, encode, split.

Where a corpus is looked for, in order: ``data.path`` if given; ``$INITNORM_DATA_DIR``; the
cache folder (``$INITNORM_CACHE``, default ``~/.cache/initnorm``); then a download into the
cache, checked against the sha256 below. The sources are the URLs in ``SOURCES``.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import re
import secrets
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from initnorm import envvars
from initnorm.errors import ConfigError
from initnorm.safe_files import file_kind

# The sentence end the Alice normaliser keeps: a run of non-letters that ends a sentence becomes
# "." instead of " ". It is the Decoder's 28th symbol (the deck counts 28 but does not name it).
SENTENCE_END = "."


def normalise_alice(raw: str) -> str:
    """Gutenberg #11 body from the text's "CHAPTER I." (not the contents') to "THE END", lowercased;
    every run of non-letters becomes one symbol: "." if it holds . ! or ?, else a space."""
    start, end = raw.find("*** START"), raw.find("*** END")
    body = raw[max(start, 0) : end if end >= 0 else len(raw)]
    first = body.find("CHAPTER I.")
    begin = body.find("CHAPTER I.", first + 1)  # the second one: the first is in the table of contents
    if first < 0:
        raise ConfigError("the Alice text has no 'CHAPTER I.': is data.path the Project Gutenberg #11 file?")
    begin = begin if begin >= 0 else first
    stop = body.find("THE END", begin)
    text = body[begin : stop + len("THE END") if stop >= 0 else len(body)].lower()
    return re.sub(r"[^a-z]+", lambda m: SENTENCE_END if re.search(r"[.!?]", m.group()) else " ", text).strip()


def keep_all(raw: str) -> str:
    """Every character is a symbol (tiny Shakespeare: 65 of them)."""
    return raw


@dataclass(frozen=True)
class Source:
    file: str
    url: str
    sha256: str
    normalise: Callable[[str], str]


SOURCES = {
    "alice": Source(
        "alice_pg11.txt",
        "https://www.gutenberg.org/cache/epub/11/pg11.txt",
        "675dcebbb8d3acf2f4580958588f871b07babd63bb822527bcb187de4c45ee17",
        normalise_alice,
    ),
    "shakespeare": Source(
        "tinyshakespeare.txt",
        "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",
        "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
        keep_all,
    ),
}


def cache_dir() -> Path:
    return Path(os.environ.get(envvars.CACHE, Path.home() / ".cache" / "initnorm"))


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def file_version(path: Path) -> tuple:
    """What tells one version of a file from another without reading it: a changed file has another key."""
    st = path.stat()
    return str(path.resolve()), st.st_ino, st.st_size, st.st_mtime_ns


# Per process: a sweep's jobs (and the preflight, the probe, a group's members) read the same corpus again and
# again; hashing, normalising and encoding Alice costs about as much as a short job's training steps.
_DIGESTS: dict[tuple, str] = {}
_ENCODED: dict[tuple, tuple[str, torch.Tensor]] = {}


def _verified(path: Path, source: Source) -> Path:
    key = file_version(path)
    digest = _DIGESTS.get(key) or sha256(path)
    if digest == source.sha256:
        _DIGESTS[key] = digest
    else:
        raise ConfigError(
            f"{path} has sha256 {digest[:12]}..., expected {source.sha256[:12]}...: a damaged or different copy; "
            f"delete it (it is downloaded again) or train on your own text with `data.path=/path/to/text.txt`"
        )
    return path


def _download(source: Source, target: Path) -> Path:
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        if not os.access(target.parent, os.W_OK):  # known before the download, not after it
            raise PermissionError(13, os.strerror(13), str(target.parent))
    except OSError as exc:  # a read-only HOME: say which folder, and the two ways around it
        raise ConfigError(
            f"the corpus cache folder {target.parent} cannot be written ({exc.strerror or exc}), so {source.file} cannot be downloaded "
            f"into it; set INITNORM_DATA_DIR to a folder that holds {source.file}, or INITNORM_CACHE to a writable folder, "
            f"or train on your own text with `data=text data.path=/path/to/text.txt`"
        ) from None
    try:
        with urllib.request.urlopen(source.url, timeout=30) as response:
            data = response.read()
    except OSError as exc:
        raise ConfigError(
            f"no copy of {source.file} and no network ({exc.__class__.__name__}); put the file at {target} "
            f"or set INITNORM_DATA_DIR to a folder that holds it, or fix it with `data.path=/path/to/{source.file}`"
        ) from None
    # A name of its own: the jobs of a parallel sweep may download at the same time.
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.part")
    try:
        tmp.write_bytes(data)
        _verified(tmp, source)
        tmp.replace(target)
    except OSError as exc:  # a full disk, or a folder that refused the file after all
        raise ConfigError(f"{source.file} was downloaded but cannot be written into {target.parent} ({exc.strerror or exc}); free space, "
                          f"or set INITNORM_CACHE to a writable folder (or INITNORM_DATA_DIR to one that holds {source.file})") from None
    finally:
        tmp.unlink(missing_ok=True)
    return target


def locate(name: str, path: str | None = None) -> Path:
    """The file for corpus ``name`` (or the user's ``path``), checked, downloading on first use."""
    if path:
        p = Path(path).expanduser()
        if not p.exists():
            raise ConfigError(f"data.path={path!r} does not exist; fix it with `data.path=/path/to/text.txt`")
        if not p.is_file():  # a folder, /dev/null, a FIFO (reading one would wait for a writer)
            raise ConfigError(f"data.path={path!r} is {file_kind(p.stat().st_mode)}, not a text file; fix it with "
                              "`data.path=/path/to/text.txt`")
        return p
    if name not in SOURCES:
        raise ConfigError(f"unknown corpus data.name={name!r}; known: {', '.join(sorted(SOURCES))}; fix it with "
                          f"`data.name={(difflib.get_close_matches(str(name), sorted(SOURCES), 1, 0.0) or ['alice'])[0]}` or "
                          "`data.path=/path/to/text.txt`")
    source = SOURCES[name]
    env = os.environ.get(envvars.DATA_DIR)
    if env and (Path(env) / source.file).is_file():
        return _verified(Path(env) / source.file, source)
    cached = cache_dir() / source.file
    if cached.is_file():
        return _verified(cached, source)
    return _download(source, cached)


@dataclass(frozen=True)
class Corpus:
    """Encoded text with its symbol table, split in order into train and validation."""

    symbols: str
    train: torch.Tensor
    val: torch.Tensor

    @property
    def vocab_size(self) -> int:
        return len(self.symbols)

    def encode(self, text: str) -> torch.Tensor:
        index = {c: i for i, c in enumerate(self.symbols)}
        return torch.tensor([index[c] for c in text], dtype=torch.long)

    def decode(self, ids) -> str:
        return "".join(self.symbols[i] for i in ids)


TRAIN_FRACTION = 0.9  # contiguous split: the first 90% trains, the rest validates


def load_corpus(name: str, path: str | None = None) -> Corpus:
    """Read, normalise with the corpus's own rule, encode, split contiguously (once per process and version of the file)."""
    rule = SOURCES[name].normalise if name in SOURCES else keep_all
    where = locate(name, path)
    key = (name, *file_version(where))
    if key not in _ENCODED:
        text = rule(where.read_text(encoding="utf-8"))
        symbols = "".join(sorted(set(text)))
        index = {c: i for i, c in enumerate(symbols)}
        ids = torch.tensor([index[c] for c in text], dtype=torch.long)
        if len(_ENCODED) >= 8:  # a few corpora per process at most; never a growing store
            _ENCODED.clear()
        _ENCODED[key] = symbols, ids
    symbols, ids = _ENCODED[key]
    ids = ids.clone()  # the caller's own: nothing it does reaches the next job's corpus
    n = int(len(ids) * TRAIN_FRACTION)
    return Corpus(symbols, ids[:n], ids[n:])
