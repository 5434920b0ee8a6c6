"""Train one job: ``python -m initnorm.train [overrides]``, or a sweep with ``-m``.

``train(cfg)`` is a plain function (tests call it with a composed config); ``main`` is the
Hydra entry point around it. A run flows once: validate -> data -> model -> LightningModule ->
Trainer (TensorBoard logger) -> metrics.json + HPARAMS in the job folder.
"""

from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import hydra
import lightning as L
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from hydra.utils import instantiate
from lightning.pytorch.callbacks import ProgressBar
from omegaconf import DictConfig

from initnorm import schema, tb
from initnorm.cli import console, devices, disk, launchers, sweep
from initnorm.cli import signals as cli_signals
from initnorm.cli.compose import CONF_DIR
from initnorm.cli.preflight import check_command_line, describe_plan
from initnorm.cli.sweep import register_resolvers, swept_keys
from initnorm.config import to_plain
from initnorm.errors import ConfigError
from initnorm.models.build import build_model
from initnorm.models.init_check import check_built
from initnorm.models.own import describe as describe_roles
from initnorm.provenance import describe
from initnorm.results import write_atomic, write_metrics
from initnorm.training import trackers
from initnorm.training.compiling import should_compile, use_cache
from initnorm.training.group import Member, train_group
from initnorm.training.record import hp_metrics, job_metrics
from initnorm.training.resume import Checkpoint, inspect_folder, record_failure
from initnorm.training.signals import CheckpointOnSignal
from initnorm.training.tasks import TASKS
from initnorm.training.validation import missing_at, validation_interval

HPARAM_KEYS = ("norm", "warmup", "seed", "lr", "width", "depth", "steps", "batch_size")


def job_overrides() -> tuple[dict[str, str], int, dict[str, str]]:
    """The task overrides of this Hydra job as a dict, its number, and the group choices."""
    if not HydraConfig.initialized():
        return {}, 0, {}
    hc = HydraConfig.get()
    overrides = dict(o.split("=", 1) for o in hc.overrides.task if "=" in o)
    overrides = {k.lstrip("+~"): v for k, v in overrides.items()}
    num = hc.job.num if hc.mode is not None and hc.mode.name == "MULTIRUN" else 0
    return overrides, int(num or 0), dict(hc.runtime.choices)


def hparams_of(c: dict[str, Any], overrides: dict[str, str]) -> dict[str, Any]:
    hp = {k: c[k] for k in HPARAM_KEYS if k in c}
    hp |= {"init": c["init"]["name"], "param": c["param"]["name"], "norm_type": c["norm_type"]["name"], "model": c["model"]["family"]}
    return hp | {k: v for k, v in overrides.items() if k not in hp}


def launch_folder() -> Path:
    """The folder the command started in (a job runs in its own folder)."""
    return Path(HydraConfig.get().runtime.cwd) if HydraConfig.initialized() else Path.cwd()


