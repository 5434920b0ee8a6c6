"""The compiler's check of the CPU's vector instructions, answered once per machine instead of once per process.

Before its first C++ kernel, every process that compiles asks which of the CPU's vector instruction sets
(AVX2, AVX-512, ...) the C++ compiler can build for and load: one fresh process per set, about 1 s on a
2-core AMD EPYC (torch 2.13; ``torch._inductor.cpu_vec_isa.valid_vec_isa_list``). A sweep's every worker
paid it again on a warm compile cache, on its critical path. The answer depends only on the CPU, the C++
compiler and torch, so it is kept beside the compile cache, under a key naming those three; a process
whose answer (kept, or checked now and kept) is that every set the CPU advertises passed tells the compiler
so (``cpp.vec_isa_ok``), which then picks exactly what its own check would have picked. The process that
checks says so too: the setting is part of the compile cache's key, so every process must compile under the
same one, or the first to find the answer kept would miss the cache the checking one filled. Any other
answer (a set failed, a key differs, a file unreadable) leaves the check to the compiler, as before. The AVX-512
sets also check their bf16 instructions in one more fresh process each, whatever ``vec_isa_ok`` says: that load's
answer is kept too (``bf16``), and a later process is given it instead of starting them.

torch's private names, read from torch 2.13: ``torch._inductor.cpu_vec_isa`` and ``config.cpp.vec_isa_ok``.
A torch without them skips all of this.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import sys
from pathlib import Path

import torch

from initnorm.training.compiling import compiler_cache

FILE = "initnorm-vec-isa.json"


def _key(isa, flags: list[str]) -> str:
    """What the answer depends on: torch, the C++ compiler (its path, size and time) and the CPU's flags."""
    from torch._inductor.cpp_builder import get_cpp_compiler

    compiler = get_cpp_compiler()
    try:
        st = os.stat(compiler if os.path.isabs(compiler) else shutil.which(compiler))
        stamp = f"{st.st_size}:{st.st_mtime_ns}"
    except (OSError, TypeError):  # TypeError: not on PATH (which gave None)
        stamp = "?"
    text = f"{torch.__version__}|{sys.version}|{platform.machine()}|{compiler}|{stamp}|{' '.join(sorted(flags))}"
    return hashlib.sha256(text.encode()).hexdigest()


def _advertised(isa, flags: list[str]) -> list[str]:
    """The sets whose flags the CPU advertises: the compiler's candidates before its own check."""
    return [str(s) for s in isa.supported_vec_isa_list if all(f in flags for f in str(s).split())]


def settle(cache_dir: str | None = None) -> str:
    """Before a process's first compile: trust a kept answer, or check now and keep it, in ``cache_dir`` (default: the
    compiler's own cache folder). Returns what was done (``"kept"``, ``"checked"``, ``"skipped"``), for the tests."""
    try:
        from torch._inductor import config
        from torch._inductor import cpu_vec_isa as isa
    except ImportError:
        return "skipped"
    if platform.machine() not in ("x86_64", "AMD64") or config.cpp.vec_isa_ok is not None:
        return "skipped"  # another architecture, or the user (TORCHINDUCTOR_VEC_ISA_OK) already answered
    folder = cache_dir or compiler_cache()
    if folder is None:
        return "skipped"  # another torch: no folder to keep the answer in
    path = Path(folder) / FILE
    try:
        flags = isa.x86_isa_checker()
        key, advertised = _key(isa, flags), _advertised(isa, flags)
    except Exception:  # torch's internals moved, no compiler found: the compiler checks, and says so, as before
        return "skipped"
    try:
        kept = json.loads(path.read_text())
    except (OSError, ValueError):
        kept = None
    if isinstance(kept, dict) and kept.get("key") == key:
        done, valid, bf16 = "kept", kept.get("valid"), kept.get("bf16")
    else:
        done, valid = "checked", [str(s) for s in isa.valid_vec_isa_list()]  # the compiler's own check
        bf16 = _bf16(isa)
        _keep(path, {"key": key, "valid": valid, "bf16": bf16})
    if valid == advertised and advertised:
        config.cpp.vec_isa_ok = True
        if done == "kept" and isinstance(bf16, dict) and all(isinstance(v, bool) for v in bf16.values()):  # a file: data
            _answer_bf16(isa, bf16)
    return done


def _bf16(isa) -> dict[str, bool]:
    """What the compiler's check found of AVX-512's bf16 instructions, per set (it builds with -mavx512bf16 where so)."""
    return {str(s): bool(s._is_avx512_bf16_supported) for s in isa.supported_vec_isa_list if hasattr(s, "_is_avx512_bf16_supported")}


def _answer_bf16(isa, bf16: dict[str, bool]) -> None:
    """The AVX-512 sets check their bf16 instructions even when ``vec_isa_ok`` says the sets pass: a build and a fresh
    process that loads it, per set (three processes a worker here; a group's warm first step 1.3-1.5 s -> 1.07 s without
    them). The build is in the cache already; the load's answer is the one kept."""
    for s in isa.supported_vec_isa_list:
        if str(s) in bf16 and hasattr(s, "_is_avx512_bf16_supported"):
            s._probe_load = lambda _path, ok=bf16[str(s)]: ok


def _keep(path: Path, answer: dict) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{FILE}.{os.getpid()}")
        tmp.write_text(json.dumps(answer))
        os.replace(tmp, path)  # whole or not at all: another worker may be reading it
    except OSError:
        pass  # a read-only cache: the next process checks again
