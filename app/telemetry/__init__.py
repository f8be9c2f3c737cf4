"""What the parts tell about themselves: logs, Prometheus metrics and their HTTP server, traces.

Nothing is imported here: the store counts with :mod:`app.telemetry.metrics`, a worker
with tracing off never imports OpenTelemetry (:mod:`app.telemetry.tracing`).
"""
