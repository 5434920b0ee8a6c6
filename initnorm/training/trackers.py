"""Trackers: the Lightning loggers a job writes to (``logger=tensorboard|csv|mlflow|wandb``, or several:
``logger=[tensorboard,mlflow]``), and the one path by which every scalar and the job's record reach them.

``conf/logger/<name>.yaml`` puts each logger under its own key of the ``logger`` node, so a list of
options merges into one node of named loggers (a node with a ``_target_`` of its own is one logger,
as before). Every scalar of a run (losses, learning rate, the instruments' per-layer statistics
and diagnostics) is written through ``writers(loggers)``: a TensorBoard logger's own
``SummaryWriter`` (one event a step: ``Written``), and for any other logger a ``Buffered`` writer that hands it one
``log_metrics`` call per step (one row of a CSV, one batch to an MLflow server instead of one
request per tag). The record at the end (``record``) is TensorBoard's HPARAMS entry, and for the
others the same hyperparameters (``log_hyperparams``) and final metrics (``log_metrics``). A
stacked group's members each get their own loggers, so each is its own run. A job that resumes (a
checkpoint in its folder) writes on into the run it started: ``make`` keeps each tracker's run id in the
job folder (``RUN_IDS``) and hands it back to MLflow (``run_id``) and W&B (``id``, ``resume="allow"``).
That file is data in a folder others may write (a file read back from a folder never names code
or another run by itself), so an id in it is trusted only where the job's
own record vouches for it (``stored_runs``): the folder holds the job's checkpoint, which the resume accepted
(the same config: ``training/resume.inspect_folder``), the file names this folder, and an MLflow run carries
this folder's tag. A fresh job, or a file planted beside another's checkpoint, starts new runs and says so. A job
that fails before ``finish`` (``training/resume.record_failure`` calls ``fail``) ends its runs as failed, so
no try is left RUNNING.

A tracker's failure costs the tracker only (ARCHITECTURE.md: the job is the unit of failure, and a tracker is not the
job): every call into a logger (Lightning's and ours) goes through ``_attempt``, so the first exception a logger raises
(a store overwritten mid-run, a server gone) is one warning line, the logger is dropped for the rest of the job, and
``failures`` gives the job's record what failed (``trackers_failed`` in ``metrics.json``).

MLflow's address is ``logger.mlflow.tracking_uri``; null (the default) is ``MLFLOW_TRACKING_URI`` if the
command's environment sets it, else ``outputs/mlflow.db`` under the launch folder (``DEFAULT_STORE``), read
when a job's loggers are made, never in the config: MLflow's ``set_tracking_uri`` sets that variable in
the process (``mlflow_logger`` puts it back), and a config that read it composed differently for the
second member of a vectorised group than for the first. A local store's experiment keeps its artifacts
beside the store (``mlartifacts/``), not in the folder of the job that happened to create it.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import json
import logging
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from initnorm.errors import ConfigError
from initnorm.results import write_atomic
from initnorm.safe_files import NotAFile, open_no_follow, read_bounded

# The module each tracker needs, and the extra that installs it (pyproject.toml).
EXTRAS = {"mlflow": ("mlflow", "mlflow"), "wandb": ("wandb", "wandb")}
RUN_IDS = "trackers.json"  # in the job folder: {"folder": the job folder, "runs": {logger name: run id}}
RUN_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")  # MLflow's (32 hex digits) and W&B's (8 base-36 characters) run ids
MAX_IDS_BYTES = 64 * 2**10
JOB_TAG = "initnorm.job_folder"  # an MLflow run's tag: the job folder that made it
log = logging.getLogger(__name__)
RESUMABLE = ("initnorm.training.trackers.mlflow_logger", "initnorm.training.trackers.wandb_logger")
DEFAULT_STORE = "outputs/mlflow.db"  # under the launch folder, beside outputs/runs and outputs/multirun (and ignored by git)
URI_ENV = "MLFLOW_TRACKING_URI"
_OPEN: dict[str, list] = {}  # job folder -> the loggers ``make`` gave it that ``finish`` has not ended yet


def nodes(node: Mapping[str, Any] | None) -> dict[str, Mapping[str, Any]]:
    """The ``logger`` node as ``{name: logger node}``: one node with a ``_target_``, or several named ones."""
    if not node:
        return {}
    if "_target_" in node:
        return {"logger": node}
    return {k: v for k, v in node.items() if isinstance(v, Mapping) and "_target_" in v}


def check(node: Mapping[str, Any] | None) -> None:
    """Each chosen tracker's package is installed; else one line naming the extra that brings it."""
    for name, n in nodes(node).items():
        for key, (module, extra) in EXTRAS.items():
            if key in str(n["_target_"]).lower() and importlib.util.find_spec(module) is None:
                raise ConfigError(f"logger={name} needs the {module} package, which is not installed: pip install 'initnorm[{extra}]'"
                                  " (or choose another logger: logger=tensorboard, csv, mlflow, wandb, or a list: "
                                  "logger=[tensorboard,csv])")


