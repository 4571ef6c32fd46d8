"""Kafka Connect in standalone (and distributed) mode running the real Debezium Vitess connector, for conformance tests."""

from connectstandalone.distributed import ConnectDistributed
from connectstandalone.runner import (
    DEBEZIUM_VERSION,
    ConnectorFailed,
    ConnectStandalone,
    debezium_home,
    vitess_connector_config,
)

__all__ = ["DEBEZIUM_VERSION", "ConnectDistributed", "ConnectStandalone", "ConnectorFailed", "debezium_home", "vitess_connector_config"]
