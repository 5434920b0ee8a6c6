"""A nanoGPT-style training loop of one's own under µP: initnorm builds the model and its optimiser groups, the
loop, the schedule and the loss stay yours (docs/library.md). Then the coordinate check of the same model.

    PYTHONPATH=. python examples/nanogpt_loop.py
"""

import math

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

import initnorm
from examples.chars import Windows
from examples.nanogpt import GPT

STEPS, WARMUP, LR = 20, 5, 3e-3
data = Windows(context=32)
# examples/nanogpt.py's constructor: the width is its n_embd, the depth its n_layer, the blocks its h; µP's 1/d_k
# attention goes to its attn_mult; every other keyword is the constructor's own.
ARCH = {"width_arg": "n_embd", "depth": 2, "depth_arg": "n_layer", "blocks": "h", "attn_mult_attr": "attn_mult",
        "vocab_size": data.vocab_size, "n_head": 2, "block_size": 32}


def loss_fn(model, batch):
    x, y = batch
    logits, _ = model(x)  # the model returns what it returns: nanoGPT's (logits, loss)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def lr_factor(step: int) -> float:
    """Linear warmup, then cosine to 0 (nanoGPT's get_lr as a factor of each group's own rate)."""
    if step < WARMUP:
        return (step + 1) / WARMUP
    return 0.5 * (1.0 + math.cos(math.pi * (step - WARMUP) / (STEPS - WARMUP)))


def main():
    torch.manual_seed(0)
    p = initnorm.parameterize(GPT, width=64, base_width=16, param="mup", **ARCH)
    print(p)  # every parameter's role and its init, lr, weight-decay, ε and forward multipliers
    opt = torch.optim.AdamW(p.param_groups(LR, weight_decay=0.1), betas=(0.9, 0.95))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor)  # a factor on each group's own rate keeps µP's per-role rates
    losses = []
    for step, batch in zip(range(STEPS), DataLoader(data, batch_size=8)):
        loss = loss_fn(p.model, batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
        if step % 5 == 0 or step == STEPS - 1:
            print(f"step {step:2d}  loss {loss.item():.3f}")

    # Does µP hold on this model? Each width trained 3 steps on the same batches: under SP the logits' change
    # from step 0 grows with width, under µP it stays put.
    report = initnorm.coord_check(GPT, DataLoader(data, batch_size=8), loss_fn, widths=[16, 32, 64], steps=3, base_width=16,
                                  **ARCH)
    print(report.text)  # report.records: a DataFrame's rows; report.save("coord"): coord.csv, verdict.txt, coord.png
    return losses, report


if __name__ == "__main__":
    main()