def store_uri(uri: str | None, base: Path) -> str | None:
    """A tracking URI without a scheme is a path from the launch folder (a job runs in its own folder): ``*.db`` an
    SQLite store, anything else a folder (MLflow's file store, which MLflow 3 refuses unless MLFLOW_ALLOW_FILE_STORE=true).
    None: the environment's MLFLOW_TRACKING_URI, else ``DEFAULT_STORE``."""
    uri = uri or os.environ.get(URI_ENV) or DEFAULT_STORE
    if ":" in uri:
        return uri
    path = (base / uri).resolve()
    return f"sqlite:///{path}" if path.suffix == ".db" else path.as_uri()


def make(node: Mapping[str, Any] | None, save_dir: str | Path, run_name: str, base: str | Path = ".") -> list:
    """The job's loggers from its ``logger`` node, each writing into ``save_dir`` (the job folder); a node with a
    ``run_name`` key gets the run's label, one with a ``tracking_uri`` gets it made absolute against ``base``, and
    a tracker with a run id kept in the folder by an earlier start of this job continues that run."""
    from hydra.utils import instantiate

    check(node)
    ids_file = Path(save_dir) / RUN_IDS
    prior = stored_runs(Path(save_dir))
    out, ids = [], {}
    for name, n in nodes(node).items():
        n = dict(n)
        if "run_name" in n:
            n["run_name"] = n["run_name"] or run_name
        if "tracking_uri" in n:
            n["tracking_uri"] = store_uri(n["tracking_uri"], Path(base))
        if n["_target_"] in RESUMABLE:
            n["resume_id"] = prior.get(name)
        out.append(logger := _guarded(instantiate(n, save_dir=str(save_dir)), name))
        if n["_target_"] in RESUMABLE:
            ids[name] = logger.run_id if hasattr(logger, "run_id") else logger.experiment.id
    if ids and ids != prior:  # atomic: a kill mid-write must not leave the resume a broken file
        write_atomic(ids_file, json.dumps({"folder": str(Path(save_dir).resolve()), "runs": ids}) + "\n")
    _OPEN.setdefault(_key(save_dir), []).extend(out)
    return out


def _key(folder: str | Path) -> str:
    return str(Path(folder).resolve())


# What Lightning and initnorm call on a logger while a job trains and ends; each goes through ``_attempt``.
GUARDED = ("log_metrics", "log_hyperparams", "log_graph", "save", "finalize", "after_save_checkpoint")


def _guarded(logger, name: str):
    """``logger`` with each of its GUARDED methods as ``_attempt`` of itself: its first failure is one warning line."""
    logger._initnorm_name, logger._initnorm_failed = name, None
    for method in GUARDED:
        if callable(bound := getattr(logger, method, None)):
            setattr(logger, method, lambda *a, _bound=bound, _what=method, **kw: _attempt(logger, _what, _bound, *a, **kw))
    return logger


