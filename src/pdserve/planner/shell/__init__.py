"""The standalone planner's I/O shell around the pure core (pdserve.planner.core): metric
sources (Prometheus, direct /metrics scrapes), the local process-pool actuator, the async
planning loop, its Prometheus metrics, and the CLIs (``pdserve planner``, profiling
sweep, predictor backtest). The operator-hosted shell is pdserve.planner.hosting.
"""
