"""Hugging Face's Trainer on GPT-2 (from a GPT2Config: nothing downloaded) under µP: initnorm builds the model and
the optimiser's groups, the Trainer takes them through ``optimizers=`` (docs/library.md). Needs
``pip install 'initnorm[hf]'`` (transformers and accelerate).

    PYTHONPATH=. python examples/hf_trainer.py
"""

import torch
from torch.utils.data import Dataset
from transformers import Trainer, TrainingArguments

import initnorm
from examples.chars import Windows
from examples.hf_gpt2 import gpt2


class Tokens(Dataset):
    """The windows as GPT-2 takes them: labels are the inputs (the model shifts them itself)."""

    def __init__(self):
        self.windows = Windows(context=32)

    def __len__(self):
        return len(self.windows)

    def __getitem__(self, i):
        x, _ = self.windows[i]
        return {"input_ids": x, "labels": x}


def main(steps: int = 6):
    torch.manual_seed(0)
    data = Tokens()
    # GPT-2's Conv1D weights are stored (in, out): initnorm reads their roles and fills them through the transpose.
    p = initnorm.parameterize(gpt2, width=64, base_width=16, param="mup", width_arg="n_embd", depth=2, depth_arg="n_layer",
                              blocks="transformer.h", vocab_size=data.windows.vocab_size, n_head=2, n_positions=32)
    opt = torch.optim.AdamW(p.param_groups(3e-3, weight_decay=0.1))
    warmup = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: min(1.0, (step + 1) / 5))  # a factor on each group's own rate
    args = TrainingArguments(output_dir="runs/hf_trainer", max_steps=steps, per_device_train_batch_size=8, logging_steps=3,
                             save_strategy="no", report_to=[], use_cpu=True, remove_unused_columns=False)
    trainer = Trainer(model=p.model, args=args, train_dataset=data, optimizers=(opt, warmup))
    trainer.train()
    return trainer


if __name__ == "__main__":
    main()
