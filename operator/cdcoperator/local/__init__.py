"""Local mode: the operator's planner and reconcile without Kubernetes, with worker processes for pods.

* :mod:`.kubelet` runs the pod template of each Deployment as a local process (command, args,
  env, ConfigMap/Secret volumes as files) and reports it as a pod body; local mode and the
  end-to-end tests (Deployments from a real API server) share it;
* :mod:`.cluster` is the in-memory stand-in for the API server that ``reconcile()`` talks to;
* :mod:`.runner` is ``shardcdc run``: the same ``reconcile()`` on a timer, plus a control endpoint
  (:mod:`.control`) for ``shardcdc scale``.
"""
