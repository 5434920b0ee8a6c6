"""A two-layer MLP as a user writes it, for the classification tasks (``data=clusters``: 32-dimensional
points, 8 classes):

    PYTHONPATH=. python -m initnorm.train model=custom model._target_=examples.mlp.TwoLayerMLP \\
        model.vocab_arg=n_classes +model.d_in=32 data=clusters param=mup width=256 model.base_width=64

Its first layer reads the data (fan-in 32 at every width: ``input``), the second reads width
(``readout``); initnorm infers both from builds at two widths.
"""

from torch import nn


class TwoLayerMLP(nn.Module):
    def __init__(self, d_in: int, n_classes: int, width: int = 128):
        super().__init__()
        self.fc = nn.Linear(d_in, width)
        self.out = nn.Linear(width, n_classes)

    def forward(self, x):
        return self.out(self.fc(x).relu())
