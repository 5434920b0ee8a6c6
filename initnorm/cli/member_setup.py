"""A stacked group's members made ready without Hydra's ``run_job``: what it leaves in a job folder, in milliseconds.

``run_job`` spends some 30 ms of this machine on a job before its task runs a line (the whole config deep-copied twice
and set as Hydra's current one twice, three YAML files dumped from it, the logging configured), and composing the job's
config as much again: little beside a job's training, more than a one-step member of a group trains. Here a member gets
the same folder:

- ``.hydra/config.yaml``, ``hydra.yaml`` and ``overrides.yaml``, byte for byte as ``run_job`` writes them: the same
  dumper over the same values (``Composer.job_plain``: its composition's plain values with the job's overrides set).
  A block mapping's YAML is its entries' one after another, so each node a member shares with its composition is dumped
  once per unit (``Dumps``) and a member dumps only the nodes its overrides touch and the hydra node's ``overrides``,
  ``job`` and ``runtime``;
- the job logging configured for its folder as ``run_job`` configures it (``train.log``; its lines while it is set up
  go there, and the group's fit's into the last member's, as under ``run_job``);
- its config: the one the preflight checked (``checked_plan.plan()``), else composed and checked here (a search's trial);
- its record fields, label and start line: a job's (``cli/job.as_member``), given its overrides and number.

Hydra's ``on_job_start``/``on_job_end`` callbacks take the job's config: where one is configured, the members go
through ``run_job`` as before (``run.py``). A job whose overrides ``job_plain`` cannot set in place (``+key``,
``~key``, a typed node) is composed as Hydra composes it (``Composer.job_config``) and saved from that.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import yaml
from hydra.core.utils import JobReturn, JobStatus, configure_log
from omegaconf import DictConfig, OmegaConf, open_dict

from initnorm.cli import console
from initnorm.cli.composer import Composer
from initnorm.cli.disk import save_hydra_file
from initnorm.cli.hydra_adapter import get_omega_conf_dumper  # OmegaConf.to_yaml's own dumper, for plain values
from initnorm.cli.job import as_member, checked
from initnorm.cli.jobinfo import overrides_dict
from initnorm.training.fit import Member


def dump(value: Any) -> str:
    """Plain values as ``OmegaConf.to_yaml`` writes their config."""
    return yaml.dump(value, default_flow_style=False, allow_unicode=True, sort_keys=False, Dumper=get_omega_conf_dumper())


class Dumps:
    """A mapping's YAML from its entries', each node that the unit's members share (the same object) dumped once."""

    def __init__(self) -> None:
        self._made: dict[tuple, tuple[Any, str]] = {}  # kept with the node it was made from: its id stays its own

    def entry(self, under: str | None, key: str, value: Any) -> str:
        """``key: value`` as it stands in the mapping (at the top, or in the top-level node ``under``)."""
        shared = isinstance(value, (dict, list))
        cache = (under, key, id(value)) if shared else (under, key, type(value).__name__, value)
        made = self._made.get(cache)
        if made is None:
            text = dump({key: value} if under is None else {under: {key: value}})
            made = self._made[cache] = (value, text if under is None else text.split("\n", 1)[1])
        return made[1]

    def mapping(self, values: dict[str, Any], under: str | None = None) -> str:
        if not values:
            return dump({under: {}} if under else {})
        return (f"{under}:\n" if under else "") + "".join(self.entry(under, k, v) for k, v in values.items())


class MemberSetup:
    """One unit's members, one after another; ``composer``: the sweep's, ``master``: the sweep's config."""

    def __init__(self, composer: Composer, master: DictConfig) -> None:
        self.composer, self.master = composer, master
        self.sweep_dir = str(master.hydra.sweep.dir)
        self.dumps = Dumps()
        self._hydra: DictConfig | None = None  # the first member's hydra node, for what the job logging reads of it

    def member(self, job) -> tuple[Member, JobReturn]:
        """``job`` (``run.PlannedJob``) as a member to fit, its folder made as ``run_job`` makes it, and its return."""
        composer = self.composer
        c = copy.deepcopy(job.checked) if job.checked is not None else checked(composer.task(job.overrides)[0])
        plain = composer.job_plain(job.overrides)
        if plain is None:
            plain = OmegaConf.to_container(composer.job_config(job.overrides), resolve=False, enum_to_str=True)
        out = os.path.abspath(os.path.join(self.sweep_dir, composer.subdir(job.overrides, c)))
        hydra = plain["hydra"] = dict(plain["hydra"])
        name = hydra["job"]["name"]
        hydra["job"] = {**hydra["job"], "id": f"{name}_{job.num}", "num": job.num}  # as run._job_config sets them
        hydra["runtime"] = {**hydra["runtime"], "output_dir": out}
        Path(out).mkdir(parents=True, exist_ok=True)
        subdir = self._configure_log(hydra, job.num)
        if subdir is not None:
            save_hydra_file(Path(out, subdir), "config.yaml", self.dumps.mapping({k: v for k, v in plain.items() if k != "hydra"}))
            save_hydra_file(Path(out, subdir), "hydra.yaml", self.dumps.mapping(hydra, "hydra"))
            save_hydra_file(Path(out, subdir), "overrides.yaml", dump(hydra["overrides"]["task"]))
        member = as_member(c, out, (overrides_dict(job.overrides), job.num, dict(hydra["runtime"]["choices"])), self.sweep_dir)
        console.job_started(member.label, job.num)
        ret = JobReturn(overrides=list(job.overrides), hydra_cfg=OmegaConf.create({"hydra": {"job": {"num": job.num}}}),
                        working_dir=out, task_name=name, status=JobStatus.COMPLETED)
        return member, ret

    def _configure_log(self, hydra: dict[str, Any], num: int) -> str | None:
        """The job logging configured for this member (``hydra.job_logging``, its interpolations read from the member's
        hydra node: its folder, name and number); returns ``hydra.output_subdir`` as it resolves there."""
        if self._hydra is None:  # once per unit: a config of a plain hydra node costs ~6 ms
            self._hydra = OmegaConf.create({"hydra": hydra})
            OmegaConf.copy_cache(from_config=self.master, to_config=self._hydra)
        node = self._hydra.hydra
        with open_dict(node):
            node.runtime.output_dir = hydra["runtime"]["output_dir"]
            node.job.id, node.job.num = hydra["job"]["id"], num
            node.job.override_dirname = hydra["job"]["override_dirname"]
            node.overrides.task = hydra["overrides"]["task"]
        configure_log(node.job_logging, node.verbose)
        return node.output_subdir
