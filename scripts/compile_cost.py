"""What torch.compile costs and saves for one job run alone: the numbers behind compiling.ALONE_FROM.

    python scripts/compile_cost.py eager 500                                   # the default Decoder
    TORCHINDUCTOR_CACHE_DIR=/tmp/cold python scripts/compile_cost.py compiled 500 experiment=mup_mlp_sweep width=256

One process, one thread: builds the model and optimiser as ``train()`` does and times the training
step (loss, backward, optimiser step) over N steps after the first; the first step's time is the
compile. Run it with a fresh cache folder (cold), then again on the same folder (warm), one process
at a time, and write the ``uptime`` load beside the numbers (docs/performance.md, "Compilation").
"""

import json
import sys
import time

import lightning as L
import torch

from initnorm import schema
from initnorm.cli.compose import compose_train
from initnorm.config import to_plain
from initnorm.models.build import build_model
from initnorm.training.tasks import TASKS


def main(mode: str, n: int, overrides: list[str]) -> dict:
    torch.set_num_threads(1)
    c = schema.check(to_plain(compose_train(overrides)))
    torch.set_flush_denormal(bool(c["flush_denormal"]))
    L.seed_everything(c["seed"], verbose=False)
    task = TASKS.get(c["data"]["kind"])
    data = task.make_data(c)
    data.setup("fit")
    built = build_model(c["model"], c["init"], c["param"], data.vocab_size)
    module = task.module(built.model, built.roles, built.table, lr=c["lr"], steps=c["steps"], warmup=c["warmup"], optim=c["optim"],
                         schedule=c["schedule"], log_every=c["log_every"], compile=mode == "compiled")
    opt = module.configure_optimizers()["optimizer"]
    batches = iter(data.train_dataloader())
    batches = [next(batches) for _ in range(n + 1)]
    loss_of = module._fast if mode == "compiled" else module.loss

    def step(batch):
        loss = loss_of(batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    t = time.perf_counter()
    step(batches[0])
    first = time.perf_counter() - t
    t, cpu = time.perf_counter(), time.process_time()
    for batch in batches[1:]:
        step(batch)
    wall, cpu = time.perf_counter() - t, time.process_time() - cpu
    return {"mode": mode, "first_step_s": round(first, 3), "ms_per_step_wall": round(1000 * wall / n, 3),
            "ms_per_step_cpu": round(1000 * cpu / n, 3), "overrides": overrides}


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] not in ("eager", "compiled"):
        sys.exit("usage: python scripts/compile_cost.py eager|compiled STEPS [overrides ...]")
    print(json.dumps(main(sys.argv[1], int(sys.argv[2]), sys.argv[3:])))
