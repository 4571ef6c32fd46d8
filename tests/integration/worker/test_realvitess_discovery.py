"""Shard discovery through real Vitess v24's vtctld (FindAllShardsInKeyspace, GetSrvKeyspaces) and
VTGate (SHOW VITESS_SHARDS) with the operator's discovery code as it is."""

from __future__ import annotations

import pytest
from realvitess_fixtures import KEYSPACE

from cdcoperator.discovery import Discovery, DiscoveryError, discover_via_vtctld, discover_via_vtgate
from realvitess import VTTestServer

pytestmark = pytest.mark.realvitess


def test_the_operator_discovers_the_serving_shards_through_vtctld_and_vtgate(real_vitess: VTTestServer) -> None:
    shards = tuple(real_vitess.shards)
    assert shards == ("-80", "80-")
    assert discover_via_vtctld(real_vitess.vtctld, KEYSPACE) == Discovery(shards, shards, "vtctld")
    assert discover_via_vtgate(real_vitess.vtgate, KEYSPACE) == Discovery(shards, shards, "vtgate")
    with pytest.raises(DiscoveryError, match="nokeyspace"):
        discover_via_vtctld(real_vitess.vtctld, "nokeyspace")
