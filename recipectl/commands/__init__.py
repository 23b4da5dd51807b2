"""Presentation of the longer-running commands (launch, status, stop, logs, doctor, ...)."""
