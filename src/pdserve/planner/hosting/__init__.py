"""The planner's Kubernetes shell, hosted by the operator (I/O only; decisions live in ``pdserve.planner.core``).

- ``daemon.run_hosted``: one planning loop per DisaggregatedService, run in the operator's
  kopf daemon (the only planner host on a cluster);
- ``actuator.KubernetesActuator``: reads the pools' pods, writes replicas and status.planner.
"""
