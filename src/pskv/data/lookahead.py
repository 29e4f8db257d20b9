"""Intents without code: a batch iterator that signals the keys of the batches it reads ahead.

    batches = pskv.data.Lookahead(my_batches, lambda b: {ent: b.entities, rel: b.relations}, ahead=4)
    for b in batches:        # b is my_batches' item; its keys were signaled 4 batches before it came
        ...train on b...

`Lookahead(batches, keys_of, ahead=k)` reads up to k batches beyond the one it hands out. For the
j-th batch it reads it calls `keys_of(batch)`, a dict {table handle: keys}, and signals each as the
worker's intent for clock `c0 + j` (`table.intent(keys, c0 + j)`, c0 the worker's intent clock when
iteration began). Once a batch has been handed out and the loop asks for the next one, it advances
the worker's intent clock by one (`worker.advance_clock()`), which tells the keys' managers about
the windows that come near and moves here the keys no other node intends (pskv.client.intents).
The worker is the one whose table handles `keys_of` returns. `keys_of` runs in read order, k batches
before the batch is used: a batch that carries what it draws (negative samples) draws it then.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError

if TYPE_CHECKING:
    from ..client.worker import Worker


class Lookahead:
    """Wrap `batches` (any iterable); iterate it as before while its keys are signaled `ahead` batches
    early. One pass per iteration over `batches` (iterate the Lookahead once per epoch, as `batches`).

    Blocks as `batches` and `advance_clock` do (never on the network but for a checkpoint in
    progress). Owned by the worker thread that iterates it. `keys_of` returns {Table: int keys};
    ConfigError for ahead < 0, TableError from `table.intent` (a table whose keys cannot move)."""

    def __init__(self, batches: Iterable, keys_of: Callable[[Any], dict], *, ahead: int = 4) -> None:
        if int(ahead) < 0:
            raise ConfigError(f"Lookahead(ahead={ahead}): batches read ahead, >= 0")
        self.batches, self.keys_of, self.ahead = batches, keys_of, int(ahead)
        self.worker: Worker | None = None  # the worker whose tables keys_of names (known at the first batch)

    def __iter__(self) -> Iterator:
        source = iter(self.batches)
        buffered: collections.deque = collections.deque()
        read = 0
        start = None

        def take() -> bool:
            nonlocal read, start
            try:
                batch = next(source)
            except StopIteration:
                return False
            for table, keys in self.keys_of(batch).items():
                if self.worker is None:
                    self.worker = table.worker
                if start is None:
                    start = self.worker.intent_clock
                table.intent(keys, start + read)
            read += 1
            buffered.append(batch)
            return True

        while len(buffered) <= self.ahead and take():
            pass
        if self.worker is not None:
            self.worker.advance_clock(0)  # the first batches' windows are near already
        while buffered:
            yield buffered.popleft()
            take()
            if self.worker is not None:
                self.worker.advance_clock()

    def __repr__(self) -> str:
        return f"<Lookahead ahead={self.ahead} worker={self.worker!r}>"
