"""Kafka Connect in standalone mode running the real Debezium Vitess connector, for conformance tests."""

from connectstandalone.runner import (
    DEBEZIUM_VERSION,
    ConnectorFailed,
    ConnectStandalone,
    debezium_home,
    vitess_connector_config,
)

__all__ = ["DEBEZIUM_VERSION", "ConnectStandalone", "ConnectorFailed", "debezium_home", "vitess_connector_config"]
