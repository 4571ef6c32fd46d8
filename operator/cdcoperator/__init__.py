"""shardcdc operator: reconciles CdcConnector resources into per-task worker pods."""
