"""A Lightning project of one's own, as its author writes it: their data module, their LightningModule with its own
training step and ``configure_optimizers``, and examples/nanogpt.py's model. initnorm comes in twice: the model
and its optimiser groups from ``initnorm.parameterize``, and initnorm's instruments as plain Lightning callbacks
(``tests/test_own_lightning.py`` runs it)."""

from __future__ import annotations

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import initnorm
from examples.nanogpt import GPT

VOCAB, CONTEXT = 28, 16


class Windows(L.LightningDataModule):
    """Random token windows: ``(x, y)``, y the next token of every position."""

    def __init__(self, batch_size: int = 8, n: int = 64, seed: int = 0):
        super().__init__()
        self.batch_size, self.n, self.seed = batch_size, n, seed

    def setup(self, stage: str | None = None) -> None:
        ids = torch.randint(VOCAB, (2 * self.n, CONTEXT + 1), generator=torch.Generator().manual_seed(self.seed))
        self.train, self.val = (TensorDataset(part[:, :-1], part[:, 1:]) for part in ids.split(self.n))

    def train_dataloader(self):
        return DataLoader(self.train, batch_size=self.batch_size)

    def val_dataloader(self):
        return DataLoader(self.val, batch_size=self.batch_size)


class LitGPT(L.LightningModule):
    """nanoGPT under µP: ``self.model`` is what initnorm's callbacks read (members_of: a module's ``.model``)."""

    def __init__(self, width: int = 64, lr: float = 3e-3, param: str = "mup"):
        super().__init__()
        self.p = initnorm.parameterize(GPT, width=width, base_width=16, param=param, width_arg="n_embd", depth=2, depth_arg="n_layer",
                                       blocks="h", attn_mult_attr="attn_mult", vocab_size=VOCAB, n_head=2, block_size=CONTEXT)
        self.model, self.lr = self.p.model, lr

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits, _ = self.model(x)
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.p.param_groups(self.lr, weight_decay=0.1))


class Bigram(L.LightningModule):
    """A module that is its own model (no ``.model``) and knows nothing of initnorm: the callbacks read it itself."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, 32)
        self.head = nn.Linear(32, VOCAB)

    def forward(self, x):
        return self.head(self.emb(x))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self(x).reshape(-1, VOCAB), y.reshape(-1))

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-2)
