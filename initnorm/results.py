"""The only code that writes result files (atomically) and reads them back, and the tables made
from them: settings by swept keys, mean ± sd over seeds, the best learning rate of a curve.

Each job writes ``metrics.json`` in its folder; ``initnorm.summary`` turns a folder of them into
the sweep's summary.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import math
import os
import re
import statistics
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from initnorm.safe_files import NotAFile, TooLarge, read_bounded

log = logging.getLogger(__name__)
METRICS_FILE = "metrics.json"
LABELS = {
    "final_val_loss": "Final validation loss",
    "best_val_loss": "Best validation loss",
    "final_train_loss": "Final train loss",
    "val_acc": "Validation accuracy",
    "first_loss": "First loss",
    "final_loss": "Final loss",
    "gap": "Gap",
    "score": "Loss (last 50 batches)",
}


def write_atomic(path: Path, text: str | bytes) -> None:
    """Write to a unique temporary file in the same folder, fsync it, then rename: a reader (or a
    crash, or a full disk) never leaves half a file or an empty one. The file gets the mode any new
    file gets here (0644 under the usual umask), not the temporary file's private 0600."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:  # named by the file it was for, not by a temporary name nobody will look for
        raise OSError(exc.errno, exc.strerror, str(path)) from exc
    try:
        with (os.fdopen(fd, "wb") if isinstance(text, bytes) else os.fdopen(fd, "w", encoding="utf-8")) as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~umask())
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        if exc.filename is None:  # write() and fsync() name no file: a full disk's error should
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def umask() -> int:
    """This process's umask (read by setting it and putting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_metrics(folder: Path, metrics: dict[str, Any]) -> Path:
    path = Path(folder) / METRICS_FILE
    write_atomic(path, json.dumps(metrics, indent=2, sort_keys=True, default=str) + "\n")
    return path


# A job's record is a few kB (its validation curve included); a bigger file is not one.
MAX_RECORD_BYTES = 16 * 2**20


def read_record(path: Path) -> dict[str, Any] | None:
    """One ``metrics.json`` as a dict; None, with one warning line naming the file and what to do,
    for a file that is not a JSON object (damaged, or foreign: written by something else), not a
    regular file of a sane size, or whose fields have the wrong types."""
    fix = "delete it or move it away (a rerun of that job trains it again)"
    try:
        rec = json.loads(read_bounded(path, MAX_RECORD_BYTES).decode("utf-8"))
    except NotAFile as exc:  # a link, FIFO, device or folder: the rerun refuses it (training.resume)
        then = fix if isinstance(exc, TooLarge) else (
            "delete it or move it away (until then a rerun of the sweep refuses that job's folder)")
        log.warning("ignored %s: %s, not a job's record; %s", path, exc, then)
        return None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        log.warning("ignored %s: not readable JSON (%s); %s", path, type(exc).__name__, fix)
        return None
    if not isinstance(rec, dict):
        log.warning("ignored %s: a JSON %s, not a job's record; %s", path, type(rec).__name__, fix)
        return None
    if problem := shape_problem(rec):
        log.warning("ignored %s: %s, not a record this version of initnorm reads; %s", path, problem, fix)
        return None
    return rec


NUMBER = (int, float, type(None))  # NaN is a float; null where nothing was measured
# The fields summaries read, and the type each must have where present (an older record may lack some).
SHAPE = {
    "status": str, "overrides": dict, "swept": (list, type(None)), "summary_metrics": list, "summary_plots": list,
    "choices": dict, "val_history": list, "config": dict,
    "final_val_loss": NUMBER, "best_val_loss": NUMBER, "diverged": bool, "diverged_step": (int, type(None)),
    "steps": (int, type(None)), "job_num": int,
    "seed": (int, type(None)), "ms_per_step": NUMBER, "wall_s": NUMBER,
}
JSON_NAMES = {"str": "string", "bool": "boolean", "NoneType": "null", "dict": "object", "int": "number", "float": "number"}


def shape_problem(rec: dict[str, Any]) -> str | None:
    """What makes ``rec`` unreadable as a job's record (``its overrides is a JSON list, its diverged is a JSON string``), or None."""
    wrong = [key for key, kind in SHAPE.items() if key in rec and not _is(rec[key], kind)]
    if not wrong:
        return None
    return ", ".join(f"its {key} is a JSON {JSON_NAMES.get(type(rec[key]).__name__, type(rec[key]).__name__)}" for key in wrong)


def _is(value: Any, kind) -> bool:
    """isinstance, with a JSON true/false not counted as a number (Python's bool is an int)."""
    if isinstance(value, bool) and kind is not bool and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        return False
    return isinstance(value, kind)


