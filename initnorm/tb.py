"""What TensorBoard shows of a run: its label, the HPARAMS row, and the loss/learning-rate layout.

TensorBoard's HPARAMS tab reads three summaries per run: the experiment (which hyperparameters
and metrics exist, in which order, and whether each ``differs`` between runs), the session start
(this run's values and its ``group_name``, shown as the trial ID) and the session end. The tab
sorts hyperparameters that differ first and ticks the first five columns, whatever they are, so
``write_hparams`` lists only the keys that vary (the swept keys of a sweep, the overridden keys of
a single run), marked as differing: a key every run shares is never ticked beside them (all of them
are in each run's .hydra/config.yaml and metrics.json). It names the trial by their values alone
(``post 200 3``): the table's trial-ID column is 10 em wide and cut longer names (``norm=post
war…``), and the columns beside it name each key. The tab shows the differing columns by name
(its ``_sort_and_reduce_to_hparams_limit``), not in the order written, so the columns are written
in that order and the trial ID lists its values in it (``post 3 200`` beside norm, seed, warmup).
Every number is a number (``DATA_TYPE_FLOAT64``: a min/max filter, sorted by value), a swept
override given as text too (``batch_size=32``); TensorBoard prints it to five significant digits
(a warmup of 200 as ``200.00``). A bool stays a bool, anything else is text. Whether the run
diverged is a true/false column beside them, not a 0/1 metric. The
final metrics are written at the last step; a metric without a value (``diverged_step`` of a run
that did not diverge) is left out rather than written as NaN.

Tags: the training loop writes ``Loss/train``, ``Loss/validation`` and ``Schedule/learning_rate``;
TensorBoard orders card groups by name with capitals first, so these come before the per-layer
instruments (``act_rms/...``, lower case). ``write_layout`` adds a custom-scalars page with train
and validation loss on one chart.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterable, Mapping
from typing import Any

from initnorm.results import setting_value, short_values

TRAIN_LOSS = "Loss/train"
VAL_LOSS = "Loss/validation"
LEARNING_RATE = "Schedule/learning_rate"
# Evaluation sets as their tags name them: <Metric>/<label> (Loss/validation beside the trainer's Loss/train)
EVAL_LABELS = {"val": "validation", "train": "train sample"}
NOT_IN_LABEL = {"hydra.sweep.dir", "hydra.run.dir", "seed"}


def _label_parts(overrides: Mapping[str, Any], varying: Iterable[str] | None) -> list[tuple[str, str]]:
    keys = list(overrides) if varying is None else list(varying)
    values = [(k, setting_value(overrides, k)) for k in keys if k in overrides and k not in NOT_IN_LABEL and not k.startswith("hydra.")]
    return [(k, short_values([v])[v]) for k, v in values]  # a search's lr=0.004430375245218269 as lr=0.00443


def run_label(overrides: Mapping[str, Any], varying: Iterable[str] | None, seed: Any) -> str:
    """``norm=post warmup=200 seed=3``: the values that vary, in their order, then the seed.
    ``varying`` None (a single run): every command-line override is what sets this run apart."""
    return " ".join([f"{k}={v}" for k, v in _label_parts(overrides, varying)] + [f"seed={seed}"])


def trial_id(label: str, columns: Iterable[str] = ()) -> str:
    """HPARAMS' trial ID from a run label: its values alone (``norm=post warmup=200 seed=3`` -> ``post 200 3``),
    short enough for the table's 10-em column; in the order of ``columns`` where given (a key not among them keeps
    its place after them)."""
    parts = label.split(" ")
    place = {k: i for i, k in enumerate(columns)}
    parts.sort(key=lambda part: place.get(part.partition("=")[0], len(place)))  # stable: the rest keep their order
    return " ".join(part.partition("=")[2] or part for part in parts)


DIVERGED = "hp/diverged"  # a 0/1 metric for the other trackers; in HPARAMS the bool column ``diverged``


NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


def _value(v: Any):
    """An hparam value as TensorBoard stores it: a bool, a number (an int, a float, or an override's text that reads
    as one: ``batch_size=32``) as a float, anything else as text."""
    if isinstance(v, bool):
        return v
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str) and NUMBER.fullmatch(v.strip()):
        return float(v)
    return str(v)


def hparams_summaries(hparams: Mapping[str, Any], metrics: Iterable[str], varying: Iterable[str], label: str,
                      start_time: float | None = None, after: Iterable[str] = ()) -> list:
    """The three ``Summary`` protos of one run's HPARAMS row (experiment, session start, session end); ``after``: columns
    shown after the varying ones (not marked as varying: TensorBoard lists the varying ones first, then by name)."""
    from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
    from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2

    varying = list(varying)
    order = [k for k in [*varying, *after] if k in hparams]  # only what varies: the tab ticks its first five columns, constant or not
    infos = []
    for k in order:
        v = _value(hparams[k])
        kind = (api_pb2.DATA_TYPE_BOOL if isinstance(v, bool) else api_pb2.DATA_TYPE_FLOAT64 if isinstance(v, float)
                else api_pb2.DATA_TYPE_STRING)
        infos.append(api_pb2.HParamInfo(name=k, type=kind, differs=k in varying))
    infos.sort(key=lambda i: (not i.differs, i.name))  # as the tab shows them: those that differ first, each part by name
    experiment = api_pb2.Experiment(hparam_infos=infos, metric_infos=[api_pb2.MetricInfo(name=api_pb2.MetricName(tag=m)) for m in metrics])
    start = plugin_data_pb2.SessionStartInfo(group_name=trial_id(label, [i.name for i in infos]), start_time_secs=start_time or time.time())
    for k in hparams:  # every value stays in the run's record; the experiment above says which the table shows
        v = _value(hparams[k])
        if isinstance(v, bool):
            start.hparams[k].bool_value = v
        elif isinstance(v, float):
            start.hparams[k].number_value = v
        else:
            start.hparams[k].string_value = v
    end = plugin_data_pb2.SessionEndInfo(status=api_pb2.STATUS_SUCCESS, end_time_secs=time.time())

    def summary(tag: str, **content) -> Summary:
        data = plugin_data_pb2.HParamsPluginData(version=metadata.PLUGIN_DATA_VERSION, **content)
        meta = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name=metadata.PLUGIN_NAME, content=data.SerializeToString()))
        return Summary(value=[Summary.Value(tag=tag, metadata=meta)])  # the content is all in the metadata

    return [
        summary(metadata.EXPERIMENT_TAG, experiment=experiment),
        summary(metadata.SESSION_START_INFO_TAG, session_start_info=start),
        summary(metadata.SESSION_END_INFO_TAG, session_end_info=end),
    ]


def write_hparams(writer, hparams: Mapping[str, Any], metrics: Mapping[str, float | None], varying: Iterable[str],
                  label: str, step: int) -> None:
    """This run's HPARAMS row and its final metrics as scalars at ``step`` (the last step), into a
    ``SummaryWriter``. Metrics that are None or NaN are not written (an empty cell, not ``nan``)."""
    values = {k: float(v) for k, v in metrics.items() if v is not None and not (isinstance(v, float) and math.isnan(v))}
    for tag, value in values.items():
        writer.add_scalar(tag, value, step)
    after = []
    if values.get(DIVERGED) is not None:  # true/false in the table (a metric showed 0.0000)
        hparams, after = {**hparams, "diverged": bool(values[DIVERGED])}, ["diverged"]
    file_writer = writer._get_file_writer()  # SummaryWriter writes Summary protos through its file writer
    for s in hparams_summaries(hparams, [m for m in metrics if m != DIVERGED], varying, label, after=after):
        file_writer.add_summary(s, step)
    writer.flush()


def write_layout(writer) -> None:
    """A custom-scalars page: train and validation loss on one chart, and the learning rate."""
    writer.add_custom_scalars({"Loss and learning rate": {"loss (train, validation)": ["Multiline", [TRAIN_LOSS, VAL_LOSS]],
                                                          "learning rate": ["Multiline", [LEARNING_RATE]]}})


SETTINGS_DIR = "tensorboard_settings"  # `tensorboard --logdir <sweep>/tensorboard_settings`: one run per setting


def write_setting_runs(folder, records: list[dict[str, Any]]):
    """One TensorBoard run per setting of a sweep that ran more than a handful of seeds of a setting (``results.HANDFUL``;
    a sweep of 3 seeds is read run by run, and its folder holds no more runs than before), in ``folder/tensorboard_settings``:
    its validation loss at each step as the mean, the lowest and the highest over the seeds (``Loss/validation``,
    ``Loss/validation_lowest``, ``Loss/validation_highest``) and one HPARAMS row (its values, its seed count, the mean of
    each summary metric). TensorBoard handed a sweep of 10,000 runs lists 10,000 runs and an HPARAMS table of 10,000
    rows (docs/tensorboard.md); this folder holds one per setting. Written again by each summary (its old events
    removed: a run folder holds this summary's only). Returns the folder, or None where no setting has that many seeds."""
    from pathlib import Path

    from initnorm.results import HANDFUL, setting_keys, settings

    groups = settings(records)
    if all(len(runs) <= HANDFUL for runs in groups.values()):
        return None
    # only here: the summary of a sweep of a handful of seeds a setting never imports TensorBoard (0.2-0.3 s of its end)
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    root = Path(folder) / SETTINGS_DIR
    keys = setting_keys(records)
    for key, runs in groups.items():
        name = ",".join(key) or "all"
        run_dir = root / "".join(ch if ch.isalnum() or ch in "=,._+-" else "_" for ch in name)
        for old in run_dir.glob("events.out.tfevents.*") if run_dir.is_dir() else ():
            old.unlink()
        by_step: dict[int, list[float]] = {}
        for r in runs:
            for step, loss, *_ in r.get("val_history") or []:
                if isinstance(loss, (int, float)) and math.isfinite(loss):
                    by_step.setdefault(int(step), []).append(float(loss))
        writer = EventFileWriter(str(run_dir))

        def scalar(tag: str, value: float, step: int, writer=writer) -> None:
            writer.add_event(Event(wall_time=time.time(), step=step, summary=Summary(value=[Summary.Value(tag=tag, simple_value=value)])))

        for step in sorted(by_step):
            values = by_step[step]
            for tag, value in ((VAL_LOSS, sum(values) / len(values)), (f"{VAL_LOSS}_lowest", min(values)),
                               (f"{VAL_LOSS}_highest", max(values))):
                scalar(tag, value, step)
        last = max(by_step, default=0)
        metrics: dict[str, float] = {}
        for m in dict.fromkeys(m for r in runs for m in r.get("summary_metrics", ["final_val_loss"])):
            finite = [r[m] for r in runs if isinstance(r.get(m), (int, float)) and math.isfinite(r[m]) and not r.get("diverged")]
            if finite:
                metrics[m] = sum(finite) / len(finite)
                scalar(m, metrics[m], last)
        hparams = {part.partition("=")[0]: part.partition("=")[2] for part in key} | {"seeds": len(runs)}
        for s in hparams_summaries(hparams, list(metrics), [*keys, "seeds"], name):
            writer.add_event(Event(wall_time=time.time(), step=last, summary=s))
        writer.close()
    return root
