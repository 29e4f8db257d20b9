"""Prometheus metrics of a node (pskv.monitor): serve them, scrape them.

    python examples/metrics.py                      # node 0 serves http://127.0.0.1:9100/metrics
    METRICS_PORT=9200 python examples/metrics.py
    pskv launch -n 2 --metrics 9100 -- python train.py   # node r at port 9100 + r; `pskv top` shows them live
"""
import os
import urllib.request

import numpy as np
import pskv

port = int(os.environ.get("METRICS_PORT", "9100"))
with pskv.init(metrics_port=port) as node:             # needs pip install 'pskv[metrics]'
    table = node.table("emb", rows=100, dim=4)
    table.push(np.arange(10), np.ones((10, 4), np.float32)).wait()
    table.pull(np.arange(20))
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith(("pskv_keys_total", "pskv_requests_total")):
            print(line)
