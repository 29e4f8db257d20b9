"""Watching a running cluster: `prometheus.py` (each node's Prometheus endpoint, PSKV_METRICS_PORT)
and `top.py` (`pskv top`: a live terminal view built from those endpoints; standard library only)."""
