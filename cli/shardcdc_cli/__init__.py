"""The ``shardcdc`` command, the top layer of the product (CLI -> operator -> worker).

:mod:`.cli` maps subcommand names to modules; the day-2 commands live here (``status``,
``offsets``, ``validate``, ``tail``, ``verify``), the others in the package they drive (``worker``:
cdcworker.run, ``operator``/``run``/``scale``: cdcoperator). What the CLI shares with the operator
lives below it: the connector check (``cdcoperator.connectorcheck``), offset changes
(``cdcworker.offsets.edits``). Development-kit commands (``demo``, ``vtgate-sim``) are plugins found
through the ``shardcdc.commands`` entry points; this package never imports devkit.
"""