def read_metrics(folder: Path) -> list[dict[str, Any]]:
    """Every job's metrics below ``folder``, in job order (then path order); foreign files are skipped with a warning."""
    records = []
    for rel in metrics_folders(folder):
        rec = read_record(Path(folder, rel, METRICS_FILE))
        if rec is None:
            continue
        rec["_dir"] = rel
        records.append(rec)
    return sorted(records, key=lambda r: (r.get("job_num") if isinstance(r.get("job_num"), int) else 0, r["_dir"]))


def metrics_folders(folder: Path | str) -> list[str]:
    """The folders below ``folder`` (relative, sorted) that hold a ``metrics.json``, as ``Path.rglob`` finds them (links to
    folders not followed), by ``os.walk``: a third of the time for a sweep of 10,000 jobs (no Path object per entry)."""
    import os

    found = []
    for parent, dirs, files in os.walk(folder):
        if METRICS_FILE in files or METRICS_FILE in dirs:  # a folder of that name is found too, and refused as a record
            found.append(os.path.relpath(parent, folder))
    return sorted(found, key=lambda rel: Path(rel).parts)


PROGRESS_FILE = ".progress"  # ``step steps``, in a stacked member's folder while its group trains (callbacks/progress.py)


def duration(seconds: float) -> str:
    """``45s``, ``3m05s``, ``1h02m``."""
    s = round(max(0.0, seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def fmt(x: float | None, digits: int = 3, missing: str = "nan") -> str:
    """A number for a table; ``missing`` stands in for None or NaN."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return missing
    # Significant digits where fixed point would hide the value: a first loss of 1e27, a final loss of 0.006.
    return f"{x:.{digits}g}" if x and not 1e-2 <= abs(x) < 1e4 else f"{x:.{digits}f}"


def metric_name(metric: str, metrics: Mapping[str, Any]) -> str:
    """The score in words, as the summary table heads its column: ``final validation loss``; the chapter's
    ``final_loss`` with its window (``final loss (mean of the last 50 training batches)``)."""
    name = LABELS.get(metric, metric).lower()
    tail = metrics.get("summary_tail_steps") or ((metrics.get("config") or {}).get("summary") or {}).get("tail_steps")
    return f"{name} (mean of the last {tail} training batches)" if metric == "final_loss" and tail else name


def scored(metrics: Mapping[str, Any]) -> str:
    """``final validation loss 2.5382``: the loss the sweep's table scores (``summary.metrics[0]``), named, as a job's
    done line and its train.log's end line print it."""
    metric = (metrics.get("summary_metrics") or ["final_val_loss"])[0]
    return f"{metric_name(metric, metrics)} {fmt(metrics.get(metric), 4)}"


def fmt_mean_sd(mean: float | None, sd: float | None, n: int, missing: str = "nan") -> str:
    """Mean ± sd, both with the same decimals: enough for the sd's first significant digit, at least
    3 and at most 6 (``2.233 ± 0.004``, ``2.8560 ± 0.0007``); one value alone without ±."""
    if not n or mean is None or not math.isfinite(mean):
        return missing
    if n == 1:
        return fmt(mean)
    if not 1e-2 <= abs(mean) < 1e4:  # significant digits where fixed point would hide the value (a first loss of 1e27)
        return f"{mean:.3g} ± {sd:.2g}"
    decimals = 3 if not sd or sd >= 1e-3 else min(6, -math.floor(math.log10(sd)))
    return f"{mean:.{decimals}f} ± {sd:.{decimals}f}"


def setting_keys(records: list[dict[str, Any]]) -> list[str]:
    """The keys that tell a table's rows apart: the swept keys other than the seed, in sweep order
    (outside a multirun, the overridden keys whose values differ between the records), then the keys
    ``differing_keys`` finds: jobs whose recorded configs differ never share a row, swept or not."""
    keys = swept_keys(records)
    return keys + differing_keys(records, keys)


def swept_keys(records: list[dict[str, Any]]) -> list[str]:
    """The swept keys other than the seed, in sweep order (outside a multirun, the overridden keys whose values
    differ between the records)."""
    keys: list[str] = []
    for r in records:
        swept = r.get("swept")
        for k in r.get("overrides", {}) if swept is None else swept:
            if k != "seed" and k not in keys:
                keys.append(k)
    if not any("swept" in r for r in records):
        keys = [k for k in keys if len({str(r.get("overrides", {}).get(k)) for r in records}) > 1]
    return keys


def differing_keys(records: list[dict[str, Any]], keys: list[str]) -> list[str]:
    """The keys, other than ``keys`` and the seed, whose recorded value (``recorded``: the job's config, else its
    override) differs between jobs that agree on every value of ``keys``: a rerun of a sweep's folder with another
    lr, a seed added with another warmup. Averaging such jobs would report one setting that never ran, so these
    keys split the rows too. A key implied by one already found (``model.width`` by ``width``) is not repeated;
    keys that do not change the experiment (``config.IGNORED``: callbacks, loggers ...) are not compared.

    A summary asks this several times of one list of records (its table, runs.csv, TensorBoard's runs, the note):
    the keys whose values vary at all are found once per list (``_varying``), so 10,000 jobs cost seconds."""
    if len(records) < 2:
        return []
    varying = _varying(records)
    found: list[str] = []
    group = [tuple(row_value(r, k) for k in keys) for r in records]
    for k, values in varying.items():
        if k in keys:
            continue
        seen: dict[tuple, str] = {}
        if any(v is not None and seen.setdefault(g, v) != v for g, v in zip(group, values)):
            found.append(k)
            group = [(*g, v) for g, v in zip(group, values)]
    return found


_VARYING: list[tuple[list, list, dict[str, list[str]]]] = []  # (the list, its records, its varying keys): the last few


def _varying(records: list[dict[str, Any]]) -> dict[str, list[str]]:
    """{key: each record's canonical value} for the keys not watch-only whose recorded values are not all the same,
    fewest dots first (``width`` before ``model.width``: the key a user sets is the one shown). Kept for the last few
    lists asked about, while the list and each of its records is the same object (an appended or replaced record is a
    new question)."""
    for lst, members, found in _VARYING:
        if lst is records and len(members) == len(records) and all(a is b for a, b in zip(members, records)):
            return found
    flat = [_leaves(r) for r in records]
    order = dict.fromkeys(k for f in flat for k in f)
    candidates = [k for k in sorted(order, key=lambda k: (k.count("."), k)) if not _watch_only(k)]
    # A record without a config (a job that failed before training: its metrics.json holds the error; a runs.csv row)
    # says nothing of a key it did not override: its value is unknown (None here), not a value that differs.
    said = [isinstance(r.get("config"), Mapping) or set(r.get("overrides") or ()) for r in records]
    found = {}
    for k in candidates:
        raw = [v if (v := f.get(k)) is not None else recorded(r, k) for f, r in zip(flat, records)]
        first = raw[0]
        if all(type(v) is type(first) and v == first for v in raw) and not isinstance(first, (list, dict)):
            continue  # the same in every job (most keys): compared as values, no text made
        values = [_canonical(v) if s is True or k in s else None for v, s in zip(raw, said)]
        if len({v for v in values if v is not None}) > 1:
            found[k] = values
    _VARYING[:] = [(records, list(records), found), *_VARYING[:3]]
    return found


def _leaves(record: Mapping[str, Any]) -> dict[str, Any]:
    """{dotted key: value} of what a record's config sets (``optim.eps``; a list is one value), else its overrides'
    keys with their recorded values (a record read back from runs.csv has no config)."""
    config = record.get("config")
    if not isinstance(config, Mapping):
        return {k: recorded(record, k) for k in record.get("overrides") or {} if isinstance(k, str)}
    out: dict[str, Any] = {}
    stack: list[tuple[str, Mapping]] = [("", config)]
    while stack:
        prefix, node = stack.pop()
        for k, v in node.items():
            if isinstance(v, Mapping) and v:
                stack.append((f"{prefix}{k}.", v))
            else:
                out[f"{prefix}{k}"] = v
    return out


def _watch_only(key: str) -> bool:
    """The seed (what a row averages over), Hydra's own keys and the keys that change how a run is watched, not the
    experiment (``config.IGNORED``, which a resume does not compare either)."""
    from initnorm.config import IGNORED

    return key in ("seed", "experiment") or key.startswith("hydra.") or any(key == i or key.startswith(f"{i}.") for i in IGNORED)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def row_value(record: Mapping[str, Any], key: str) -> str:
    """A job's value of a setting key as a table shows it: its override (``setting_value``), else the value its config
    recorded (a key it did not set on its command line: a rerun's ``lr`` left at its default)."""
    overrides = record.get("overrides") or {}
    if key in overrides:
        return setting_value(overrides, key)
    value = recorded(record, key)
    if isinstance(value, Mapping):  # a config group the job left at its default: its choice (``alice``), not its node
        value = (record.get("choices") or {}).get(key, value)
    return "" if value is None else value if isinstance(value, str) else _canonical(value)


def setting_value(overrides: Mapping[str, Any], key: str) -> str:
    """A swept key's value as tables, legends and runs.csv show it: a custom init by its function
    (``init=custom init.fn=mypkg.inits.fancy`` -> ``custom:mypkg.inits.fancy``), so two of them never share a row."""
    value = str(overrides.get(key, ""))
    if key == "init" and value == "custom" and overrides.get("init.fn"):
        return f"custom:{overrides['init.fn']}"
    return value


def settings(records: list[dict[str, Any]]) -> dict[tuple[str, ...], list[dict[str, Any]]]:
    """Finished jobs by setting (``("norm=pre", "warmup=0")``: the swept values but the seed), in ``in_order``."""
    keys = setting_keys(records)
    out: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for r in records:
        if r.get("status") == "finished":
            out.setdefault(tuple(f"{k}={row_value(r, k)}" for k in keys), []).append(r)
    order = in_order([tuple(v.partition("=")[2] for v in key) for key in out])
    return dict(sorted(out.items(), key=lambda kv: order[tuple(v.partition("=")[2] for v in kv[0])]))


def _number(text: str) -> float | None:
    try:
        x = float(text)
    except ValueError:
        return None
    return x if math.isfinite(x) else None


def in_order(settings: list[tuple[str, ...]]) -> dict[tuple[str, ...], tuple]:
    """Each setting's place in a table (a sort key): column by column, a column of numbers by value (a search's
    trials, ``lr=0.03,0.01``), any other column in the order its values came (the sweep's: ``norm=pre,post``)."""
    columns = list(zip(*settings))
    numeric = [all(_number(v) is not None for v in col) for col in columns]
    first = [{v: i for i, v in reversed(list(enumerate(col)))} for col in columns]
    return {s: tuple(_number(v) if numeric[i] else first[i][v] for i, v in enumerate(s)) for s in settings}


def significant(text: str) -> int:
    """How many significant digits a number is written with (``0.004430375245218269``: 16, ``3e-4``: 1)."""
    return len(re.sub(r"[eE].*", "", text).lstrip("+-").replace(".", "").lstrip("0")) if _number(text) is not None else 0


LONG = 12  # a number written with more significant digits than this is rounded where people read it: a search's draw
# (a float's repr, 15-17 digits), not a rate typed on a grid (2^-15 = 0.000030517578125 has 11)


def short_values(texts: Iterable[str], least: int = 4) -> dict[str, str]:
    """Each value as tables, legends and run labels show it: a number written with more than ``LONG``
    significant digits (a search's ``lr=0.004430375245218269``) with the fewest, at least ``least``, that
    keep the different numbers among ``texts`` apart (``0.00443``, ``0.01398``); every other value as it was written."""
    texts = list(dict.fromkeys(texts))
    long = [t for t in texts if significant(t) > LONG]
    if not long:
        return {t: t for t in texts}
    for digits in range(least, 18):
        shown = {t: f"{float(t):.{digits}g}" for t in long}
        numbers: dict[str, float] = {}  # text shown -> the number it stands for: two numbers may not share one
        clash = False
        for t in texts:
            x, text = _number(t), shown.get(t, t)
            clash = clash or (text in numbers and numbers[text] != x)
            numbers.setdefault(text, x)
        if not clash:
            break
    return {t: shown.get(t, t) for t in texts}


def best_lr(curve: Mapping[float, float | None]) -> float | None:
    """The learning rate with the lowest finite loss of ``curve`` (lr -> loss), None if none is finite."""
    finite = {lr: v for lr, v in curve.items() if v is not None and math.isfinite(v)}
    return min(finite, key=finite.get) if finite else None


def group_rows(records: list[dict[str, Any]]) -> tuple[list[str], list[str], list[dict[str, Any]]]:
    """Group jobs by their swept values other than the seed. Returns (keys, metrics, rows)."""
    keys = setting_keys(records)
    metrics: list[str] = []
    for r in records:
        for m in r.get("summary_metrics", ["final_val_loss"]):
            if m not in metrics:
                metrics.append(m)
    rows: dict[tuple, dict[str, Any]] = {}
    for r in records:
        key = tuple(row_value(r, k) for k in keys)
        row = rows.setdefault(key, {**dict(zip(keys, key)), "seeds": [], "values": {m: [] for m in metrics}, "diverged": 0,
                                    "diverged_at": [], "failed": [], "pruned": []})
        if r.get("status") == "pruned":  # a search's pruner stopped it on purpose (search/pruning.py): not a failure
            row["pruned"].append(f"seed {r.get('seed')} at step {r.get('steps')}")
            continue
        if r.get("status", "finished") != "finished":  # failed, or stopped by the cluster (cancelled, timeout ...)
            row["failed"].append(f"seed {r.get('seed')}: {r.get('error') or r.get('stopped') or r.get('status')}")
            continue
        row["seeds"].append(r.get("seed"))
        row["diverged"] += bool(r.get("diverged"))
        if r.get("diverged"):
            row["diverged_at"].append(f"seed {r.get('seed')} at step {r.get('diverged_step')}")
        for m in metrics:
            value = r.get(m)  # a record from an older version may lack it: nan, not "diverged"
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            row["values"][m].append(None if r.get("diverged") else value if number else math.nan)
    order = in_order(list(rows))
    return keys, metrics, [rows[k] for k in sorted(rows, key=order.get)]


def mean_sd(values: Iterable[float | None]) -> tuple[float, float, int]:
    """Mean and sample sd (ddof 1, as the deck's tables) of the finite values."""
    xs = [v for v in values if v is not None and math.isfinite(v)]
    if not xs:
        return math.nan, math.nan, 0
    return statistics.fmean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0), len(xs)


def render_markdown(keys, metrics, rows) -> str:
    # One seed per row: the value alone. Several: mean ± sd (one format, results.fmt_mean_sd) and each seed's value,
    # under one seed list when every row ran the same seeds, else each cell names its seed.
    single = all(len(r["seeds"]) <= 1 for r in rows)
    same_seeds = len({tuple(r["seeds"]) for r in rows}) <= 1
    many = any(len(r["seeds"]) > HANDFUL for r in rows)  # then a count, a range and the values' spread, not every seed
    if many:
        seeds_label = f"Seeds {seed_span(rows[0]['seeds'])}: lowest .. highest" if same_seeds else "Seeds: lowest .. highest"
    else:
        seeds_label = "Seeds " + ", ".join(str(s) for s in rows[0]["seeds"]) if rows and same_seeds else "Per seed (seed: value)"
    head = list(keys)
    for m in metrics:
        if single:
            head.append(f"{LABELS.get(m, m)}" + (f" (seed {rows[0]['seeds'][0]})" if rows and same_seeds and rows[0]["seeds"] else ""))
        else:
            head += [f"{LABELS.get(m, m)} (mean ± sd)", f"{seeds_label}" if len(metrics) == 1 else f"{LABELS.get(m, m)}: per seed"]
    show_div = any(r["diverged"] for r in rows)
    show_fail = any(r["failed"] for r in rows)
    show_pruned = any(r.get("pruned") for r in rows)
    head += ["Diverged"] * show_div + ["Failed"] * show_fail + ["Pruned"] * show_pruned
    out = io.StringIO()
    out.write("| " + " | ".join(head) + " |\n|" + "---|" * len(head) + "\n")
    shown = {k: short_values(r[k] for r in rows) for k in keys}  # a search's lrs to the digits that tell them apart
    for r in rows:
        cells = [shown[k][r[k]] for k in keys]
        for m in metrics:
            mu, sd, n = mean_sd(r["values"][m])
            empty = "diverged" if r["diverged"] else "failed" if r["failed"] else "pruned" if r.get("pruned") else "nan"
            if single:
                cells.append(fmt_mean_sd(mu, sd, n, missing=empty))
                continue
            if many:
                finite = [v for v in r["values"][m] if v is not None and math.isfinite(v)]
                spread = f"{fmt(min(finite))} .. {fmt(max(finite))}" if finite else empty
                cells += [fmt_mean_sd(mu, sd, n, missing=empty), spread if same_seeds else f"{seed_span(r['seeds'])}: {spread}"]
                continue
            per_seed = ["diverged" if v is None else fmt(v) for v in r["values"][m]]
            if not same_seeds:
                per_seed = [f"{s}: {v}" for s, v in zip(r["seeds"], per_seed)]
            cells += [fmt_mean_sd(mu, sd, n, missing=empty), ", ".join(per_seed)]
        if show_div:
            cells.append(f"{r['diverged']}/{len(r['seeds'])}" + (f" ({_first(r['diverged_at'], ', ')})" if r["diverged_at"] else ""))
        if show_fail:
            cells.append(_first(r["failed"], "; "))
        if show_pruned:
            cells.append(_first(r.get("pruned", []), "; "))
        out.write("| " + " | ".join(str(c) for c in cells) + " |\n")
    return out.getvalue()


HANDFUL = 8  # seeds a summary row lists one by one; beyond it a count and a range (summary.csv and runs.csv keep each)


def seed_span(seeds: list[Any]) -> str:
    """``1,000 (1-1000)``; ``3 (1, 5, 9)`` for a few; ``1,000 (1-2000, not every one)`` where some between are missing."""
    if len(seeds) <= HANDFUL or not all(isinstance(s, int) for s in seeds):
        return f"{len(seeds):,} ({', '.join(str(s) for s in seeds[:HANDFUL])}{', ...' * (len(seeds) > HANDFUL)})"
    lo, hi = min(seeds), max(seeds)
    return f"{len(seeds):,} ({lo}-{hi}{'' if len(set(seeds)) == hi - lo + 1 else ', not every one'})"


def _first(items: list[str], sep: str) -> str:
    """The first few of a row's notes (diverged seeds, failures) and how many more there are (summary.md stays readable)."""
    return sep.join(items[:HANDFUL]) + (f"{sep}and {len(items) - HANDFUL:,} more (runs.csv)" if len(items) > HANDFUL else "")


# What a spreadsheet takes for the start of a formula in a CSV cell (CSV injection): such a text cell is written with a leading '.
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: Any) -> Any:
    """``value`` as a CSV cell a spreadsheet shows as text: a text that starts like a formula (``=cmd|...``, ``@SUM(...)``,
    from a swept value or an error line a record holds) gets a leading ``'``; a number (``-0.5``) is left as it is."""
    if isinstance(value, str) and value.startswith(FORMULA_START):
        try:
            float(value)
        except ValueError:
            return "'" + value
    return value


