"""A push and a pull of one table in one message (PUSH with flag FUSED, Table.exchange; issue 31).

A worker that pushes one batch's updates and pulls a coming batch's rows sends both to each owner in
one message (net.endpoint's `gather`): the push (its request id and part in the header, its keys and
values), then the pull's request id, part and keys in one int64 frame. The owner applies the push,
then gathers the pull's rows, so the rows of keys in both include the push (read-my-writes), and
answers with one PULL_REPLY that carries the rows and acknowledges the push whole (flag FUSED, its
`acked` frame: push request id, part, keys). Where it misses keys (moved on, on their way here), each
half goes on as if it had come alone (net.wire.fused_halves): the push as a PUSH, the pull as a PULL,
each with the positions it still needs, forwarded (push first: the keys' owner applies it before it
serves the pull) or deferred until the keys land; what was served here is answered by an ACK and a
PULL_REPLY. A push of sorted distinct keys (client.slices sends them so) is applied as such
(`Shard.push_distinct`: nothing to sum).

An ERROR for the message answers both (server.serve's `_handle_one`).

Threads and ownership: pskv-server (server.serve's `_serve` hands a fused PUSH here). Never with
backups: a write then goes down its range's chain (client.path sends a push and a pull instead).
"""

from __future__ import annotations

import numpy as np

from .. import kernels
from ..errors import ProtocolError
from ..net.wire import Header, Payload, fused_halves
from ..store.shard import Shard
from ..store.sparse import SparseShard


def serve(server, header: Header, p: Payload, keys: np.ndarray, shard: Shard | SparseShard) -> None:
    """Apply a fused PUSH's push, then serve its pull (see the module docstring). `server`:
    server.serve.Server (its `reply_served` and `pass_on`). Raises ProtocolError for a bad pull,
    keys out of range or a node with backups (the request then gets an ERROR)."""
    spec = shard.spec
    if server.backups is not None:
        raise ProtocolError(
            f"{header!r}: node {server.rank} keeps backups: a push there goes down its chain, "
            "not fused with a pull (send them apart)"
        )
    if p.positions is not None:
        raise ProtocolError(f"{header!r}: a fused push with positions (only its origin sends one, whole)")
    push, pull, pulls = fused_halves(header, p)
    if len(pulls) and not spec.sparse:
        lo, hi = kernels.key_range(pulls)
        if lo < 0 or hi >= spec.rows:
            raise ProtocolError(f"{header!r}: pull keys {lo}..{hi} outside table {spec.name!r} [0, {spec.rows})")
    values = p.values
    assert values is not None  # (unpack gives a PUSH its values)
    n, m = len(keys), len(pulls)
    if isinstance(shard, Shard) and n > 1 and bool((keys[1:] > keys[:-1]).all()):  # (sorted, distinct: no sums)
        miss = shard.push_distinct(keys, values)
    else:
        miss = shard.push(keys, values)
    out = np.empty((m, spec.dim), dtype=spec.dtype)  # (m, dim), sent zero-copy
    pmiss = shard.pull(pulls, out)
    if not len(miss) and m > len(pmiss):  # one reply: the rows, and the push acknowledged whole
        server.reply_served(pull, None, pmiss, out, m, fused=np.array([header.request_id, header.part, n], np.int64))
    else:
        if n > len(miss):
            server.reply_served(push, None, miss, None, n)
        if m > len(pmiss):
            server.reply_served(pull, None, pmiss, out, m)
    if len(miss):  # (first: where they meet again, the push is applied before the pull is served)
        server.pass_on(push, Payload(keys, None, values, None), keys, miss, shard)
    if len(pmiss):
        server.pass_on(pull, Payload(pulls, None, None, None), pulls, pmiss, shard)
