"""Real Vitess v24 (over MariaDB 10.11) for the real-Vitess test tier: a single-process cluster
(``vttestserver``/``vtcombo``, :class:`VTTestServer`) and a small gRPC client for its VTGate.

The binaries come from ``make vitess`` (``SHARDCDC_VITESS_HOME``); everything runs under the
unprivileged ``SHARDCDC_VITESS_USER`` when started as root (``mysqlctl`` refuses root)."""

from .client import VTGateClient
from .env import VitessEnv, vitess_env
from .single import VTTestServer

__all__ = ["VTGateClient", "VTTestServer", "VitessEnv", "vitess_env"]