def csv_text(text: str) -> str:
    """A cell ``csv_cell`` wrote, back as it was."""
    return text[1:] if text.startswith("'") and csv_cell(text[1:]) != text[1:] else text


def render_csv(keys, metrics, rows) -> str:
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    head = list(keys) + [f"{m}_{s}" for m in metrics for s in ("mean", "sd", "n", "per_seed")] + ["seeds", "diverged", "failed"]
    w.writerow([csv_cell(h) for h in head])
    for r in rows:
        cells = [r[k] for k in keys]
        for m in metrics:
            mu, sd, n = mean_sd(r["values"][m])
            cells += [mu, sd, n, ";".join("diverged" if v is None else repr(v) for v in r["values"][m])]
        w.writerow([csv_cell(c) for c in cells + [";".join(str(s) for s in r["seeds"]), r["diverged"], " | ".join(r["failed"])]])
    return out.getvalue()


RUNS_FILE = "runs.csv"
# Overrides a runs.csv keeps even when not swept, because the transfer report and the lr plot read them: the
# parameterisation (``param=umup`` on the command line of a single-parameterisation sweep: its rows are u-µP's, with
# no base width) and the size (``width=64`` for an lr sweep at one width). A summary rebuilt from the runs.csv alone
# must read them too.
ALWAYS_KEPT = ("param", "width", "depth")
RUN_FIELDS = ["_dir", "job_num", "status", "seed"]
RESULT_FIELDS = ["diverged", "diverged_step", "final_val_loss", "best_val_loss", "ms_per_step", "wall_s", "group_size",
                 "group_ms_per_step", "group_wall_s", "error"]
