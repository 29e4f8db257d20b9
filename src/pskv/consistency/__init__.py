"""Consistency (Petuum Bösen): worker clocks (clocks.py), the node's row cache (cache.py) and push buffer
(buffer.py); the models themselves (BSP, SSP, Async) are options (pskv.options).

After Petuum Bösen (ATC'14): every worker thread counts its clocks (`worker.clock()`); an
update issued between its c-th and (c+1)-th `clock()` is *stamped* c. A table's model is a
staleness s: a pull by a worker at clock c returns rows that include every update of every
worker stamped <= c - s - 1 (it may include newer ones), and always the worker's own updates
(read-my-writes). BSP is s = 0, Async is s = inf (never waits).

How the guarantee is kept:

    worker.clock()      ends clock c of this worker; never blocks
    node  (Clocks)      when every open worker of the node ended clock c and every update they
                        stamped <= c was acknowledged by its owner: applied clock = c + 1,
                        reported to the coordinator (CLOCK)
    coordinator         global clock G = min over the nodes' applied clocks, broadcast on change
    pull at clock c     needs G >= c - s: served at once (from the row cache when it holds a
                        copy fetched after that point), else it blocks until G gets there

So blocking happens only in pulls, only while the slowest worker (or its unacknowledged
updates) is more than s clocks behind; a worker can be at most s + 1 clocks ahead of the
slowest one when it blocks. Remote updates of a BSP/SSP table wait in a per-table PushBuffer
(duplicates summed) until the node's clock advances, the buffer fills, or a pull has to fetch
rows from their owner; flushes and pulls of one node travel in order on one connection, which
gives read-my-writes for fetched rows, and a push also updates the cached copy (`add`) or drops
it (other updaters), which gives it for cached ones.

Threads and ownership: `Clocks` is shared by the node's worker threads (tick/close), the
pskv-server thread (acknowledgements arrive as Future callbacks; the coordinator's global
clock) and pullers (wait_for); `Clocks._cond` guards its state and is never held while a
Future callback is registered, a report sent or a buffer flushed. `RowCache._lock` and
`PushBuffer._lock` guard their arrays; PushBuffer._send_lock keeps one flush's sends in order
with the pulls that follow it.
"""
