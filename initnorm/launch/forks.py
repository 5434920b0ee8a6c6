"""Horizon forks in a sweep (``training/forks.py``): the plan written into the sweep folder before any job starts, the
providers first in the launch order, and each job's place in the plan, read by its own process on every launcher
(a worker of ``local_parallel`` or ``vectorized``, a SLURM task, or the sweep's own process under the basic launcher).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from initnorm.training import forks

_READ: dict[Path, tuple[tuple[int, int], dict[str, Any]]] = {}  # plan.json by folder, kept while it is unchanged


def prepare(sweep_dir: Path, batch: Sequence[Sequence[str]], checked: Mapping[tuple[str, ...], Any],
            subdir: Callable[[Sequence[str], Mapping[str, Any]], str]) -> list[Sequence[str]]:
    """Write the sweep's plan for ``batch`` (its jobs the preflight ``checked``; ``subdir(overrides, config)``: a job's folder
    in the sweep) and return the batch with each family's provider first, the other jobs in their order."""
    known = [(tuple(o), checked[tuple(o)].config) for o in batch if tuple(o) in checked]
    plan, rels, fams = {"format": forks.PLAN_FORMAT, "families": {}}, {}, {}
    if len({int(c["steps"]) for _, c in known}) > 1:  # a sweep that holds its steps has no family: no folder names made
        fams = {o: f for o, c in known if (f := forks.family(c)) is not None}
        rels = {o: subdir(o, c) for o, c in known if o in fams}
        plan = forks.plan([(rels[o], c, fams[o]) for o, c in known if o in fams])
    if plan["families"] or (Path(sweep_dir) / forks.STORE / forks.PLAN).is_file():  # a stale plan of another command replaced
        forks.write_plan(Path(sweep_dir), plan)
    first = forks.providers(plan)
    if first:
        print(saving_line(plan, sum(int(c["steps"]) for _, c in known)), flush=True)
    elif fams and (why := parted_by_validations([(c, fams[o]) for o, c in known if o in fams])):
        print(why, flush=True)
    lead = {o for o, rel in rels.items() if rel in first}
    return [o for o in batch if tuple(o) in lead] + [o for o in batch if tuple(o) not in lead]


def saving_line(plan: Mapping[str, Any], total: int) -> str:
    """``horizon forks: 15 families of 5 horizons, ...: 106,815 of 174,375 steps to train``: what the plan saves of the
    ``total`` steps its sweep's jobs would train from step 0."""
    families = plan["families"]
    saved = sum(f["shared"] for f in families.values())
    sizes = sorted({len(v["members"]) for v in families.values()})
    return (f"horizon forks: {len(families):,} {'family' if len(families) == 1 else 'families'} of "
            f"{'/'.join(map(str, sizes))} horizons, the shorter ones starting from the longest run's state where they "
            f"part: {total - saved:,} of {total:,} steps to train, as planned (the summary says what the branches took)")


def read(sweep_dir: Path) -> dict[str, Any]:
    """The sweep's plan, read once while its file is unchanged."""
    path = Path(sweep_dir) / forks.STORE / forks.PLAN
    try:
        st = os.stat(path)
        stamp = (st.st_mtime_ns, st.st_size)
    except OSError:
        return forks.read_plan(Path(sweep_dir))
    hit = _READ.get(path)
    if hit is None or hit[0] != stamp:
        _READ[path] = hit = (stamp, forks.read_plan(Path(sweep_dir)))
    return hit[1]


def fork_of(c: Mapping[str, Any], folder: str | Path, sweep_dir: str | Path | None) -> forks.Fork | None:
    """Job ``c``'s place in its sweep's plan (``sweep_dir``: None outside a sweep)."""
    if sweep_dir is None or not c.get("forks"):
        return None
    return forks.fork_of(Path(sweep_dir), Path(folder), c, read(Path(sweep_dir)))


def parted_by_validations(jobs: Sequence[tuple[Mapping[str, Any], str]]) -> str | None:
    """The line for a sweep whose horizons (``(config, family)``) would share their first stretch but for where each is
    validated."""
    longest, family = max(jobs, key=lambda j: int(j[0]["steps"]))
    top = int(longest["steps"])
    for c, f in jobs:
        h = int(c["steps"])
        if h < top and f == family:
            b = forks.shared_until((h, h), (top, h), int(c["warmup"]), str(c["schedule"]))  # validations aside
            if b >= forks.FORK_MIN * h:
                return ("horizon forks: none, though the horizons share their first steps: each is validated on its own "
                        "interval (a tenth of its run by default), which parts them at the first validation; set "
                        "`trainer.val_check_interval=${steps}` (or a number) to train the shared stretch once")
    return None