LISTS = ["swept", "summary_metrics", "summary_plots"]  # ;-joined: what a summary needs to be rebuilt from runs.csv alone
# The rate and decay a job trained with after the transfer rules (its record's ``resolved``): the transfer report reads
# what a rule applied from them. Columns only where a record has them (sweeps before the rules have none).
RESOLVED = {"resolved_lr": "lr", "resolved_weight_decay": "weight_decay"}
# What a job's steps mean in tokens (steps x batch x targets per sample), so that a transfer report over tokens reads a
# runs.csv alone (results/ keeps no configs). A column only where a record gives it.
TOKENS = "tokens"


def _tokens(r: Mapping[str, Any]) -> int | None:
    from initnorm.training.tasks import tokens_of

    return tokens_of(r["config"]) if r.get("config") else r.get(TOKENS)


def _run_row(r: dict[str, Any], keys: list[str]) -> dict[str, Any]:
    """One job as a runs.csv row. A member of a vectorised group has no time of its own: its
    group's wall time and ms per step go in the ``group_`` columns, never in ``wall_s``/``ms_per_step``."""
    row = {**r, TOKENS: _tokens(r), **{k: row_value(r, k) for k in keys},
           **{k: ";".join(map(str, r[k])) for k in LISTS if isinstance(r.get(k), list)},
           **{col: (r.get("resolved") or {}).get(key, "") for col, key in RESOLVED.items()}}
    group, old = r.get("group"), r.get("vectorized")
    if isinstance(old, dict) and not isinstance(group, dict):  # a record from before the one engine: its group was "vectorized"
        group = {"size": old.get("group_size"), "ms_per_step": old.get("group_ms_per_step")}
    if isinstance(group, dict) and isinstance(group.get("size"), int) and group["size"] > 1:
        row.update(group_size=group["size"], group_ms_per_step=group.get("ms_per_step"), group_wall_s=r.get("wall_s"), ms_per_step="",
                   wall_s="")
    return row


