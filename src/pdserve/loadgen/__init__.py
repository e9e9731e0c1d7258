"""Load generation through maintained clients (NVIDIA's aiperf) for the demo and live benchmarks.

``aiperf`` holds the pure parts (the trace file aiperf replays, its command line, its
per-request export read back into the demo's ``RequestResult``); ``aiperf_run`` is the
thin shell that runs the ``aiperf`` executable and follows its export as it is written.
aiperf is not a dependency of pdserve itself: it lives in its own environment (the
``load`` extra; ``make load-env`` builds ``.cache/load-venv``) and runs as a process.
"""