def _attempt(logger, what: str, call: Callable, *args, **kwargs):
    """``call(*args, **kwargs)`` unless ``logger`` already failed; an exception it raises marks the logger failed (one
    warning line: which tracker, what failed, and that the job goes on), and nothing more goes to it."""
    if getattr(logger, "_initnorm_failed", None) is not None:
        return None
    try:
        return call(*args, **kwargs)
    except Exception as exc:
        line = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else 'no message'}"
        logger._initnorm_failed = f"{what}: {line}"
        log.warning("the %s tracker failed (%s, in %s): the job goes on without it; its run there is incomplete, and the job's "
                    "metrics.json says so (trackers_failed)", getattr(logger, "_initnorm_name", type(logger).__name__), line, what)
        return None


def failures(loggers: Sequence | None) -> dict[str, str]:
    """``{tracker name: what failed}`` for the loggers among ``loggers`` that failed during the job (``_attempt``)."""
    return {getattr(lg, "_initnorm_name", type(lg).__name__): lg._initnorm_failed for lg in loggers or ()
            if getattr(lg, "_initnorm_failed", None) is not None}


def stored_runs(folder: Path) -> dict[str, str]:
    """The run ids an earlier start of the job in ``folder`` kept in ``RUN_IDS``, where its own record vouches for them: the
    folder holds the job's checkpoint (accepted by the resume before the loggers are made: the same config) and the file
    names this folder and holds run ids only. Else none (new runs), with one warning line where such a file was there."""
    from initnorm.training.resume import has_checkpoint

    path = folder / RUN_IDS
    if not os.path.lexists(path):
        return {}
    if not has_checkpoint(folder):
        log.warning("ignored %s: the job folder holds no checkpoint of this job, so it starts new tracker runs (a job that "
                    "starts afresh never writes into runs another start, or another job, made)", path)
        return {}
    try:
        data = json.loads(read_bounded(path, MAX_IDS_BYTES))
    except (NotAFile, OSError, ValueError) as exc:
        data = f"not readable ({exc})"
    runs = data.get("runs") if isinstance(data, dict) and data.get("folder") == str(folder.resolve()) else None
    if not isinstance(runs, dict) or not all(isinstance(k, str) and isinstance(v, str) and RUN_ID.fullmatch(v) for k, v in runs.items()):
        log.warning("ignored %s: not this job's run ids (%s), so it starts new tracker runs", path,
                    data if isinstance(data, str) else "written for another folder, or not the file initnorm writes")
        return {}
    return runs


def mlflow_logger(save_dir: str, tracking_uri: str | None, experiment_name: str, run_name: str, resume_id: str | None = None,
                  **kwargs):
    """Lightning's MLflow logger, tagged with the job folder (where its config, checkpoints and metrics.json are);
    ``resume_id``: the run an earlier start of this job made, written on into."""
    import mlflow  # noqa: F401  (it sets its loggers' level on import)
    from lightning.pytorch.loggers import MLFlowLogger
    from mlflow.tracking import MlflowClient

    logging.getLogger("mlflow").setLevel(logging.WARNING)  # its INFO lines (tables, experiment created) would break a sweep's lines
    tags = {JOB_TAG: str(Path(save_dir).resolve())} | dict(kwargs.pop("tags", None) or {})
    env = os.environ.get(URI_ENV)
    try:
        with _store_lock(tracking_uri):  # the store's tables, the experiment and this run made now, one job at a time
            if resume_id is not None and not _made_here(tracking_uri, resume_id, tags[JOB_TAG]):
                log.warning("MLflow run %s was not made in %s (its %s tag): this job starts a new run", resume_id, save_dir, JOB_TAG)
                resume_id = None
            client = MlflowClient(tracking_uri)
            if client.get_experiment_by_name(experiment_name) is None:  # made here, not by Lightning: its own line came twice
                made = client.create_experiment(experiment_name, artifact_location=_artifact_root(tracking_uri))
                # MLflow 3's UI opens an experiment on its GenAI page (Traces 0); the runs are under "Model training".
                # Printed, as a job's own lines are: news, not a warning (it was one, since an info line of a joblib worker
                # reaches its train.log only, and read "[WARNING]" on every first sweep).
                print(f"MLflow: experiment {experiment_name} created in {tracking_uri}; its runs: `mlflow ui --backend-store-uri "
                      f"{tracking_uri}`, then http://127.0.0.1:5000/#/experiments/{made}/runs?workflowType=machine_learning", flush=True)
            logger = MLFlowLogger(experiment_name=experiment_name, run_name=run_name, tracking_uri=tracking_uri, tags=tags,
                                  save_dir=None, run_id=resume_id, **kwargs)
            _ = logger.run_id
            if resume_id:
                client.update_run(resume_id, status="RUNNING")  # an earlier start that failed had ended it
    finally:
        # MLflow's set_tracking_uri (Lightning calls it) sets the variable for the whole process: put it back, so
        # that the next job's default address is the environment's, not this job's.
        if env is None:
            os.environ.pop(URI_ENV, None)
        else:
            os.environ[URI_ENV] = env
    return logger


