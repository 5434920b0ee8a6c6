"""A recurrent model of one's own, built on ``nn.GRU`` (``model=custom``): torch's recurrent layers are read by
their known layout ((gates x out, in) matrices), train under every launcher, and stack in a vectorised group
by looping its members, since ``torch.func.vmap`` has no batching rule for ``aten::gru``."""

from torch import nn


class GRULM(nn.Module):
    """Embedding -> ``depth`` GRU layers of ``width`` -> a linear readout over the vocabulary."""

    def __init__(self, vocab_size: int, width: int, depth: int = 1):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, width)
        self.rnn = nn.GRU(width, width, num_layers=depth, batch_first=True)
        self.head = nn.Linear(width, vocab_size)

    def forward(self, x):
        h, _ = self.rnn(self.emb(x))
        return self.head(h)
