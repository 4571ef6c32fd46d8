"""Day-2 commands of ``shardcdc``: ``status``, ``offsets``, ``validate`` and ``tail``.

Each command is one module with a ``register(parser)`` function (``cdcworker.cli.SUBCOMMANDS``);
the logic they share with the operator (reading and changing a connector's offsets) lives in
:mod:`cdcworker.admin.offsetsops`, pure functions plus one small I/O edge.
"""
