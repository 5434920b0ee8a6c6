"""The coordinate check's analysis (deck §7d): read the per-job ``coord.csv`` records, set each
layer's change from step 0 against width (or depth), and give a verdict in exponents.

- ``coord.csv``: long form, one row per (width, depth, param, seed, step, layer, role, value);
- ``coord.png``: in the style of microsoft/mup's coordinate-check plots (``figure.py``), with a row for the
  step the verdict judges (the last);
- the exponents (``exponents.py``): per parameterisation and probe point, the slope of log(change) on
  log(width) (or log(depth)) at the last step, with a bootstrap interval over seeds, beside the exponent its
  registration expects (``nn.param.expected_exponent``: 0 along an axis its declared kind is stable across; SP
  declares its own);
- the verdict reads each parameterisation's declared kind (``About.kind``), never its name. The ones under test
  are those whose kind is stable across the axis (µP across width; depth-µP, CompleteP across depth): each
  passes when the exponent of each of its key points (the logits and the last residual stream; across depth the
  last stream and the per-block update times depth) lies within ``tolerance`` of 0. The others (kind
  ``neither``: SP; across depth µP too) are baselines: one "grows" when a key point's exponent exceeds
  ``tolerance``, which shows the check can see growth. A baseline that did not grow has saturated (it moved as far
  as it can at every width) or barely moved, and is reported as inconclusive with the fix; it never fails the
  check. The verdict line states the rule it applied. A parameterisation without a declared kind is shown and
  not judged.
- ``blocks/update_x_depth`` (across depth): the mean change of every block's two branch outputs, times the number
  of blocks, i.e. each block's share of a stream change that should not depend on depth.

The command that trains the jobs is ``python -m initnorm.coord_check`` (initnorm/cli/coord_check.py).
"""

from __future__ import annotations

import csv
import io
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path

from initnorm.errors import ConfigError, bad_value
from initnorm.instruments.coord.exponents import Exponent, changes, exponent_table, exponents, seed_mean, signed
from initnorm.instruments.coord.figure import coord_check_png
from initnorm.nn.param import KINDS, PARAMS, stable_across
from initnorm.results import write_atomic
from initnorm.safe_files import NotAFile, read_bounded

log = logging.getLogger(__name__)
COORD_FILE = "coord.csv"  # what CoordCheck (callback.py) writes into each job folder, one row per step x probe point
FIELDS = ["width", "depth", "param", "seed", "step", "layer", "role", "value"]
STAT = "coord_delta_rms"  # the one statistic the check records: each probe point's RMS change from step 0

MAX_COORD_BYTES = 256 * 2**20  # a job's coord.csv: one row per step x probe point (a few MB for the largest checks)
BLOCK_UPDATE = "blocks/update_x_depth"
KEY_LAYERS = ("logits/output", "stream/last", BLOCK_UPDATE)
TOLERANCE = 0.25  # the largest |exponent| that counts as flat: 2^0.25 = 1.19x per doubling of the axis
FIX = "rerun with a smaller lr or fewer steps (a baseline that moved as far as it can at every size cannot grow)"


def kind(param: str) -> str:
    """The parameterisation's declared kind (``neither``, ``width``, ``width+depth``; empty: none declared)."""
    return PARAMS.about(param, strict=False).kind


def display_name(param: str) -> str:
    """What the tables and the verdict print for ``param`` (its display name: ``µP``)."""
    return PARAMS.display(param)


def read_rows(folder: Path) -> list[dict]:
    """Every ``coord.csv`` row below ``folder`` (the combined file itself excluded), typed."""
    rows = []
    for path in sorted(Path(folder).rglob(COORD_FILE)):
        if path.parent == Path(folder):
            continue
        try:  # a file of the job folder: a FIFO or a link there is not read (initnorm/safe_files.py)
            text = read_bounded(path, MAX_COORD_BYTES).decode("utf-8")
        except (NotAFile, UnicodeDecodeError) as exc:
            log.warning("ignored %s: %s, not a coord.csv initnorm wrote", path, exc if isinstance(exc, NotAFile) else "not UTF-8")
            continue
        for r in csv.DictReader(io.StringIO(text, newline="")):
            rows.append({**r, "width": int(r["width"]), "depth": int(r["depth"]) if r["depth"] else None, "step": int(r["step"]),
                         "statistic": STAT, "value": float(r["value"])})
    if not rows:
        raise ConfigError(f"no {COORD_FILE} below {folder}; run `python -m initnorm.coord_check` or a multirun with experiment=coord_check "
                          "first")
    return rows


