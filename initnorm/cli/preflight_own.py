"""The preflight's look at what the user brought, before anything is written: their model, data module, callbacks
and trackers (``cli/preflight.py`` calls ``check`` once per distinct config, and each check here is cached per
distinct piece, so a sweep of 1,000 jobs over one model builds it once).

- a model of one's own (``model=custom``): built for real once, at its base width (the smallest) on the CPU, and
  run on two examples of a real batch: it must be an ``nn.Module`` and return logits of the task's size (a tensor,
  an object's ``.logits`` or a tuple whose first element is the logits, as ``models/own.logits_of`` reads them);
- a data module of one's own (``data=custom``): its ``setup("fit")`` and its first training batch: ``(x, y)``,
  ids in the vocabulary (or classes in range), nothing NaN or infinite;
- a callback named by a path of one's own: it imports, it builds, it is a Lightning ``Callback``;
- a tracker's URI (``logger.mlflow.tracking_uri``): a scheme MLflow knows, a local store whose folder can be
  written, a server that answers within ``CONNECT_TIMEOUT_S`` (MLflow's own retries stall a job minutes on one
  that does not).

An exception raised inside the user's code is named as theirs (its type and message, and where it came from),
never as a bug in initnorm's checks.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from initnorm.errors import ConfigError
from initnorm.training.resume import error_line

CONNECT_TIMEOUT_S = 2.0
# The tracking URI schemes MLflow's stores take (a database's may name its driver: postgresql+psycopg2).
MLFLOW_SCHEMES = ("file", "sqlite", "http", "https", "databricks", "postgresql", "mysql", "mssql")
OURS = ("initnorm.", "lightning.", "pytorch_lightning.")  # callbacks the package ships or names: not the user's code


def yours(exc: BaseException, what: str) -> ConfigError:
    """A user's own exception as one line: theirs, by type and message, with where it was raised from."""
    return ConfigError(f"{what} raised {error_line(exc)} (in your code, not initnorm's: fix it there)")


def _once(seen: dict[Any, Any], kind: str, node: Any) -> bool:
    """True the first time ``node`` (a config node) is seen for ``kind``: each distinct piece is checked once."""
    key = f"{kind}:" + json.dumps(node, sort_keys=True, default=str)
    first = key not in seen
    seen[key] = True
    return first


def check(c: Mapping[str, Any], seen: dict[Any, Any]):
    """Every piece of the user's own in the checked config ``c``; returns the data module it set up (or None)."""
    check_callbacks(c.get("callbacks") or {}, seen)
    check_trackers(c.get("logger"), seen)
    return own_data(c, seen)


def own_data(c: Mapping[str, Any], seen: dict[Any, Any]):
    """``data=custom``'s module, set up, its first batch checked, once per distinct data node and batch size (kept in
    ``seen``); None for initnorm's own data."""
    d = c["data"]
    if "_target_" not in d:
        return None
    key = "data:" + json.dumps([d, c["batch_size"]], sort_keys=True, default=str)
    if key in seen:
        return seen[key]
    from initnorm.training.tasks import TASKS

    what = f"data._target_={d['_target_']}"
    try:
        data = TASKS.get(d["kind"]).make_data(c)
    except ConfigError:
        raise
    except Exception as exc:
        raise yours(exc, what) from exc
    try:
        data.setup("fit")
    except ConfigError:
        raise
    except Exception as exc:
        raise yours(exc, f"{what}: its setup('fit')") from exc
    check_batch(data, what, classify=d["kind"] != "custom")
    seen[key] = data
    return data


def first_batch(data, what: str):
    """The first training batch of the user's own module (its loader, not initnorm's endless stream)."""
    inner = getattr(data, "inner", data)
    try:
        return next(iter(inner.train_dataloader()))
    except StopIteration:
        raise ConfigError(f"{what}: its train_dataloader() gave no batch; it must give at least one") from None
    except Exception as exc:
        raise yours(exc, f"{what}: its train_dataloader()") from exc


