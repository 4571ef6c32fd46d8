"""A real Prometheus on loopback for tests and the demo, and the shardcdc files it loads.

``Prometheus`` runs Debian's ``prometheus`` binary (``make prometheus`` installs it) in a
directory of its own, listening on 127.0.0.1 only, bound to this process (``start_bound``); its
HTTP API answers ``query``/``alerts``. ``plain_rules`` turns the shipped PrometheusRule
(``deploy/prometheus/shardcdc-rules.yaml``) into the rule-file format Prometheus and promtool read,
and ``local_scrape_config`` renders the copyable scrape configuration
(``deploy/prometheus/scrape-configs.yaml``) for local mode: each job's ``kubernetes_sd_configs``
becomes a ``file_sd_configs`` over the target files ``shardcdc run --metrics-port`` writes, whose
targets carry the same ``__meta_kubernetes_*`` labels, so the relabelling under test is the file's.
"""

from __future__ import annotations

from promlocal.files import (
    PROMETHEUS_VERSION,
    RULES_FILE,
    SCRAPE_FILE,
    binary,
    local_scrape_config,
    plain_rules,
    shorten_for,
)
from promlocal.server import Prometheus, PrometheusError, for_local_mode

__all__ = [
    "PROMETHEUS_VERSION",
    "RULES_FILE",
    "SCRAPE_FILE",
    "Prometheus",
    "PrometheusError",
    "binary",
    "for_local_mode",
    "local_scrape_config",
    "plain_rules",
    "shorten_for",
]
