"""What a running deployment is, whoever started it: its state on disk (`state`), its process
groups (`processes`), and why a process died, read from its log (`diagnose`). Launchers write
runs; status, stop, logs, doctor and bench read them."""
