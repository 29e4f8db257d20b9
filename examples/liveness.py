"""Requests that cannot hang: RequestStalled after PSKV_REQUEST_TIMEOUT, and what a node waits for.

    python examples/liveness.py                       # 1 node
    pskv launch -n 2 -- python examples/liveness.py   # 2 nodes
"""
import numpy as np
import pskv

with pskv.init(request_timeout=30) as node:         # or PSKV_REQUEST_TIMEOUT=30
    table = node.table("emb", rows=100, dim=4)
    try:
        table.pull(np.arange(10))
    except pskv.RequestStalled as exc:               # only if a node stops answering for 30 s
        print(exc.request, exc.destinations)
    print(node.debug_state().splitlines()[1])        # "  outstanding requests: 0"
