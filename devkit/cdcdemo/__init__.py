"""``shardcdc demo``: the whole product on one machine (a development-kit command).

It starts a real Kafka broker, the VTGate test server and Prometheus, so it lives in devkit, above
the product, and reaches ``shardcdc`` through the ``shardcdc.commands`` entry-point group.
"""