def check_batch(data, what: str, classify: bool) -> None:
    """``(x, y)``: y integer, in range of the vocabulary (or the classes), of x's shape for a language model (the next
    token of each position), one a row for a classifier; x's ids in the vocabulary; nothing NaN or infinite."""
    import torch

    batch = first_batch(data, what)
    if not (isinstance(batch, (tuple, list)) and len(batch) == 2 and all(isinstance(t, torch.Tensor) for t in batch)):
        raise ConfigError(f"{what}: its training batch is a {type(batch).__name__}{_shapes(batch)}, not (x, y), two tensors; "
                          "return (inputs, targets) from its loader")
    x, y = batch
    n = data.vocab_size
    for name, t in (("x", x), ("y", y)):
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise ConfigError(f"{what}: its training batch's {name} holds NaN or infinite values; fix the data")
    want = "the classes" if classify else "the vocabulary"
    if y.is_floating_point() or (not classify and x.is_floating_point()):
        bad = "y" if y.is_floating_point() else "x"
        raise ConfigError(f"{what}: its training batch's {bad} is {bad and (y if bad == 'y' else x).dtype}, not integer ids; "
                          f"return token ids (torch.long) in 0..{n - 1}")
    expected = (x.shape[0],) if classify else tuple(x.shape)
    if tuple(y.shape) != expected or (not classify and x.dim() != 2):
        shape = f"[{x.shape[0]}]" if classify else "x's, [batch, context]"
        raise ConfigError(f"{what}: its training batch is x {list(x.shape)}, y {list(y.shape)}; y must have the shape {shape}")
    for name, t in (("y", y),) if classify else (("x", x), ("y", y)):
        lo, hi = int(t.min()), int(t.max())
        if lo < 0 or hi >= n:
            raise ConfigError(f"{what}: its training batch's {name} holds {lo}..{hi}, outside {want} (0..{n - 1}, "
                              f"vocab_size={n}); fix the ids, or the module's vocab_size")


def _shapes(batch) -> str:
    if isinstance(batch, (tuple, list)):
        return " of " + ", ".join(type(b).__name__ + (f" {list(b.shape)}" if hasattr(b, "shape") else "") for b in batch)
    return ""


def check_model(c: Mapping[str, Any], data, seen: dict[Any, Any]) -> None:
    """``model=custom``: built for real at its base width on the CPU, one forward of two examples of the first batch;
    what it returns must be logits of the task's size. Once per distinct model node and data."""
    m = c["model"]
    if "_target_" not in m or not _once(seen, "forward", [m, c["data"]]):
        return
    import torch

    from initnorm.models import own

    what = f"model._target_={own.target_name(m)}"
    small = {**m, "width": m["base_width"]}
    n_out = data.vocab_size
    with torch.random.fork_rng(devices=[]):  # the job's own draws are not moved by this check
        try:
            model = own.build(small, n_out, logits=False)
        except ConfigError:
            raise
        except Exception as exc:
            raise yours(exc, f"{what} (built at width {small['width']})") from exc
        x, y = first_batch(data, "data")
        x, y = x[:2], y[:2]
        if y.dim() > 1:
            x, y = x[:, :8], y[:, :8]  # a few positions: a language model's logits are per position
        try:
            with torch.no_grad():
                out = model(x)
        except Exception as exc:
            raise yours(exc, f"{what}'s forward on a batch of {list(x.shape)} ({x.dtype})") from exc
    want = [*y.shape, n_out]
    logits = _logits(out)
    if logits is None:
        kind = f"a dict (keys {', '.join(map(str, out))})" if isinstance(out, Mapping) else f"a {type(out).__name__}"
        raise ConfigError(f"{what} returned {kind}, not logits; return the logits tensor ({want}), an object with .logits, or a "
                          "tuple whose first element is the logits")
    if list(logits.shape) != want:
        loss = isinstance(out, (tuple, list)) and logits.dim() == 0
        got = "a tuple whose first element is a scalar (a loss?)" if loss else f"logits of {list(logits.shape)}"
        raise ConfigError(f"{what} returned {got} "
                          f"for inputs of {list(x.shape)}; the task needs logits of {want} ({n_out} = the data's "
                          f"{'classes' if y.dim() == 1 else 'vocabulary'}, `model.vocab_arg` names the argument that takes it)"
                          + ("; return (logits, loss), logits first" if loss else ""))


