"""Render a recipe into processes (argv + env) and into bash, Slurm and Kubernetes files."""
