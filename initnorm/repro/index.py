"""The index at the top of ``results/README.md``: one row per folder of ``results/`` (what it is, the command, the
time it took, its reading in one line), so that a newcomer finds every experiment from one page.

The documents' experiments (``reproduce.EXPERIMENTS``) give their row themselves: the title, ``timing.json``'s command
and seconds, and the first sentence of the **Reading.** paragraph of their NOTES.md. The experiments made by hand
beyond the documents (several commands each, their folders written by the person who ran them) are listed in
``ELSEWHERE``, each with the page that holds its commands and wall times. ``tests/test_reproduce.py`` holds that
every folder below ``results/`` is linked from the index.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Elsewhere:
    """A results folder made by hand: what it is, its commands and times in brief (``page`` has them in full), its reading."""

    key: str
    what: str
    command: str
    time: str
    reading: str
    page: str = "NOTES.md"


ELSEWHERE = [
    Elsewhere(
        "own_model",
        "Your own model (issue 24): examples/nanogpt.py and Hugging Face's GPT-2 as `model=custom` under SP and µP: "
        "coordinate checks over widths 64-512 and transfer sweeps over widths 64-256 (3 seeds, 150 steps)",
        "`python -m initnorm.coord_check --widths 64,128,256,512 --lr 0.002 -- model=custom model._target_=examples.nanogpt.GPT ...` "
        "and `python -m initnorm.train -m model=custom ... param=sp,mup width=64,128,256 ...`: seven commands",
        "72 min in all (77 s to 34 min each), on a shared machine (load 4-9)",
        "µP's coordinate check passes at lr 0.002 (logits within 1.21x across 8x the width, SP's grow 2.17x) and fails at 0.01; "
        "in both transfer sweeps SP's optimum falls at least 1.77 octaves from width 64 to 256, while µP's moves less than an "
        "octave, which three seeds of 150 steps do not call a transfer.",
    ),
    Elsewhere(
        "search_transfer",
        "Tune small, transfer large (issue 25): the chapter's wide MLP searched at width 64 (24 trials, seeds 0-2) under µP "
        "and SP, transferred to widths 256 and 1,024 with initnorm-transfer, read against chapter_mup's grid",
        "`python -m initnorm.train -m experiment=mup_mlp_sweep hparams_search=lr_base param=mup width=64 ...`, then "
        "`python -m initnorm.cli.transfer search_mup width=256,1024 ... --grid results/chapter_mup`: six commands",
        "12 min in all (98-148 s each), load 2-9",
        "SP's search lands 0.07 octaves from the grid's optimum and its rate costs 0.20-0.22 nats at width 1,024 (the "
        "chapter's report: 0.23); µP's pick sits 0.30 octaves low on width 64's flat floor and costs 0.021-0.028 nats there, "
        "more than the report's 0.007 but an eighth to a tenth of SP's.",
    ),
    Elsewhere(
        "umup_transfer",
        "u-µP beside SP, µP and CompleteP (issue 28): the Decoder's learning-rate transfer over widths 16-256 and depths 2-8 "
        "(300 steps, seeds 1-3), and four tests of u-µP's optimum at width 64",
        "`python -m initnorm.train -m experiment=mup_sweep steps=300 seed=1,2,3 param=umup width=16,64,256 lr=... "
        "hydra/launcher=vectorized`: eleven commands",
        "95 min in all (48-1,406 s each), load 0.6-9",
        "Across width µP's optimum stays at 2^-5 and SP's falls 4.35 octaves from 16 to 256; u-µP's stays at 2^-2, two "
        "octaves below the paper's 1, with the lowest loss at widths 64 and 256; across depth CompleteP's optimum stays "
        "(-0.04 octave) while µP's falls 1.18 and u-µP's rises 0.77.",
        page="README.md",
    ),
    Elsewhere(
        "batch_transfer",
        "Transfer across batch size (issue 38): the Decoder at width 64, SP beside µP, lr 2^-9 ... 2^-3 x batch 8-128 at "
        "512 steps and at a fixed 524,288 characters (tiny Shakespeare, 3 seeds); kept from before, SP at 128 steps and "
        "the chapter's wide MLP at width 256, batch 32-512",
        "`python -m initnorm.train -m experiment=mup_sweep data=shakespeare width=64 seed=1,2,3 param=sp,mup lr=... "
        "steps=512 batch_size=8,16,32,64,128 hydra/launcher=vectorized ...` and one command per batch at a fixed "
        "steps x batch: six commands",
        "55 min in all this stop (1,851 s and 199-434 s each), shared machine (load 1.1-4.0)",
        "Neither rule held: at a fixed number of tokens the optimum rose +0.26 [+0.13, +0.28] (SP) and +0.16 [+0.07, "
        "+0.23] (µP) octave per doubling of the batch, against sqrt's +0.5 and linear's +1; at 512 steps µP's held "
        "(+0.04 [-0.01, +0.06]); the loss at fixed data rose from batch 8 on, so the grid lies past the critical batch.",
        page="README.md",
    ),
    Elsewhere(
        "horizon_transfer",
        "Transfer across the training horizon (issue 38): the default Decoder, lr 2^-9 ... 2^-3 x 375 ... 6,000 steps "
        "(tiny Shakespeare, 3 seeds), under cosine, linear decay to zero and wsd with horizon forks",
        "`python -m initnorm.train -m data=shakespeare seed=1,2,3 steps=375,750,1500,3000,6000 lr=... schedule=cosine`, "
        "`schedule=linear_to_zero` and `schedule=wsd`: six commands",
        "42 min in all (228-611 s each), shared machine (load 0.3-4.0)",
        "wsd's optimum falls -0.56 [-0.75, -0.48] octave per doubling of the steps, steeper than Bjorck et al.'s -0.32; "
        "cosine's (-0.05 [-0.50, +0.01]) and linear decay's (-0.32 [-0.55, -0.00]) hold both -0.32 and 0; wsd's forks "
        "trained 106,815 of 174,375 steps, every record equal to the separate runs' bit for bit.",
        page="README.md",
    ),
    Elsewhere(
        "weight_decay_horizon",
        "Weight decay x horizon (issue 38): the default Decoder at lr 2^-5, AdamW's decay 2^-4 ... 2^0 at 375 and 1,500 "
        "steps, and carried from 375 steps by Wang & Aitchison's timescale-as-a-fraction rule (3 seeds)",
        "`python -m initnorm.train -m data=shakespeare seed=1,2,3 lr=0.03125 optim.weight_decay=... steps=375,1500` and "
        "`steps=1500 optim.weight_decay_rule=fraction transfer.base.steps=375`: two commands",
        "52 min in all (1,717 s and 1,398 s), shared machine (load 3.6-19)",
        "The optimal decay fell -0.37 [-0.73, -0.02] octave per doubling of the steps: between the timescale held in "
        "iterations (0) and held as a fraction of the run (-1); neither rule held.",
        page="README.md",
    ),
    Elsewhere(
        "muon_transfer",
        "Muon's learning-rate transfer by `optim.muon_scale` (issue 46, item 3): lr x width for AdamW SP, AdamW µP "
        "and Muon `original`, `match_rms_adamw`, `spectral` under µP on the Decoder (widths 16-128; 200 steps, seeds "
        "1-3) and on the chapter's MLP (widths 64-512); `match_rms_adamw` with the AdamW part held fixed "
        "(`optim.adamw_lr`); a depth axis (2-8 blocks, widths 32 and 64) under depth-µP and CompleteP; coordinate checks and Spectral/ "
        "tags per configuration",
        "`python -m initnorm.train -m experiment=muon_transfer steps=200 seed=1,2,3 param=mup optim=muon "
        "optim.muon_scale=original,match_rms_adamw,spectral lr=...`, `experiment=mup_mlp_sweep ...` and "
        "`python -m initnorm.coord_check ...`: thirty-two commands",
        "two rounds: about 65 min of sweeps (16:09-17:12, load 7.8-28) and 52 min (22:35-23:26, load 1.7-8.8), shared "
        "machine",
        "Muon `original` transfers on the Decoder (exponent +0.04 [+0.02, +0.07] over widths 16-128) and on the MLP "
        "(-0.00 [-0.02, +0.02] over 64-512), `spectral` too (+0.05 [+0.01, +0.08]; on the MLP it equals `original` bit "
        "for bit); `match_rms_adamw` does not (-0.25 [-0.27, -0.24] and -0.25 [-0.26, -0.24]), and with its AdamW "
        "part held fixed its slope becomes -0.56 [-0.59, -0.54] on the Decoder, near the -0.5 its sqrt(width) factor "
        "predicts (-0.34 [-0.36, -0.27] on the MLP); with Muon, CompleteP holds the rate across depth (-0.19 and "
        "-0.14 octave from 2 to 8 blocks at widths 32 and 64) and depth-µP is borderline.",
        page="README.md",
    ),
]


# Readings whose first sentence tells one side only (SP's, or µP's): their first two.
SENTENCES = {"chapter_mup": 2, "depth_transfer": 2}


def reading(notes: str, sentences: int = 1) -> str:
    """The first ``sentences`` sentences of a NOTES.md's **Reading.** paragraph, on one line ('' without one)."""
    sentence = r"(?:.*?\.(?=\s+[A-Z*(`]|\s*$)\s*)"
    found = re.search(rf"\*\*Reading\.\*\*\s+({sentence}{{{sentences}}})", notes, flags=re.DOTALL)
    return " ".join(found.group(1).split()) if found else ""


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 60 else f"{seconds / 60:.1f} min"


