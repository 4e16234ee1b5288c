"""The fleet (``kimitui fleet``): many GPU hosts read at once, through the engine a fleet already runs.

Each source is a ``FleetReader`` (``reader``): one round reads every host it knows and returns a row for each,
up or not, within the round's deadline. ``rounds`` turns a reader into ``FleetSample`` events at an interval.
The sources: ``ssh_reader`` (our agent on each host over SSH, as the dashboard does), ``prometheus`` (DCGM
exporter and vLLM metrics through Prometheus' HTTP API), ``demo_reader`` (the demo's simulated hosts,
``demo_hosts``, which also serve DCGM-exporter metrics for a real Prometheus to scrape).
"""
