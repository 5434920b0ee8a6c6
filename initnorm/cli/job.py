"""One job alone, from its config to its record: validate -> data -> model -> LightningModule -> Trainer
(the config's loggers and callbacks) -> metrics.json and HPARAMS in the job folder. A job checkpointed as
a member of a stacked group resumes here as a group of one (``training/group.py``).

``cli/train.py`` imports this module at the first job, so that ``--help`` and a bad value (one line,
before anything trains) never import Lightning; a vectorised sweep's workers import it before their first
group (``cli/workers.py``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import lightning as L
import torch
from hydra.utils import instantiate
from lightning.pytorch.callbacks import ProgressBar
from omegaconf import DictConfig

from initnorm import schema, tb
from initnorm.cli import console, devices
from initnorm.cli.jobinfo import hparams_of, hparams_writer, job_meta, job_overrides, launch_folder, run_label
from initnorm.cli.sweep import swept_keys
from initnorm.config import to_plain
from initnorm.models.build import build_model
from initnorm.models.init_check import check_built
from initnorm.models.own import describe as describe_roles
from initnorm.results import write_atomic, write_metrics
from initnorm.training import trackers
from initnorm.training.checkpoints import Checkpoint, CheckpointOnSignal
from initnorm.training.compiling import should_compile, use_cache
from initnorm.training.group import Member, train_group
from initnorm.training.record import hp_metrics, job_metrics
from initnorm.training.resume import inspect_folder
from initnorm.training.tasks import TASKS
from initnorm.training.validation import missing_at, validation_interval

# Lightning sets its loggers to INFO when it is first imported, which may be just now, after the command quieted
# them (cli/train.main): the accelerator banners and tips would then come back with the first job.
console.quiet()


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
    module = task.make_module(built.model, built.roles, built.table, lr=c["lr"], steps=c["steps"], warmup=c["warmup"], optim=c["optim"],
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


def as_member(cfg: DictConfig, c: dict[str, Any], out_dir: str | Path) -> Member:
    """This job (inside Hydra's run of it) as a member of a stacked group: its config, folder, record fields, logger and HPARAMS."""
    return Member(c, Path(out_dir), meta=job_meta(), hparams=hparams_of(c, job_overrides()[0]),
                  loggers=trackers.make(c["logger"], out_dir, run_label(job_overrides()[0], swept_keys(), c["seed"]), launch_folder()),
                  write_hparams=hparams_writer(c))