def train(cfg: DictConfig, out_dir: str | Path = ".") -> dict[str, Any]:
    """Run one job in ``out_dir`` and return its metrics (also written to ``metrics.json`` there)."""
    c = schema.check(to_plain(cfg), base=launch_folder())  # data.path absolute against the launch folder
    schema.check_text(c)
    out_dir = Path(out_dir)
    prior = inspect_folder(out_dir, c)  # finished: skip; killed: resume (training/resume.py)
    if prior.finished is not None:
        return prior.finished | {"skipped": True}
    if prior.vectorized is not None:  # checkpointed as a member of a stacked group: resumes as a group of one
        device = devices.for_job(c["trainer"], job_overrides()[1])
        gpu = device.get("accelerator") == "gpu"
        return train_group([as_member(cfg, c, out_dir)], f"cuda:{device['devices'][0]}" if gpu else "cpu")[0]
    if c["threads"]:
        torch.set_num_threads(int(c["threads"]))
    # Chapter 003 flushes denormals: vanishing activations (N(0, 0.01) through 30 layers) are otherwise very slow on a CPU.
    torch.set_flush_denormal(bool(c["flush_denormal"]))
    L.seed_everything(c["seed"], verbose=False)
    task = TASKS.get(c["data"]["kind"])
    data = task.make_data(c)
    built = build_model(c["model"], c["init"], c["param"], data.vocab_size)
    if hasattr(built.model, "role_table"):  # model=custom: the inferred roles and their multipliers, beside the run
        write_atomic(out_dir / "roles.txt", describe_roles(built.model, built.table))
    check_built(built, c, data)  # model=custom: an init that ignores the table is one line, before training
    compiled = should_compile(c["compile"], c["steps"])
    if compiled:
        use_cache(launch_folder())  # one cache for every job of the sweep and the next sweep
    module = task.module(built.model, built.roles, built.table, lr=c["lr"], steps=c["steps"], warmup=c["warmup"], optim=c["optim"],
                         schedule=c["schedule"], log_every=c["log_every"],
                         compile=compiled)
    loggers = trackers.make(c["logger"], out_dir, run_label(job_overrides()[0], swept_keys(), c["seed"]), launch_folder())
    callbacks = [instantiate(cb) for cb in (cfg.get("callbacks") or {}).values()]
    _, job_num, _ = job_overrides()
    bar = bool(c["trainer"]["enable_progress_bar"]) and not console.in_sweep()  # a sweep prints one line per job instead
    if not bar:  # Lightning refuses a bar callback then
        callbacks = [cb for cb in callbacks if not isinstance(cb, ProgressBar)]
    checkpoint = Checkpoint(out_dir, c["checkpoint"]["every_n_steps"], c)
    callbacks += [checkpoint, CheckpointOnSignal(checkpoint.save, out_dir)]  # SIGTERM/SIGINT: checkpoint, then stop
    device = devices.for_job(c["trainer"], job_num)  # one device per job; job k on GPU k mod N
    every = validation_interval(c["steps"], c["trainer"]["val_check_interval"])
    trainer: L.Trainer = instantiate(cfg.trainer, logger=loggers, callbacks=callbacks, default_root_dir=str(out_dir),
                                     enable_progress_bar=bar, val_check_interval=every, **device)
    for writer in trackers.tensorboards(loggers):
        tb.write_layout(writer)

    start = time.perf_counter()
    trainer.fit(module, datamodule=data, ckpt_path=prior.checkpoint, weights_only=True)  # tensors and plain values only
    wall = time.perf_counter() - start
    steps_done = trainer.global_step
    if module.diverged_step is None and missing_at(steps_done, [module.val_history], [True]):
        trainer.validate(module, datamodule=data, verbose=False)

    extra = module.extra_metrics(c)  # the family's own numbers (first loss, accuracy, gap ...)
    metrics = job_metrics(c, val_history=module.val_history, diverged_step=module.diverged_step, steps=steps_done,
                          resumed=prior.step, wall=wall,
                          ms_per_step=1000.0 * wall / max(1, steps_done - prior.step), compiled=compiled,
                          params=sum(p.numel() for p in built.model.parameters()), extra=extra, meta=job_meta())
    write_metrics(out_dir, metrics)
    trackers.record(loggers, hparams_of(c, job_overrides()[0]), hp_metrics(metrics, extra), steps_done, hparams_writer(c))
    trackers.finish(loggers)
    return metrics


def job_meta() -> dict[str, Any]:
    """What Hydra knows of this job, for its record: its number, overrides, swept keys and group choices."""
    overrides, num, choices = job_overrides()
    return {"job_num": num, "overrides": overrides, "swept": swept_keys(), "choices": choices}


def hparams_writer(c: dict[str, Any]):
    """``(writer, hp metrics, step)`` -> this job's HPARAMS entry: what varies first (the swept keys; a single run's
    overrides), the trial named by it, the metrics at the last step."""
    overrides, _, _ = job_overrides()
    swept = swept_keys()
    varying = [k for k in (swept if swept is not None else sweep.what_sets_apart(overrides)) if not k.startswith("hydra.")]
    hparams, label = hparams_of(c, overrides), run_label(overrides, swept, c["seed"])
    return lambda writer, metrics, step: tb.write_hparams(writer, hparams, metrics, varying, label, step)