def _subfolders(folder: Path, key: str) -> str:
    subs = sorted(p.name for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []
    return (" Folders: " + ", ".join(f"[{s}]({key}/{s}/)" for s in subs) + ".") if subs else ""


def rows(results: Path, experiments) -> list[str]:
    """The index table: a row per documents' experiment that ran into ``results`` and per folder of ``ELSEWHERE`` there."""
    out = ["| folder | what | command | time | reading |", "|---|---|---|---|---|"]
    for exp in experiments:
        timing = results / exp.key / "timing.json"
        if not timing.is_file():
            continue
        t = json.loads(timing.read_text(encoding="utf-8"))
        notes = results / exp.key / "NOTES.md"
        said = reading(notes.read_text(encoding="utf-8"), SENTENCES.get(exp.key, 1)) if notes.is_file() else ""
        command = t.get("command", f"python -m {exp.module} {' '.join(exp.args)}")
        extra = " (an extra: run when named)" if exp.extra else ""
        out.append(f"| [{exp.key}]({exp.key}/) | {exp.title}{extra} | `{command}` | {_duration(t['seconds'])} | {said} |")
    for e in ELSEWHERE:
        if (results / e.key).is_dir():
            what = f"{e.what}.{_subfolders(results / e.key, e.key)}"
            out.append(f"| [{e.key}]({e.key}/{e.page}) | {what} | {e.command} ({e.page} lists each) | {e.time} | {e.reading} |")
    return out
