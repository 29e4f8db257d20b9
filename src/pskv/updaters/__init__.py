"""Update rules a server applies to a table shard: `rules` (add, assign, sgd, adagrad, adam, custom)
and `linear` (prox, ftrl, block_prox: L1/L2-regularised linear models, the lr app); `get` and
`from_config` turn names and configs into rules. See rules.py for how a rule meets a shard.
"""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError, ConfigTypeError
from .linear import FTRL as FTRL, BlockProx as BlockProx, Prox as Prox
from .rules import (
    SGD as SGD,
    Adagrad as Adagrad,
    Adam as Adam,
    Add as Add,
    Assign as Assign,
    Custom as Custom,
    Updater as Updater,
    stable_order as stable_order,
)

_BUILTINS: dict[str, type[Updater]] = {
    "add": Add,
    "assign": Assign,
    "sgd": SGD,
    "adagrad": Adagrad,
    "adam": Adam,
    "prox": Prox,
    "ftrl": FTRL,
    "block_prox": BlockProx,
}


def get(spec: Updater | str) -> Updater:
    """The updater for `spec`: an Updater (returned as is) or a built-in name, case-insensitive, with default
    params. Raises ValueError for an unknown name and TypeError for anything else."""
    if isinstance(spec, Updater):
        return spec
    if isinstance(spec, str):
        cls = _BUILTINS.get(spec.lower())
        if cls is None:
            raise ConfigError(f"unknown updater {spec!r}; valid names are {', '.join(_BUILTINS)} or a pskv Updater")
        return cls()
    raise ConfigTypeError(f"updater must be a name ({', '.join(_BUILTINS)}) or an Updater, got {type(spec).__name__}")


def from_config(cfg: dict[str, Any]) -> Updater:
    """Rebuild a built-in updater from its `config()` dict (e.g. after a JSON round trip).

    Raises ConfigError for a Custom config (a function cannot travel as JSON) or an unknown name."""
    if "custom" in cfg:
        raise ConfigError(
            f"custom updater {cfg.get('name')!r} ({cfg['custom']}) cannot be rebuilt from config; "
            "pass the Custom instance on every node instead"
        )
    cls = type(get(str(cfg.get("name", ""))))
    params = {k: v for k, v in cfg.items() if k != "name"}
    try:
        return cls(**params)
    except TypeError as exc:
        raise ConfigError(f"config {cfg!r} does not fit {cls.__name__}: {exc}") from exc