def as_member(cfg: DictConfig, c: dict[str, Any], out_dir: str | Path) -> Member:
    """This job (inside Hydra's run of it) as a member of a stacked group: its config, folder, record fields, logger and HPARAMS."""
    return Member(c, Path(out_dir), meta=job_meta(), hparams=hparams_of(c, job_overrides()[0]),
                  loggers=trackers.make(c["logger"], out_dir, run_label(job_overrides()[0], swept_keys(), c["seed"]), launch_folder()),
                  write_hparams=hparams_writer(c))


register_resolvers()
disk.hydra_saves_atomically()  # here too, not only in main(): a parallel launcher's workers import this module, not main()


def run_label(overrides: dict[str, str], swept: list[str] | None, seed) -> str:
    """``norm=post warmup=200 seed=3``: a sweep's swept values, or what a single run's command line set (watch-only keys left out)."""
    return tb.run_label(overrides if swept is not None else {k: v for k, v in overrides.items() if k in sweep.what_sets_apart(overrides)},
                        swept, seed)


def job_failed(cfg: DictConfig, exc: Exception) -> float:
    """Record a failed job (status, error line, traceback) in its metrics.json; the sweep goes on."""
    overrides, num, choices = job_overrides()
    job = {"seed": cfg.get("seed"), "job_num": num, "overrides": overrides, "swept": swept_keys(),
           "choices": choices, "provenance": describe()}
    print(f"error: job {num} failed: {record_failure(os.getcwd(), exc, job)} -> {os.getcwd()}", file=sys.stderr)
    return math.nan


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="train")
def hydra_main(cfg: DictConfig) -> float:
    console.quiet()  # here, not at import: a joblib worker or a SLURM job runs this function, not this module's top level
    multirun = HydraConfig.get().mode == RunMode.MULTIRUN
    cli_signals.job_started()  # a stop signal between two jobs stops here
    overrides, num, _ = job_overrides()
    label = run_label(overrides, swept_keys(), cfg.get("seed"))
    if multirun:
        console.job_started(label, num)
    try:
        metrics = train(cfg, os.getcwd())
    except ConfigError as exc:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        if multirun:
            return job_failed(cfg, exc)
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    except Exception as exc:  # a crash in one job of a sweep must not cost the others
        if err := disk.disk_error(exc):  # a full disk: the next job would fail the same way
            raise err from exc
        try:
            result = job_failed(cfg, exc)
        except OSError as write_exc:
            raise (disk.disk_error(write_exc) or write_exc) from exc
        if multirun and os.environ.get("HYDRA_FULL_ERROR") != "1":
            return result
        raise
    console.job_finished(label, metrics, os.getcwd(), HydraConfig.get().sweep.dir if multirun else None)
    loss = metrics.get("final_val_loss")  # a finished record of an older version may lack keys
    return loss if isinstance(loss, float) else math.nan


def main() -> None:
    """``python -m initnorm.train``: check every job of the command line first (cli/preflight.py),
    then let Hydra run them. Exit 2: a bad value (one line, nothing trained); 1: a job of a sweep failed, or a
    cluster stopped it before it finished (the summary lists it and the command that resumes it)."""
    console.quiet()
    try:
        console.check_flags(sys.argv[1:])
        jobs = check_command_line(sys.argv[1:])
    except ConfigError as exc:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    plan = describe_plan(jobs) if jobs else None
    if plan:
        print(plan)
    if jobs and len(jobs) > 1:
        os.environ[console.TOTAL_ENV] = str(len(jobs))  # every job's progress line counts against it
    launchers.register()  # hydra/launcher=slurm and =vectorized, also from an editable install
    with cli_signals.honoured(sys.argv[1:]), disk.reported(sys.argv[1:]):  # stop signals, full disk: one line, resume command
        hydra_main()
    if sweep.FAILED_JOBS or sweep.STOPPED_JOBS:
        sys.exit(1)


if __name__ == "__main__":
    main()