def _logits(out):
    """``models/own.logits_of`` without its exception: None where ``out`` holds no tensor it would read."""
    import torch

    if isinstance(out, torch.Tensor):
        return out
    if hasattr(out, "logits") and isinstance(out.logits, torch.Tensor):
        return out.logits
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        return out[0]
    return None


def check_callbacks(node: Mapping[str, Any], seen: dict[Any, Any]) -> None:
    """Each callback of a path of one's own imports, builds and is a Lightning ``Callback`` (once per distinct node)."""
    for name, cb in node.items():
        target = cb.get("_target_") if isinstance(cb, Mapping) else None
        if not isinstance(target, str) or target.startswith(OURS) or not _once(seen, "callback", cb):
            continue
        from hydra.utils import instantiate
        from lightning.pytorch.callbacks import Callback

        from initnorm.registry import import_dotted

        key = f"callbacks.{name}._target_"
        import_dotted(target, key, fix=f"fix it with `{key}=mypkg.callbacks.MyCallback`, or drop it with `~callbacks.{name}`")
        try:
            made = instantiate(dict(cb))
        except Exception as exc:
            cause = exc.__cause__ or exc  # Hydra wraps the constructor's own error
            raise yours(cause, f"callbacks.{name} ({target})") from exc
        if not isinstance(made, Callback):
            raise ConfigError(f"{key}={target} made a {type(made).__name__}, not a Lightning Callback; fix it with `{key}=<a class of "
                              f"lightning.pytorch.callbacks.Callback>`, or drop it with `~callbacks.{name}`")


def check_trackers(node: Mapping[str, Any] | None, seen: dict[Any, Any]) -> None:
    """Each tracker's ``tracking_uri``: a scheme MLflow knows, a local store that can be written, a server that answers."""
    from initnorm.training import trackers

    for name, n in trackers.nodes(node).items():
        uri = n.get("tracking_uri")
        if not isinstance(uri, str) or not uri or not _once(seen, "tracker", uri):
            continue
        key = f"logger.{name}.tracking_uri" if name != "logger" else "logger.tracking_uri"
        check_uri(trackers.store_uri(uri, Path.cwd()), uri, key)


def check_uri(resolved: str, uri: str, key: str) -> None:
    """One line for a URI no store can be opened at: an unknown scheme, a folder that cannot be written, a server that
    does not answer within ``CONNECT_TIMEOUT_S``."""
    import socket

    from initnorm.cli.disk import check_writable

    fix = f"fix it with `{key}=mlflow.db` (a local store)"
    parts = urlsplit(resolved)
    scheme = parts.scheme.partition("+")[0]
    if scheme not in MLFLOW_SCHEMES:
        raise ConfigError(f"{key}={uri!r}: {scheme or 'no'} scheme, which MLflow does not know (known: {', '.join(MLFLOW_SCHEMES)}); {fix}")
    if scheme in ("file", "sqlite"):
        # file:///abs/store; sqlite:////abs/x.db (four slashes: absolute) or sqlite:///x.db (relative)
        folder = Path(parts.path) if scheme == "file" else Path(resolved.partition("://")[2][1:] or ".").parent
        try:
            check_writable(folder, f"{key}=mlflow.db")
        except ConfigError as exc:
            raise ConfigError(f"{key}={uri!r}: {exc}") from None
        return
    if scheme in ("http", "https"):
        port = parts.port or (443 if scheme == "https" else 80)
        try:
            socket.create_connection((parts.hostname or "localhost", port), timeout=CONNECT_TIMEOUT_S).close()
        except OSError as exc:
            why = "no answer" if isinstance(exc, TimeoutError) else (exc.strerror or type(exc).__name__)
            raise ConfigError(f"{key}={uri!r}: no server answers at {parts.hostname}:{port} ({why} within {CONNECT_TIMEOUT_S:g} s); "
                              f"start it, or {fix}") from None

