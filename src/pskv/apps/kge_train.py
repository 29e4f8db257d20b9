"""kge's batches (apps.kge): a worker's pass over its triples, each batch's rows pulled (or exchanged with the
batch before's push), its gradients from the model, and the pushes."""

from __future__ import annotations

import numpy as np

from ..data.lookahead import Lookahead
from . import common
from .kge_args import REGS
from .kge_model import batch_grads
from .negatives import Negatives


def train_epoch(
    args,
    mine: np.ndarray,
    ent,
    rel,
    negatives: Negatives,
    rng,
    progress,
    clock: common.Clock,
    *,
    more: bool,
    exchange: bool = False,
) -> float:
    """One pass of a worker over its triples `mine`, in batches; returns the summed loss. `clock`
    ticks once per batch (Worker.clock under --consistency bsp/ssp). Each batch prepares the next
    one's negatives (with `more`, the last prepares those of the next epoch's first batch); with
    prefetch (`Rows.prefetch`) it pulls the next batch's rows before it trains on its own; with
    `exchange` (common.exchanges) it pushes its gradients with the next batch's pulls, one exchange
    per table and node (table.exchange: those rows hold the push, as a pull after it would)."""
    n, cplx, ce, reg = args.neg, args.model == "complex", args.loss == "ce", REGS[args.reg]
    order = rng.permutation(len(mine))
    batches = [mine[order[lo : lo + args.batch]] for lo in range(0, len(order), args.batch)]  # (b, 3) int64 each
    if args.localize and batches:
        _localize(ent, rel, batches[0])
    loss, coming = 0.0, None
    stream = (
        Lookahead(batches, lambda t: _intended(ent, rel, t, negatives, n), ahead=args.ahead) if args.intent else batches
    )
    for i, tri in enumerate(stream):
        if args.localize and i + 1 < len(batches):
            _localize(ent, rel, batches[i + 1])  # Lapse's pre-localization: the next batch moves here meanwhile
        if i + 1 < len(batches) or more:  # every epoch's batches have the same sizes
            negatives.ahead(len(batches[(i + 1) % len(batches)]) * 2 * n)
        rows = coming or Rows(ent, rel, tri, negatives, n)
        coming = (
            Rows(ent, rel, batches[i + 1], negatives, n)
            if Rows.prefetch(args, negatives) and i + 1 < len(batches)
            else None
        )  # one batch ahead at most: none pending when the epoch ends
        pos, r, neg = rows.wait()  # (2b, dim), (b, dim), (b*2n, dim) float32
        g_pos, g_rel, g_neg = np.empty_like(pos), np.empty_like(r), np.empty_like(neg)
        loss += batch_grads(
            pos, r, neg, rows.pos_ids, rows.neg_ids, n, cplx, ce, reg, args.reg_weight, g_pos, g_rel, g_neg
        )
        pushes = ((np.concatenate([rows.pos_ids, rows.neg_ids]), np.concatenate([g_pos, g_neg])), (tri[:, 1], g_rel))
        if exchange and coming is None and i + 1 < len(batches):  # (fresh arrays: nobody writes them afterwards)
            coming = Rows(ent, rel, batches[i + 1], negatives, n, pushes)
        else:
            ent.push(*pushes[0], copy=False)
            rel.push(*pushes[1], copy=False)
        progress.update(len(tri))
        clock.tick()
    return loss


class Rows:
    """The rows of one batch (b triples), asked for when made: the positives' and, when the app draws
    the negatives (no --sampling), the negatives' entities in one pull of the distinct keys, the
    relations in another; from pskv's sampling API, the negatives' rows come when wait() draws them."""

    def __init__(self, ent, rel, tri: np.ndarray, negatives: Negatives, n: int, pushes: tuple | None = None) -> None:
        """`pushes`: ((keys, updates) of `ent`, of `rel`) to push first, each with the pulls of its table
        (table.exchange)."""
        b = len(tri)
        self.pos_ids = np.concatenate([tri[:, 0], tri[:, 2]])  # (2b,) heads then tails

        def pull(table, keys):
            if pushes is None:
                return table.pull_async(keys)
            return table.exchange(*(pushes[1] if table is rel else pushes[0]), keys, copy=False)

        self._rel = pull(rel, tri[:, 1])
        self._negatives, self._draws = negatives, b * 2 * n
        self.neg_ids: np.ndarray | None = None
        self._inverse: np.ndarray | None = None
        if negatives.scheme is None:  # the app draws: one pull of every entity the batch needs
            self.neg_ids = negatives.draw(self._draws)[0]  # (b*2n,) int64
            keys, self._inverse = np.unique(np.concatenate([self.pos_ids, self.neg_ids]), return_inverse=True)
            self._ent = pull(ent, keys)
        else:
            self._ent = pull(ent, self.pos_ids)

    @staticmethod
    def prefetch(args, negatives: Negatives) -> bool:
        """Whether the next batch's rows are pulled before this one trains: common.prefetches, with the
        negatives drawn by the app (pskv's sampling schemes draw when the batch comes: preloc and pool
        have localized its keys by then)."""
        return common.prefetches(args) and negatives.scheme is None

    def wait(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(positives (2b, dim), relations (b, dim), negatives (b*2n, dim)), float32 arrays of their own."""
        if self._inverse is None:  # pskv's sampling API: its draw pulls the negatives' rows
            self.neg_ids, neg = self._negatives.draw(self._draws)
            assert neg is not None  # (pskv's sampling API draws rows too)
            return self._ent.wait(), self._rel.wait(), neg
        rows = self._ent.wait()[self._inverse]  # (2b + b*2n, dim)
        cut = len(self.pos_ids)
        return rows[:cut], self._rel.wait(), rows[cut:]


def _intended(ent, rel, tri: np.ndarray, negatives: Negatives, n: int) -> dict:
    """--intent: the keys a coming batch will use (pskv.data.Lookahead calls it `--ahead` batches early):
    its entities, with the negatives the app draws for it drawn now, and its relations."""
    negs = negatives.predraw(len(tri) * 2 * n) if negatives.scheme is None else np.zeros(0, np.int64)
    return {ent: np.concatenate([tri[:, 0], tri[:, 2], negs]), rel: tri[:, 1]}


def _localize(ent, rel, tri: np.ndarray) -> None:
    """Move the rows of a batch's entities and relations to this node; returns at once."""
    ent.localize(np.concatenate([tri[:, 0], tri[:, 2]]))
    rel.localize(tri[:, 1])
