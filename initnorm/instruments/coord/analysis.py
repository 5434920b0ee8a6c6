"""The coordinate check's analysis (deck §7d): read the per-job ``coord.csv`` records, set each
layer's change from step 0 against width (or depth), and give a verdict.

- ``coord.csv``: long form, one row per (width, depth, param, seed, step, layer, role, value);
- ``coord.png``: in the style of microsoft/mup's coordinate-check plots (``figure.py``);
- the verdict: per layer, the ratio of the largest to the smallest change across widths at the
  last step. What each parameterisation must show is its declared kind (``About.kind``,
  ``nn.param.stable_across``), never its name: a width-stable one (µP) passes when its logits'
  ratio is at most ``bound`` (1.5: "flat") and each baseline's (kind ``neither``: SP) "grows":
  its ratio above ``bound`` and its change larger at the widest than at the narrowest. The two
  words never describe one ratio: an SP at 1.48 is flat, whatever µP's is (it counted as growing
  while µP's ratio was smaller). The verdict line states the rule it applied.
- across depth (several depths at one width, ``depth_verdict``): a depth-stable parameterisation
  (``depth_mup``, ``completep``) passes when its last residual stream's change and its per-block
  update times the depth (``blocks/update_x_depth``: the mean change of every block's two branch
  outputs, times the number of blocks, i.e. each block's share of a stream change that should not
  depend on depth) stay within ``bound`` (max/min across depths); one that is not (µP, SP) passes
  when its last residual stream grows by more than ``bound`` from the shallowest to the deepest
  model, the depth dependence the depth variants remove. A parameterisation without a declared
  kind is shown and not judged.

The command that trains the jobs is ``python -m initnorm.coord_check`` (initnorm/cli/coord_check.py).
"""

from __future__ import annotations

import csv
import io
import logging
import math
from dataclasses import dataclass
from pathlib import Path

from initnorm.errors import ConfigError, bad_value
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
    """param -> "layer/role" -> axis value -> change at ``step``, for layers present at every axis value."""
    out: dict[str, dict[str, dict[int, float]]] = {}
    for r in rows:
        if r["step"] == step:
            out.setdefault(r["param"], {}).setdefault(f"{r['layer']}/{r['role']}", {})[r[axis]] = r["value"]
    for param, layers in out.items():
        xs = set().union(*(v.keys() for v in layers.values()))
        if axis == "depth":
            layers[BLOCK_UPDATE] = block_update(rows, param, step)
        out[param] = {k: v for k, v in layers.items() if set(v) == xs}
    return out


def block_update(rows: list[dict], param: str, step: int) -> dict[int, float]:
    """depth -> the mean RMS change of every block's two branch outputs (attention, MLP) times the
    depth: each block's share of the stream's change, flat when the blocks together move the stream
    by the same amount at every depth (CompleteP: each block by 1/L of it)."""
    values: dict[int, list[float]] = {}
    for r in rows:
        if r["param"] == param and r["step"] == step and r["layer"].startswith("block_") and r["role"] in ("attn_out", "mlp_out"):
            values.setdefault(r["depth"], []).append(r["value"])
    return {d: d * sum(v) / len(v) for d, v in values.items()}


def ratio(values: dict[int, float]) -> float:
    lo, hi = min(values.values()), max(values.values())
    return hi / lo if lo > 0 else math.inf


def table(data, axis: str, step: int) -> str:
    xs = sorted({x for layers in data.values() for v in layers.values() for x in v})
    out = io.StringIO()
    out.write(f"RMS change from step 0 after step {step}, by {axis}\n")
    out.write(f"{'param':5s} {'layer':22s} " + " ".join(f"{x:>7d}" for x in xs) + "  max/min\n")
    for param in ordered(data):
        for layer, v in sorted(data[param].items(), key=lambda kv: (kv[0] not in KEY_LAYERS, kv[0])):
            out.write(f"{display_name(param):5s} {layer:22s} " + " ".join(f"{v[x]:7.3g}" for x in xs) + f"  {ratio(v):7.2f}\n")
    return out.getvalue()


def ordered(params) -> list[str]:
    """By declared kind (the baseline, width-stable, depth-stable, then none declared), then by name."""
    rank = {k: i for i, k in enumerate(KINDS)}
    return sorted(params, key=lambda p: (rank.get(kind(p), len(KINDS)), p))


def depth_verdict(data, bound: float) -> tuple[bool, str]:
    """Across depth: the depth-transfer parameterisations' last residual stream and per-block update
    (times depth) stay within ``bound`` (max/min); µP's and SP's last residual stream grows by more."""
    parts, ok, checked = [], True, 0
    for param in ordered(data):
        stream, blocks = data[param].get("stream/last"), data[param].get(BLOCK_UPDATE)
        if not stream or len(stream) < 2 or not kind(param):
            continue
        shown = display_name(param)
        if stable_across(kind(param), "depth"):
            checked += 1
            flat = ratio(stream) <= bound and bool(blocks) and ratio(blocks) <= bound
            ok &= flat
            spread = f"{ratio(blocks):.2f}" if blocks else "not recorded"
            parts.append(f"{shown}: last stream max/min {ratio(stream):.2f}, block update x depth max/min {spread} "
                         f"({'flat' if flat else 'NOT flat'}: bound {bound})")
        else:
            checked += 1
            lo, hi = min(stream), max(stream)
            grows = stream[hi] / stream[lo] > bound
            ok &= grows
            parts.append(f"{shown}: last stream {stream[lo]:.3g} at depth {lo} -> {stream[hi]:.3g} at depth {hi} "
                         f"({'grows' if grows else 'does NOT grow'} by more than {bound}x)")
    if not checked:
        return True, "no verdict: it needs a parameterisation of a declared kind (mup, depth_mup, completep) across depths"
    rule = (f"rule: a depth-stable parameterisation's last stream and block update x depth within max/min {bound} across "
            f"depths, any other's last stream more than {bound}x larger at the deepest than at the shallowest")
    return ok, "; ".join(parts) + f". Verdict: {'PASS' if ok else 'FAIL'} ({rule})"


