"""Data for pskv's apps: fetched data sets (fetch.py), rating loaders and generators (ratings.py).

from pskv.data import fetch
path = fetch("ml-100k")          # a directory holding ml-100k.inter, .item, .user
for b in Lookahead(batches, lambda b: {table: keys_of(b)}, ahead=4): ...   # intents (lookahead.py)
"""

from .fetch import (
    DATASETS as DATASETS,
    DataError as DataError,
    Dataset as Dataset,
    cache_dir as cache_dir,
    fetch as fetch,
    lapse_toy_dir as lapse_toy_dir,
)
from .lookahead import Lookahead as Lookahead

__all__ = ["DATASETS", "DataError", "Dataset", "Lookahead", "cache_dir", "fetch", "lapse_toy_dir"]
