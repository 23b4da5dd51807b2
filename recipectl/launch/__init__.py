"""Run a deployment locally: preflight, start, supervise, wait for readiness, stop."""