def render_runs_csv(records: list[dict[str, Any]]) -> str:
    """One row per job: its folder, status and seed, a column per swept key (and per ``ALWAYS_KEPT`` key a job
    overrides), its results, the summary's metrics; ``read_runs_csv`` reads it back into records that ``summary.summarize`` takes."""
    keys = [k for k in setting_keys(records) if k not in RUN_FIELDS + RESULT_FIELDS + LISTS]
    keys += [k for k in ALWAYS_KEPT if k not in keys and any(k in r.get("overrides", {}) for r in records)]
    extra = sorted({m for r in records for m in r.get("summary_metrics", [])} - set(RUN_FIELDS + RESULT_FIELDS + keys))
    resolved = list(RESOLVED) if any("resolved" in r for r in records) else []
    tokens = [TOKENS] if any(_tokens(r) is not None for r in records) else []
    out = io.StringIO()
    fields = RUN_FIELDS + keys + RESULT_FIELDS + resolved + tokens + extra + LISTS
    w = csv.DictWriter(out, fieldnames=fields, extrasaction="ignore", lineterminator="\n")
    w.writer.writerow([csv_cell(f) for f in fields])
    for r in records:
        w.writerow({k: csv_cell(v) for k, v in _run_row(r, keys).items()})
    return out.getvalue()


