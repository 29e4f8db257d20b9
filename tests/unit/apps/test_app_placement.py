"""apps/common.placement: --lease and --location-caches become the tables' pskv.Relocate, for every app."""

from __future__ import annotations

import pytest

import pskv
from pskv.apps import common

pytestmark = pytest.mark.timeout(30)


@pytest.mark.parametrize("argv, expected", [
    ([], pskv.Relocate()),  # keys do not move: pskv's defaults
    (["--localize"], pskv.Relocate(location_caches=True)),  # keys move: find them without the manager hop
    (["--sampling", "pool"], pskv.Relocate(location_caches=True)),
    (["--sampling", "naive"], pskv.Relocate()),
    (["--localize", "--location-caches", "off", "--lease", "2.5"], pskv.Relocate(lease=2.5)),
    (["--lease", "0", "--location-caches", "on"], pskv.Relocate(lease=0.0, location_caches=True)),
])
def test_placement_flags(argv, expected):
    args = common.parser("test", "placement flags", techniques=True).parse_args(argv)
    assert common.placement(args) == expected


def test_a_bad_lease_is_refused_with_the_value():
    args = common.parser("test", "placement flags", techniques=True).parse_args(["--lease", "-1"])
    with pytest.raises(pskv.ConfigError, match=r"lease=-1"):
        common.placement(args)
