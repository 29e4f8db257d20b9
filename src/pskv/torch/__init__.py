"""pskv.torch: PyTorch models trained through pskv tables (`pip install pskv[torch]`).

    emb = pskv.torch.Embedding(worker.table("items"))       # sparse rows: servers run the optimizer
    dp = pskv.torch.DataParallel(model, node, mode="sync", updater=pskv.SGD(lr=0.05, momentum=0.9))
    for x, y in batches:
        loss_fn(dp(x), y).backward()                       # each layer's gradient leaves when ready
        dp.step()                                          # the fresh weights are in model's parameters

`Embedding` (embedding.py) pulls the rows of a batch's distinct ids and pushes their gradients in
backward; `DataParallel` (parallel.py) keeps every parameter tensor as a key range of one table
and exchanges whole layers. Both take CPU tensors only; tables see the tensors' memory (views).
"""

from __future__ import annotations

from ..errors import ConfigError

try:
    import torch as _torch  # noqa: F401
except ImportError:  # pragma: no cover - the extra is installed by make test
    raise ConfigError("pskv.torch needs PyTorch: pip install 'pskv[torch]' (torch 2.13.0, CPU wheel)") from None

from .embedding import Embedding as Embedding
from .layout import load_weights as load_weights
from .parallel import DataParallel as DataParallel

__all__ = ["DataParallel", "Embedding", "load_weights"]