def _value(text: str) -> Any:
    """A runs.csv cell back as metrics.json had it: bool, int, float or text; empty: missing."""
    if text in ("True", "False"):
        return text == "True"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def recorded(record: Mapping[str, Any], key: str) -> Any:
    """A job's value of ``key`` as its run used it: from the config it recorded (metrics.json's ``config``; ``a.b`` reads
    a nested key), else parsed from its override (a record read back from runs.csv has none); None where neither has it.
    Not the override's text: ``lr=2e-3`` and ``lr=0.002`` are one rate, and a swept key may be set through another."""
    node: Any = record.get("config")
    for part in key.split("."):
        node = node.get(part) if isinstance(node, Mapping) else None
    if node is not None:
        return node
    text = (record.get("overrides") or {}).get(key)
    return None if text is None else _value(str(text))


def _dir_overrides(folder_name: str) -> dict[str, str]:
    """``param=sp,width=64,lr=0.01/seed=0`` -> {"param": "sp", "width": "64", "lr": "0.01", "seed": "0"}
    (a runs.csv written before it had a column per swept key: the job folder names them)."""
    parts = [p for comp in folder_name.split("/") for p in re.split(r",(?=[^,=/]+=)", comp)]
    return dict(p.split("=", 1) for p in parts if "=" in p)


