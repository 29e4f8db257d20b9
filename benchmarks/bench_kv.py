"""pskv pull/push benchmark: numpy vs local vs remote. See `pskv.bench` for what it measures.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_kv.py [--quick] [--sizes 1000,100000] [--dims 1,64]
"""

import sys

from pskv.bench import main

if __name__ == "__main__":
    sys.exit(main())
