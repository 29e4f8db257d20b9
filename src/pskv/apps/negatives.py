"""Negative samples for the apps that draw them (kge, word2vec): one sampler per worker thread.

negatives = Negatives(table, scheme="pool")              # pskv's sampling API (the table has a pskv.Sampling)
negatives = Negatives(table, draw=unigram.draw, rng=rng)  # the app draws; the caller pulls the rows
negatives.ahead(n)                     # prepare the sample of a coming draw of n (preloc/pool work meanwhile)
keys = negatives.predraw(n)            # the app draws: draw a coming draw of n now (its keys, for intents)
keys, rows = negatives.draw(n)         # (n,) int64 keys; (n, dim) rows, or None when the app drew them
negatives.close()                      # release what was prepared and not drawn
"""

from __future__ import annotations

import collections
from collections.abc import Callable

import numpy as np

from ..errors import ConfigError


class Negatives:
    """Negative keys of one worker thread, and their rows where pskv brings them.

    `scheme` None: the app draws `draw(rng, n)` keys itself (numpy) and gets no rows; the caller
    pulls them, e.g. each distinct row once (word2vec: pull_sample would pull one row per draw).
    `scheme` naive, preloc, pool or onlylocal: pskv's sampling API on `table`, which was declared
    with a pskv.Sampling; one handle per draw. ahead(n) prepares the handle of a coming draw of n
    keys (draws take the prepared handles in order), so that preloc and pool localize their keys
    while the batch before trains; a draw with nothing prepared for its n prepares its handle then.
    A sample with fewer than n keys (onlylocal, by rejection from a draw function) is repeated up
    to n. Owned by one worker thread: the handles are that thread's."""

    def __init__(
        self,
        table,
        *,
        scheme: str | None = None,
        draw: Callable[[np.random.Generator, int], np.ndarray] | None = None,
        rng: np.random.Generator | None = None,
    ) -> None:
        if scheme is None and (draw is None or rng is None):
            raise ConfigError("Negatives(scheme=None) draws the keys itself: give draw=(rng, n) -> keys and rng=")
        self.table, self.scheme, self._draw, self.rng = table, scheme, draw, rng
        self._ready: collections.deque = collections.deque()  # (n, handle) prepared for the coming draws
        self._drawn: collections.deque = collections.deque()  # (n,) keys predrawn for the coming draws

    def ahead(self, n: int) -> None:
        """Prepare the sample of a coming draw of n keys (in the order of the draws); a no-op when the
        app draws the keys itself."""
        if self.scheme is not None:
            self._ready.append((n, self.table.prepare_sample(n, scheme=self.scheme)))

    def predraw(self, n: int) -> np.ndarray:
        """The app draws: draw the keys of a coming draw of n now (the draws take them in order, so
        the sequence is the same), e.g. to signal them as intents (pskv.data.Lookahead)."""
        if self.scheme is not None:
            raise ConfigError(f"Negatives.predraw: pskv's {self.scheme} scheme draws when the batch comes")
        keys = self._own(n)
        self._drawn.append(keys)
        return keys

    def _own(self, n: int) -> np.ndarray:
        """The app's own draw of n keys."""
        assert self._draw is not None and self.rng is not None  # (scheme None: __init__ checked them)
        return np.asarray(self._draw(self.rng, n), np.int64)

    def draw(self, n: int) -> tuple[np.ndarray, np.ndarray | None]:
        """(n,) int64 keys and, from the sampling API, their (n, dim) rows (else None)."""
        if self.scheme is None:
            if self._drawn:
                keys = self._drawn.popleft()
                assert len(keys) == n, f"a draw of {n} took a predraw of {len(keys)}"
                return keys, None
            return self._own(n), None
        size, handle = self._ready.popleft() if self._ready else (n, None)
        if size != n:  # prepared for another draw size: would give too few or leave keys unused
            self.table.finish_sample(handle)
            handle = None
        if handle is None:
            handle = self.table.prepare_sample(n, scheme=self.scheme)
        try:
            keys, rows = self.table.pull_sample(handle, n)
        finally:
            self.table.finish_sample(handle)
        keys = np.asarray(keys, np.int64)
        if len(keys) < n:
            keys, rows = np.resize(keys, n), np.resize(rows, (n, rows.shape[1]))
        return keys, rows

    def close(self) -> None:
        """Release the handles prepared and not drawn."""
        while self._ready:
            self.table.finish_sample(self._ready.popleft()[1])
