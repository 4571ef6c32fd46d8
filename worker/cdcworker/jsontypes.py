"""The one home for JSON-document types in product code, and why they stay dynamic.

Some values are JSON documents whose shape shardcdc does not own, or reads only in part:

* Kubernetes objects as the API server returns them (the CdcConnector and CdcBackfill resources,
  Pods, Jobs, Leases, Events, SparkApplications, status subresources), which other controllers and
  newer API versions extend with fields we pass through untouched;
* Kafka Connect JSON: connector configurations, converter schemas and the ``schema``/``payload``
  envelope, the REST API's documents;
* Debezium envelopes, signal and notification documents and offset records read back from topics;
* the pod's termination message and the ``/status`` document.

They are parsed at an edge and checked where a field is read (an absent or mistyped field is one
clear message, not a traceback). Typing them field by field would copy schemas that belong to
Kubernetes, Kafka Connect and Debezium and change without us; so inside the product they are
``Any``, under these names only. ``scripts/code_figures.py`` counts uses of these aliases as
"documented dynamic", apart from bare ``Any`` (which needs its own reason comment).
Values the product only passes through are ``object``; objects the product builds itself get a
``TypedDict`` or a class instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeAlias

__all__ = ["JsonList", "JsonMapping", "JsonObject", "JsonValue"]

JsonValue: TypeAlias = Any  # a decoded JSON value of a shape checked where it is read (see above)
JsonObject: TypeAlias = dict[str, Any]  # a decoded JSON object, e.g. a Kubernetes object or a Connect config
JsonMapping: TypeAlias = Mapping[str, Any]  # a JSON object only read (or a TypedDict the product built)
JsonList: TypeAlias = list[Any]  # a decoded JSON array