def combined_csv(rows: list[dict]) -> str:
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=FIELDS, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    w.writerows(sorted(rows, key=lambda r: (r["param"], r["depth"], r["width"], r["step"])))
    return out.getvalue()


def coord_axis(rows: list[dict]) -> str:
    """``width`` or ``depth``: the one the coordinate check's rows vary (one at a time)."""
    widths, depths = {r["width"] for r in rows}, {r["depth"] for r in rows}
    if len(widths) > 1 and len(depths) > 1:
        raise bad_value("--widths/--depths", f"{sorted(widths)} x {sorted(depths)}",
                        "one axis at a time: several widths at one depth, or several depths at one width", "--depths 2")
    return "width" if len(widths) > 1 or len(depths) == 1 else "depth"


def curves(rows: list[dict], axis: str, step: int) -> dict[str, dict[str, dict[int, float]]]:
    """param -> "layer/role" -> axis value -> change at ``step`` (the geometric mean over seeds), for layers present
    at every axis value."""
    out: dict[str, dict[str, dict[int, float]]] = {}
    for param, points in changes(rows, axis, step).items():
        layers = {point: seed_mean(by_seed) for point, by_seed in points.items()}
        if axis == "depth":
            layers[BLOCK_UPDATE] = block_update(rows, param, step)
        xs = set().union(*(v.keys() for v in layers.values()))
        out[param] = {k: v for k, v in layers.items() if v and set(v) == xs}
    return out


def block_updates(rows: list[dict], param: str, step: int) -> dict[object, dict[int, float]]:
    """seed -> depth -> the mean RMS change of every block's two branch outputs (attention, MLP) times the
    depth: each block's share of the stream's change, flat when the blocks together move the stream
    by the same amount at every depth (CompleteP: each block by 1/L of it)."""
    values: dict[object, dict[int, list[float]]] = {}
    for r in rows:
        if r["param"] == param and r["step"] == step and r["layer"].startswith("block_") and r["role"] in ("attn_out", "mlp_out"):
            values.setdefault(r["seed"], {}).setdefault(r["depth"], []).append(r["value"])
    return {seed: {d: d * sum(v) / len(v) for d, v in by_depth.items()} for seed, by_depth in values.items()}


def block_update(rows: list[dict], param: str, step: int) -> dict[int, float]:
    """depth -> the per-block update times depth (``block_updates``), the geometric mean over seeds."""
    by_seed = block_updates(rows, param, step)
    return seed_mean(by_seed) if by_seed else {}


def ratio(values: dict[int, float]) -> float:
    lo, hi = min(values.values()), max(values.values())
    return hi / lo if lo > 0 else math.inf


def table(data, axis: str, step: int, seeds: int = 1) -> str:
    xs = sorted({x for layers in data.values() for v in layers.values() for x in v})
    out = io.StringIO()
    out.write(f"RMS change from step 0 after step {step}, by {axis}{' (geometric mean over seeds)' if seeds > 1 else ''}\n")
    out.write(f"{'param':9s} {'layer':22s} " + " ".join(f"{x:>7d}" for x in xs) + "\n")
    for param in ordered(data):
        for layer, v in sorted(data[param].items(), key=lambda kv: (kv[0] not in KEY_LAYERS, kv[0])):
            out.write(f"{display_name(param):9s} {layer:22s} " + " ".join(f"{v[x]:7.3g}" for x in xs) + "\n")
    return out.getvalue()


def ordered(params) -> list[str]:
    """By declared kind (the baseline, width-stable, depth-stable, then none declared), then by name."""
    rank = {k: i for i, k in enumerate(KINDS)}
    return sorted(params, key=lambda p: (rank.get(kind(p), len(KINDS)), p))


