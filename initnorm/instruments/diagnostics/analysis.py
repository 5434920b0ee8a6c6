"""Which layers make a learning rate fail to transfer: per-layer statistics of a sweep, each size
against the base (smallest) width or depth, at one learning rate.

Reads every job's TensorBoard events (the tags ``stat/layer/role`` that ``callbacks.stats`` and
``callbacks.diagnostics`` write), takes each tag's median over the logged steps after step 0
(step 0 alone where that is all there is), averages over seeds, and names, per setting and size,
the tags whose value departs from the base size's by more than ``factor`` either way. The
learning rate compared at is, per setting, the base size's optimal rate from the transfer table
(the nearest grid point), unless one is given.
"""

from __future__ import annotations

import logging
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from initnorm import transfer
from initnorm.results import read_metrics, recorded
from initnorm.safe_files import planted

log = logging.getLogger(__name__)

STATS = ("eff_lr", "eps_frac", "sigma_w", "sigma_dw", "update_ratio", "act_rms", "grad_rms")
FACTOR = 2.0
ZERO = 1e-3  # a fraction (eps_frac) this small counts as zero: "from 0" is a departure above it


def read_events(job_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """tag -> [(step, value)] from the TensorBoard event files below ``job_dir``."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out: dict[str, list[tuple[int, float]]] = {}
    for folder in sorted({p.parent for p in Path(job_dir).rglob("events.out.tfevents.*")}):
        # TensorBoard's reader opens every *tfevents* file of the folder: one that is a FIFO would hang it, a link be
        # followed (initnorm/safe_files.py), so such a folder is not read.
        if odd := [(p.name, what) for p in folder.iterdir() if "tfevents" in p.name and (what := planted(p)) is not None]:
            log.warning("ignored the events in %s: %s is %s, not an event file", folder, *odd[0])
            continue
        acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            out.setdefault(tag, []).extend((e.step, e.value) for e in acc.Scalars(tag))
    return out


def summary_value(points: list[tuple[int, float]]) -> float:
    later = [v for s, v in points if s > 0 and math.isfinite(v)]
    pick = later or [v for _, v in points if math.isfinite(v)]
    return statistics.median(pick) if pick else math.nan


@dataclass(frozen=True)
class Departure:
    setting: tuple[tuple[str, str], ...]
    size: int
    tag: str
    base: float
    value: float

    @property
    def ratio(self) -> float:
        return self.value / self.base if self.base else math.inf


def job_table(folder: Path, stats: tuple[str, ...] = STATS) -> tuple[str | None, list[dict], dict[tuple, dict[str, float]]]:
    """(axis, records, (setting, size, log2 lr) -> tag -> mean over seeds of the tag's summary value)."""
    records = [r for r in read_metrics(folder) if r.get("status") == "finished"]
    axis, cells = transfer.cells_from_records(records)
    if axis is None:
        return None, records, {}
    settings = {s for s in cells}
    per: dict[tuple, dict[str, list[float]]] = {}
    for r in records:
        swept = r.get("swept") or r.get("overrides", {})
        if "lr" not in swept or axis not in swept:
            continue
        setting = next((s for s in settings if all(transfer.swept_value(r, k) == v for k, v in s)), None)
        if setting is None:
            continue
        key = (setting, int(recorded(r, axis)), math.log2(float(recorded(r, "lr"))))  # as the job ran, not its override's text
        for tag, points in read_events(Path(folder) / r["_dir"]).items():
            if tag.split("/")[0] in stats:
                per.setdefault(key, {}).setdefault(tag, []).append(summary_value(points))
    means = {k: {t: statistics.fmean(v) for t, v in tags.items() if all(math.isfinite(x) for x in v)} for k, tags in per.items()}
    return axis, records, means


def departures(folder: Path, factor: float = FACTOR, log2_lr: float | None = None,
               stats: tuple[str, ...] = STATS) -> tuple[str | None, dict, list[Departure]]:
    """The tags that depart from the base size's by more than ``factor``, per setting and size,
    at ``log2_lr`` (default: the base size's optimal lr, on the grid). Returns (axis, {setting: lr}, departures)."""
    axis, records, means = job_table(folder, stats)
    if axis is None:
        return None, {}, []
    rows = transfer.transfer_table(records, n_boot=0)
    out, at = [], {}
    for setting in dict.fromkeys(k[0] for k in means):
        sizes = sorted({k[1] for k in means if k[0] == setting})
        grid = sorted({k[2] for k in means if k[0] == setting and k[1] == sizes[0]})
        if not grid:
            continue
        want = log2_lr
        if want is None:
            base_row = next((r for r in rows if r.setting == setting and r.size == sizes[0]), None)
            want = base_row.optimum.value if base_row and math.isfinite(base_row.optimum.value) else grid[len(grid) // 2]
        x = min(grid, key=lambda g: abs(g - want))
        at[setting] = x
        base = means.get((setting, sizes[0], x), {})
        for size in sizes[1:]:
            here = means.get((setting, size, x), {})
            for tag in base:
                if tag not in here:
                    continue
                b, v = base[tag], here[tag]
                if _departs(b, v, factor):
                    out.append(Departure(setting, size, tag, b, v))
    out.sort(key=lambda d: (str(d.setting), d.size, -abs(math.log(d.ratio)) if 0 < d.ratio < math.inf else -math.inf))
    return axis, at, out


def _departs(b: float, v: float, factor: float) -> bool:
    if abs(b) < ZERO and abs(v) < ZERO:
        return False
    if b <= 0 or v <= 0:
        return abs(v - b) >= ZERO
    return v / b > factor or b / v > factor


def render(axis: str | None, at: dict, deps: list[Departure], factor: float = FACTOR) -> str:
    if axis is None:
        return "Not an lr x width (or depth) sweep: nothing to compare.\n"
    lines = [(f"Per-layer statistics (median over logged steps after step 0, mean over seeds) that depart from the smallest {axis}'s "
              f"by more than a factor of {factor:g}.\n")]
    for setting, x in at.items():
        mine = [d for d in deps if d.setting == setting]
        lines.append(f"\n### {transfer.setting_label(setting)} at lr 2^{x:g}\n")
        if not mine:
            lines.append(f"No statistic departs by more than a factor of {factor:g}.\n")
            continue
        for size in dict.fromkeys(d.size for d in mine):
            ds = [d for d in mine if d.size == size]
            by_stat: dict[str, list[str]] = {}
            for d in ds:
                stat, layer, role = (d.tag.split("/", 2) + ["", ""])[:3]
                layer = layer if role in ("params", "weights", "weight", "") else f"{layer}/{role}"
                by_stat.setdefault(stat, []).append(f"{layer} ×{d.ratio:.3g}" if math.isfinite(d.ratio)
                                                    else f"{layer} from 0 to {d.value:.3g}")
            lines.append(f"- {axis} {size}: " + "; ".join(f"{s}: {', '.join(v)}" for s, v in by_stat.items()))
        lines.append(f"\n| {axis} | statistic | base | here | ratio |\n|---|---|---|---|---|")
        lines += [f"| {d.size} | {d.tag} | {d.base:.3g} | {d.value:.3g} | {d.ratio:.3g} |" for d in mine]
    return "\n".join(lines) + "\n"
