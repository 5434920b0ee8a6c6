"""A Lightning project of one's own under µP, watched by initnorm's instruments (docs/library.md): your data module,
your LightningModule and its configure_optimizers; initnorm builds the model and its groups, and its callbacks
write the per-layer statistics, the diagnostics and the coordinate check to TensorBoard.

    PYTHONPATH=. python examples/lightning_project.py
    tensorboard --logdir runs/lightning_project
"""

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.loggers import TensorBoardLogger
from torch.utils.data import DataLoader

import initnorm
from examples.chars import Windows
from examples.nanogpt import GPT
from initnorm.callbacks import CoordCheck, Diagnostics, LayerStats


class Chars(L.LightningDataModule):
    def setup(self, stage=None):
        self.train, self.val = Windows(seed=0), Windows(n=64, seed=1)

    def train_dataloader(self):
        return DataLoader(self.train, batch_size=8, shuffle=True)

    def val_dataloader(self):  # CoordCheck measures the first inputs of the validation loader at every step
        return DataLoader(self.val, batch_size=8)


class LitGPT(L.LightningModule):
    def __init__(self, width: int = 64, lr: float = 3e-3):
        super().__init__()
        self.p = initnorm.parameterize(GPT, width=width, base_width=16, param="mup", width_arg="n_embd", depth=2, depth_arg="n_layer",
                                       blocks="h", attn_mult_attr="attn_mult", vocab_size=Windows().vocab_size, n_head=2,
                                       block_size=32)
        self.model, self.lr = self.p.model, lr  # the instruments read self.model

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits, _ = self.model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits, _ = self.model(x)
        self.log("val_loss", F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)))

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.p.param_groups(self.lr, weight_decay=0.1))
        warmup = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: min(1.0, (step + 1) / 5))  # scales each group's own rate
        return {"optimizer": opt, "lr_scheduler": {"scheduler": warmup, "interval": "step"}}


def main(steps: int = 10):
    torch.manual_seed(0)
    trainer = L.Trainer(max_steps=steps, accelerator="cpu", logger=TensorBoardLogger("runs", name="lightning_project"),
                        default_root_dir="runs/lightning_project",  # where CoordCheck writes coord.csv
                        callbacks=[LayerStats(every_n_steps=5), Diagnostics(every_n_steps=5), CoordCheck(steps=5, windows=8)],
                        log_every_n_steps=1, val_check_interval=steps, limit_val_batches=2,  # Lightning logs every 50 steps
                        enable_checkpointing=False, enable_progress_bar=False)
    module = LitGPT()
    trainer.fit(module, datamodule=Chars())
    return trainer


if __name__ == "__main__":
    main()
