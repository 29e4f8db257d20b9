"""The node layer: one process of the cluster (`core.Node`, the composition root), the parts of
its tables it builds (`tables`), its steps in elastic membership (`elastic`) and what it tells
about itself (`diagnostics`)."""

from .core import Node as Node, init as init

__all__ = ["Node", "init"]