def _artifact_root(uri: str) -> str | None:
    """Where a new experiment keeps its artifacts: beside a local SQLite store (``mlartifacts/``), as ``mlflow server``
    does; None elsewhere (a file store keeps them inside itself, a server decides). MLflow's own default for a
    database store is ``./mlruns`` from the working folder, which in a job is the job's folder."""
    if uri.startswith("sqlite:///"):
        return (Path(uri[len("sqlite:///"):]).parent / "mlartifacts").as_uri()
    return None


def _made_here(uri: str | None, run_id: str, folder: str) -> bool:
    """Whether the MLflow run ``run_id`` exists in the store and was made by the job in ``folder`` (its ``JOB_TAG``)."""
    from mlflow.tracking import MlflowClient

    try:
        return MlflowClient(uri).get_run(run_id).data.tags.get(JOB_TAG) == folder
    except Exception:  # no such run in this store
        return False


@contextlib.contextmanager
def _store_lock(uri: str | None):
    """An flock beside a local MLflow store: jobs that start together (local_parallel, a vectorised group's
    workers) would otherwise create its tables or the experiment twice, and one of them fail."""
    local = uri[len("sqlite:///"):] if uri and uri.startswith("sqlite:///") else (urlparse(uri).path if uri and uri.startswith("file:")
                                                                                   else None)
    if local is None:
        yield
        return
    path = Path(local)
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = path.with_name(path.name + ".lock")
    try:  # not through a link planted at its name (initnorm/safe_files.py)
        fd = open_no_follow(lock, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    except NotAFile as exc:
        raise ConfigError(f"{lock} is {exc}, not the lock initnorm keeps beside the MLflow store; delete it (or move it away)") from None
    with os.fdopen(fd, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def wandb_logger(save_dir: str, project: str, run_name: str, mode: str, entity: str | None = None, resume_id: str | None = None,
                 **kwargs):
    """Lightning's W&B logger on a run of its own: Lightning's would reuse a run already open in the process
    (``wandb.run``), so the members of a stacked group, or the jobs a launcher runs one after another, would share one.
    ``resume_id``: the run id an earlier start of this job had (online, W&B continues that run; offline, the new
    run folder carries the same id)."""
    import wandb
    from lightning.pytorch.loggers import WandbLogger

    resume = {"id": resume_id, "resume": "allow"} if resume_id else {}
    run = wandb.init(dir=save_dir, project=project, entity=entity, name=run_name, mode=mode, reinit="create_new",
                     settings=wandb.Settings(silent=True, console="off"), **resume, **kwargs)
    return WandbLogger(experiment=run)


class Buffered:
    """A logger that is not TensorBoard as a ``SummaryWriter``'s ``add_scalar``: a step's scalars go out in one call."""

    def __init__(self, logger):
        self.logger, self.step, self.values = logger, None, {}

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        if step != self.step:
            self._write()
            self.step = step
        self.values[tag] = float(value)

    def _write(self) -> None:
        if self.values:
            self.logger.log_metrics(self.values, step=self.step)
        self.values = {}

    def flush(self) -> None:
        self._write()


class Written(Buffered):
    """A TensorBoard logger's ``SummaryWriter`` written one event a step: the step's scalars as one ``Summary`` of many
    values (TensorBoard reads each value as ``add_scalar``'s one-value event; a measured step of the default Decoder
    has about 60 tags, and an event costs its own proto, record and CRC), through ``_attempt``."""

    def _write(self) -> None:
        if self.values:
            from tensorboard.compat.proto.summary_pb2 import Summary

            summary = Summary(value=[Summary.Value(tag=t, simple_value=v) for t, v in self.values.items()])
            _attempt(self.logger, "add_scalar", lambda: self.logger.experiment._get_file_writer().add_summary(summary, self.step))
        self.values = {}

    def flush(self) -> None:
        super().flush()
        _attempt(self.logger, "flush", self.logger.experiment.flush)


def _is_tensorboard(logger) -> bool:
    from lightning.pytorch.loggers import TensorBoardLogger

    return isinstance(logger, TensorBoardLogger)


def writers(loggers: Sequence) -> list:
    """Where a run's scalars go: each logger as something with ``add_scalar(tag, value, step)`` (kept on the logger)."""
    out = []
    for lg in loggers:
        if getattr(lg, "_initnorm_writer", None) is None:
            lg._initnorm_writer = Written(lg) if _is_tensorboard(lg) else Buffered(lg)
        out.append(lg._initnorm_writer)
    return out


def tensorboards(loggers: Sequence) -> list:
    """The TensorBoard writers among ``loggers`` (the custom-scalars layout and HPARAMS are TensorBoard's own)."""
    return [lg.experiment for lg in loggers if _is_tensorboard(lg) and getattr(lg, "_initnorm_failed", None) is None]


def record(loggers: Sequence, hparams: Mapping[str, Any], metrics: Mapping[str, float | None], step: int,
           write_tensorboard: Callable[[Any, dict, int], None]) -> None:
    """The job's record in every tracker: TensorBoard's HPARAMS entry (``write_tensorboard(writer, metrics, step)``);
    for the others the same hyperparameters and final metrics (None and NaN left out, as in HPARAMS)."""
    values = {k: float(v) for k, v in metrics.items() if v is not None and not math.isnan(v)}
    for lg in loggers:
        if (w := getattr(lg, "_initnorm_writer", None)) is not None:
            w.flush()  # the last step's scalars before the record
        if _is_tensorboard(lg):
            _attempt(lg, "the HPARAMS entry", lambda lg=lg: write_tensorboard(lg.experiment, dict(metrics), step))
        else:
            lg.log_hyperparams(dict(hparams))
            lg.log_metrics(values, step=step)


def finish(loggers: Sequence, status: str = "success") -> None:
    """Everything buffered written, each logger finalised (``status``: success or failed); a W&B run ended (the next
    job opens its own)."""
    for lg in loggers:
        if (w := getattr(lg, "_initnorm_writer", None)) is not None:
            w.flush()
        lg.finalize(status)
        if _is_wandb(lg):
            _attempt(lg, "finish", lambda lg=lg: lg.experiment.finish(exit_code=0 if status == "success" else 1))
        _forget(lg)


def _is_wandb(logger) -> bool:
    from lightning.pytorch.loggers import WandbLogger

    return isinstance(logger, WandbLogger)


def _forget(logger) -> None:
    for key in [k for k, kept in _OPEN.items() if any(lg is logger for lg in kept)]:
        _OPEN[key] = [lg for lg in _OPEN[key] if lg is not logger]
        if not _OPEN[key]:
            del _OPEN[key]


def fail(folder: str | Path) -> None:
    """The runs of the job in ``folder`` that this process opened and did not finish, ended as failed (a job that
    raised between ``make`` and ``finish``: in a vectorised group, whose Trainer has no loggers of its own to end)."""
    loggers = _OPEN.pop(_key(folder), [])
    for lg in loggers:
        try:
            finish([lg], "failed")
        except Exception as exc:  # the failure being recorded matters more than the tracker's
            log.warning("could not end the %s run of %s as failed: %s", type(lg).__name__, folder, exc)