def verdict(exps: dict[str, dict[str, Exponent]], axis: str, tolerance: float = TOLERANCE) -> tuple[bool, str]:
    """The parameterisations whose declared kind is stable across ``axis`` pass when every key point's exponent lies
    within ``tolerance`` of 0; the others (baselines) grow when a key point's exponent exceeds ``tolerance``, and are
    inconclusive (with the fix) when none does, which never fails the check."""
    keys = (("stream/last", BLOCK_UPDATE) if axis == "depth" else ("logits/output", "stream/last"))
    judged = {p: {k: exps[p][k] for k in keys if k in exps.get(p, {})} for p in ordered(exps) if kind(p)}
    judged = {p: v for p, v in judged.items() if v}
    under_test = [p for p in judged if stable_across(kind(p), axis)]
    baselines = [p for p in judged if p not in under_test]
    if axis not in ("width", "depth") or not under_test:
        shown = ", ".join(display_name(p) for p in judged) or "none with a declared kind"
        return True, (f"no verdict: it needs a parameterisation whose declared kind is stable across {axis} (µP across width; "
                      f"depth-µP or CompleteP across depth); here: {shown}")
    ok, said = True, []
    for p in under_test:
        off = {k: e for k, e in judged[p].items() if not abs(e.fit.value) <= tolerance}
        ok &= not off
        points = ", ".join(f"{k} {_exp(e)}" for k, e in judged[p].items())
        said.append(f"{display_name(p)} (under test): {points}: "
                    + ("width-stable" if axis == "width" and not off else "depth-stable" if not off
                       else f"NOT {axis}-stable ({', '.join(off)} {'grows' if max(e.fit.value for e in off.values()) > 0 else 'shrinks'})"))
    for p in baselines:
        grows = [k for k, e in judged[p].items() if e.fit.value > tolerance]
        points = ", ".join(f"{k} {_exp(e)}" for k, e in judged[p].items())
        how = f"grows ({', '.join(grows)})" if grows else f"inconclusive: it did not grow; {FIX}"
        said.append(f"{display_name(p)} (baseline): {points}: {how}")
    if not baselines:
        said.append(f"no baseline (a parameterisation of kind neither, SP) shows that the check sees growth across {axis}")
    rule = (f"rule: under test, each key point's exponent within ±{tolerance:g} of 0; a baseline grows when one exceeds {tolerance:g}, "
            "and one that does not is inconclusive, which does not fail the check")
    return ok, "; ".join(said) + f". Verdict: {'PASS' if ok else 'FAIL'} ({rule})"


def _exp(e: Exponent) -> str:
    shown = f"exponent {signed(e.fit.value)}"
    if e.fit.resamples:
        shown += f" [{e.fit.lo:+.2f}, {e.fit.hi:+.2f}]"
    return shown + (f" (expected {signed(e.expected)})" if e.expected is not None else "")


def judged_step(rows: list[dict]) -> int:
    """The step the verdict judges: the last recorded."""
    return max(r["step"] for r in rows)


def panels(rows: list[dict], axis: str, steps=(1, 2, 5, 10)) -> dict[int, dict[str, dict[str, dict[int, float]]]]:
    """The curves at the steps the picture shows (those of ``steps`` that were recorded, and always the step the
    verdict judges), parameterisations in table order."""
    recorded = sorted({r["step"] for r in rows})
    shown = sorted({s for s in steps if s in recorded} | {judged_step(rows)})
    out = {}
    for step in shown:
        data = curves(rows, axis, step)
        out[step] = {p: data[p] for p in ordered(data)}
    return out


# What the unit-scale check (instruments/unitscale) writes in a job's folder; its first line is the verdict.
UNIT_FILE = "unit_scale.txt"


def unit_lines(folder: Path) -> str:
    """One line per job below ``folder`` that ran the unit-scale check (``-- +callbacks.unit._target_=...``): its verdict."""
    out = []
    for f in sorted(folder.rglob(UNIT_FILE)):
        try:
            first = (read_bounded(f, MAX_COORD_BYTES).decode("utf-8").splitlines() or ["(empty)"])[0]
        except (NotAFile, UnicodeDecodeError) as exc:
            first = f"not read ({exc if isinstance(exc, NotAFile) else 'not UTF-8'})"
        out.append(f"unit scale, {f.parent.relative_to(folder)}: {first}\n")
    return "".join(out)


