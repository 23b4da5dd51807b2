"""Capacity: the concurrency sweep against what decode can hold (filled in by the planner)."""