def verdict(data, axis: str, bound: float) -> tuple[bool, str]:
    """Each width-stable parameterisation's logits change (µP's) stays within ``bound`` (max/min across
    widths) while each baseline's (kind ``neither``: SP's) is larger and grows; across depth, ``depth_verdict``."""
    if axis == "depth":
        return depth_verdict(data, bound)

    def span(param):
        v = data.get(param, {}).get("logits/output")
        return None if not v else (v[min(v)], v[max(v)], ratio(v), min(v), max(v))

    spans = {p: span(p) for p in ordered(data) if span(p)}
    parts = [f"{display_name(p)} logits move {s[0]:.3g} at {axis} {s[3]} and {s[1]:.3g} at {axis} {s[4]} (max/min {s[2]:.2f})"
             for p, s in spans.items()]
    stable = [p for p in spans if stable_across(kind(p), "width")]
    baseline = [p for p in spans if kind(p) == "neither"]
    if axis != "width" or not (stable and baseline):
        return True, ("; ".join(parts) + ("" if parts else "no logits recorded")
                      + " (no verdict: it needs SP and µP across widths: a parameterisation of kind neither and a width-stable one)")
    # Two words, one bound, never both: flat is max/min <= bound; grows is max/min > bound and larger at the widest.
    flat = {p: spans[p][2] <= bound for p in spans}
    grows = {p: spans[p][2] > bound and spans[p][1] > spans[p][0] for p in spans}
    ok = all(flat[p] for p in stable) and all(grows[p] for p in baseline)
    said = [f"{display_name(p)} max/min {spans[p][2]:.2f} {'<=' if flat[p] else '>'} {bound}: {'flat' if flat[p] else 'NOT flat'}"
            for p in stable]
    how = {p: (", larger at the widest: grows" if grows[p] else ": flat, does NOT grow" if flat[p]
               else ", smaller at the widest: does NOT grow") for p in baseline}
    said += [f"{display_name(p)} max/min {spans[p][2]:.2f} {'<=' if flat[p] else '>'} {bound}{how[p]}" for p in baseline]
    rule = (f"rule: a width-stable parameterisation's logits within max/min {bound} across {axis}s is flat, a baseline's above "
            f"{bound} and larger at the widest grows")
    return ok, "; ".join(parts) + f". Verdict: {'PASS' if ok else 'FAIL'} ({rule}; " + "; ".join(said) + ")"


def panels(rows: list[dict], axis: str, steps=(1, 2, 5, 10)) -> dict[int, dict[str, dict[str, dict[int, float]]]]:
    """The curves at the steps the picture shows (those of ``steps`` that were recorded, else the last),
    parameterisations in table order."""
    recorded = sorted({r["step"] for r in rows})
    shown = [s for s in steps if s in recorded] or recorded[-1:]
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
    ``value`` is the RMS change from step 0, ``statistic`` names it), the ``axis`` they vary, the verdict (``ok``)
    and ``text`` (the table at the last step and the verdict's line). ``png()`` draws its figure; ``save(folder)``
    writes ``coord.csv``, ``verdict.txt`` and ``coord.png``, the files ``initnorm-coord-check`` leaves."""

    records: list[dict]
    axis: str
    ok: bool
    text: str
    bound: float = 1.5

    def png(self) -> bytes:
        """The figure in the style of microsoft/mup's coordinate-check plots (``figure.py``)."""
        names = {r["param"]: display_name(r["param"]) for r in self.records}
        return coord_check_png(panels(self.records, self.axis), self.axis, names, KEY_LAYERS)

    def save(self, folder: str | Path, text: str | None = None) -> None:
        """``coord.csv`` (every record), ``verdict.txt`` (``text``, default this report's) and ``coord.png`` in ``folder``."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        write_atomic(folder / COORD_FILE, combined_csv(self.records))
        write_atomic(folder / "verdict.txt", self.text if text is None else text)
        write_atomic(folder / "coord.png", self.png())


def judge(records: list[dict], bound: float = 1.5) -> CoordReport:
    """The verdict on a coordinate check's records, wherever they were measured (the jobs of initnorm-coord-check, read
    back from their ``coord.csv``, or ``initnorm.coord_check``'s plain loop): each layer's change against the axis the
    records vary, at their last step, judged by each parameterisation's declared kind (``verdict``)."""
    axis = coord_axis(records)
    step = max(r["step"] for r in records)
    data = curves(records, axis, step)
    ok, line = verdict(data, axis, bound)
    return CoordReport(records, axis, ok, table(data, axis, step) + "\n" + line + "\n", bound)


def summarize(folder: Path, bound: float = 1.5) -> tuple[bool, str]:
    """Read every job's ``coord.csv`` below ``folder``, ``judge`` them and write the combined CSV, PNG and ``verdict.txt``
    (with the unit-scale check's verdict of each job that ran it, which does not change the exit status)."""
    report = judge(read_rows(folder), bound)
    text = report.text + unit_lines(folder)
    report.save(folder, text)
    return report.ok, text