def read_sweep(folder: Path) -> tuple[list[dict[str, Any]], bool]:
    """(the job records of a sweep folder, whether they came from its ``runs.csv``): every ``metrics.json``
    below it, else the ``runs.csv`` of a folder that keeps only that (results/ does); empty when neither."""
    records = read_metrics(folder)
    from_csv = not records and (Path(folder) / RUNS_FILE).is_file()
    return (read_runs_csv(folder) if from_csv else records), from_csv


# A runs.csv is a few hundred bytes a job; a bigger file is not one.
MAX_RUNS_BYTES = 64 * 2**20


# The runs.csv cells that hold numbers (the summary metrics' columns too): text there (``=1+1`` a spreadsheet left) is no result.
NUMBER_FIELDS = ("job_num", "seed", "tokens", "diverged_step", "final_val_loss", "best_val_loss", "ms_per_step", "wall_s", "group_size",
                 "group_ms_per_step", "group_wall_s", "lr", "width", "depth")


def read_runs_csv(folder: Path) -> list[dict[str, Any]]:
    """The job records a sweep's ``runs.csv`` holds (a folder that keeps only it, as results/ does):
    status, seed, overrides, swept keys, the summary's metrics and each job's numbers. Curves and
    configs are not in it, so plots that need them draw nothing. One that is not a regular UTF-8 file of
    at most ``MAX_RUNS_BYTES``, or not laid out as initnorm writes it (a table of runs made elsewhere), is refused in
    one line (``ConfigError``); a cell that should hold a number and does not (a formula) is read as missing, with one
    warning line for the file."""
    from initnorm.errors import ConfigError

    path = Path(folder) / RUNS_FILE
    try:
        text = read_bounded(path, MAX_RUNS_BYTES).decode("utf-8")
    except (NotAFile, UnicodeDecodeError) as exc:
        what = exc if isinstance(exc, NotAFile) else "not UTF-8 text"
        raise ConfigError(f"{path} is {what}, not a runs.csv initnorm wrote; delete it or move it away") from None
    try:
        reader = csv.DictReader(io.StringIO(text, newline=""))
        fields = [csv_text(f) for f in reader.fieldnames or []]
        # A row longer than the header has its rest under None, a shorter one None for its missing cells: both dropped.
        rows = [{csv_text(k): csv_text(v or "") for k, v in row.items() if isinstance(k, str) and isinstance(v, (str, type(None)))}
                for row in reader]
    except csv.Error as exc:
        raise ConfigError(f"{path} is not CSV ({exc}), not a runs.csv initnorm wrote; delete it or move it away") from None
    layout = ("_dir", "seed", "diverged", "error") if "swept" in fields else ("_dir",)
    missing = [f for f in layout if f not in fields]
    if missing or ("swept" in fields and fields.index("seed") > fields.index("diverged")):
        raise ConfigError(f"{path} is not a runs.csv initnorm wrote (no {', '.join(missing) or 'seed before diverged'} column; its "
                          f"columns: {', '.join(fields[:8])}{' ...' * (len(fields) > 8)}); a table of runs made elsewhere goes "
                          "through initnorm.transfer_report (docs/transfer.md), else delete it or move it away")
    fixed = RUN_FIELDS + RESULT_FIELDS + LISTS
    if "swept" in fields:
        extra = [k for k in fields[fields.index("error") + 1 :] if k not in LISTS and k not in RESOLVED and k != TOKENS]
    else:  # the older layout: its metrics after "error", the swept keys in the folder names only
        extra = fields[fields.index("error") + 1 :] if "error" in fields else []
    records, bad = [], []
    for n, row in enumerate(rows, start=2):  # the file's line numbers (one line a row): the header is line 1
        metrics = [v for v in row.get("summary_metrics", "").split(";") if v] or [m for m in extra if m not in fixed]
        for k in (*NUMBER_FIELDS, *metrics):
            if row.get(k, "") != "" and (isinstance(_value(row[k]), str) or (k in ("job_num", "seed", "group_size") and
                                                                          not isinstance(_value(row[k]), int))):
                bad.append(f"line {n} {k} {row[k]!r}")
                row[k] = ""
        if row.get("diverged", "") not in ("", "True", "False"):
            bad.append(f"line {n} diverged {row['diverged']!r}")
            row["diverged"] = ""
        rec = {k: _value(v) for k, v in row.items() if v != "" and k not in LISTS and k not in RESOLVED}
        if any(row.get(col) for col in RESOLVED):
            rec["resolved"] = {key: _value(row[col]) for col, key in RESOLVED.items() if row.get(col)}
        rec["status"] = row.get("status") or "finished"
        if "swept" in fields:
            swept = [k for k in row["swept"].split(";") if k]
            settings = fields[fields.index("seed") + 1 : fields.index("diverged")]
            rec["overrides"] = {k: row[k] for k in settings if row.get(k, "") != ""} | {"seed": row.get("seed", "")}
        else:
            rec["overrides"] = _dir_overrides(row["_dir"])
            swept = list(rec["overrides"])
        rec["swept"] = swept
        for k in ("summary_metrics", "summary_plots"):
            rec[k] = [v for v in row.get(k, "").split(";") if v]
        rec["summary_metrics"] = rec["summary_metrics"] or [m for m in extra if m not in fixed] or ["final_val_loss"]
        if "group_wall_s" in rec:
            rec["group"] = {"size": rec.pop("group_size", None), "ms_per_step": rec.pop("group_ms_per_step", None)}
            rec["wall_s"] = rec.pop("group_wall_s")
        records.append(rec)
    if bad:
        log.warning("ignored %d cell%s of %s that should hold a number (%s%s): each read as missing; fix or delete %s",
                    len(bad), "s" * (len(bad) > 1), path, ", ".join(bad[:3]), " ..." * (len(bad) > 3), "them" if len(bad) > 1 else "it")
    return records
