"""Process exit statuses of ``shardcdc worker`` and its supervision contract; the operator acts on them."""

OK = 0
FAILED = 1
CONFIG_INVALID = 2
# The task's shards were resharded into shards that other tasks may hold (a journal whose
# participants span tasks). The worker stored the target shards' positions from the journal in
# its offset record and stopped; the operator starts a new generation that covers the new shards.
REASSIGNMENT_NEEDED = 10

# Set by the operator on worker pods: a supervisor (the Deployment) restarts a worker that exits, so
# a task whose work is done (snapshot.mode=initial_only) reports state "completed" and waits to be
# stopped instead of exiting into a restart loop.
SUPERVISED_ENV = "SHARDCDC_WORKER_SUPERVISED"
