"""The planner's pure core: observations, the scaling policy and its predictors, pool
sizing from a capacity profile, the KV link model, error budgets and the decision record.
No network, no processes, no clock reads (callers pass ``now``); the one file access is
``CapacityProfile.load``/``dump``, the profile's own (de)serialisation. The simulator
(``sim_hook``), the operator-hosted loop (``pdserve.planner.hosting``) and the standalone
loop (``pdserve.planner.shell``) all decide through it.
"""