@dataclass(frozen=True)
class CoordReport:
    """A coordinate check judged: its flat ``records`` (one dict per width, depth, param, seed, step, layer and role:
    ``value`` is the RMS change from step 0, ``statistic`` names it), the ``axis`` they vary, the verdict (``ok``),
    ``exponents`` (param -> point -> ``Exponent`` at the judged step) and ``text`` (the table at the judged step, the
    exponents and the verdict's line). ``png()`` draws its figure; ``save(folder)`` writes ``coord.csv``,
    ``verdict.txt``, ``exponents.md`` and ``coord.png``, the files ``initnorm-coord-check`` leaves."""

    records: list[dict]
    axis: str
    ok: bool
    text: str
    tolerance: float = TOLERANCE
    exponents: dict = field(default_factory=dict)
    optimizer: str = "adamw"

    @property
    def step(self) -> int:
        """The step the verdict judges (the last recorded), which the figure always shows."""
        return judged_step(self.records)

    def markdown(self) -> str:
        """The exponent table as a document shows it."""
        return exponent_table(self.exponents, self.axis, self.step, self.optimizer, ordered(self.exponents), KEY_LAYERS, display_name,
                              markdown=True)

    def png(self) -> bytes:
        """The figure in the style of microsoft/mup's coordinate-check plots (``figure.py``)."""
        names = {r["param"]: display_name(r["param"]) for r in self.records}
        return coord_check_png(panels(self.records, self.axis), self.axis, names, KEY_LAYERS, judged=self.step)

    def save(self, folder: str | Path, text: str | None = None) -> None:
        """``coord.csv`` (every record), ``verdict.txt`` (``text``, default this report's), ``exponents.md`` and ``coord.png``
        in ``folder``."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        write_atomic(folder / COORD_FILE, combined_csv(self.records))
        write_atomic(folder / "verdict.txt", self.text if text is None else text)
        write_atomic(folder / "exponents.md", self.markdown())
        write_atomic(folder / "coord.png", self.png())


def judge(records: list[dict], tolerance: float = TOLERANCE, optimizer: str = "adamw") -> CoordReport:
    """The verdict on a coordinate check's records, wherever they were measured (the jobs of initnorm-coord-check, read
    back from their ``coord.csv``, or ``initnorm.coord_check``'s plain loop): each point's change against the axis the
    records vary at their last step, its exponent beside the one expected under ``optimizer``, judged by each
    parameterisation's declared kind (``verdict``)."""
    axis = coord_axis(records)
    step = judged_step(records)
    data = curves(records, axis, step)
    extra = {p: {BLOCK_UPDATE: block_updates(records, p, step)} for p in data} if axis == "depth" else {}
    extra = {p: v for p, v in extra.items() if v[BLOCK_UPDATE]}
    exps = exponents(records, axis, step, optimizer, extra)
    if axis == "depth":  # block_02 is the last block at depth 2 and an early one at depth 8: only whole-model points compare
        exps = {p: {k: e for k, e in points.items() if k in KEY_LAYERS} for p, points in exps.items()}
    ok, line = verdict(exps, axis, tolerance)
    shown = exponent_table(exps, axis, step, optimizer, ordered(exps), KEY_LAYERS, display_name)
    text = table(data, axis, step, len({r["seed"] for r in records})) + "\n" + shown + "\n" + line + "\n"
    return CoordReport(records, axis, ok, text, tolerance, exps, optimizer)


def summarize(folder: Path, tolerance: float = TOLERANCE, optimizer: str = "adamw") -> tuple[bool, str]:
    """Read every job's ``coord.csv`` below ``folder``, ``judge`` them and write the combined CSV, PNG, exponents and
    ``verdict.txt`` (with the unit-scale check's verdict of each job that ran it, which does not change the exit status)."""
    report = judge(read_rows(folder), tolerance, optimizer)
    text = report.text + unit_lines(folder)
    report.save(folder, text)
    return report.ok, text
