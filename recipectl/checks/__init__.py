"""Checks against running servers: GSM8K accuracy, P/D transfer evidence from ``/metrics``,
and token parity between the P/D path and an aggregated reference."""
