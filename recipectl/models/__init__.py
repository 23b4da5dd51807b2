"""What recipectl knows about models: their dimensions (`spec`), the published ones built in
(`builtin`), and what a recipe leaves out, inferred from a local config.json or a known name
(`info`). Below the schema and the planner; imports neither."""
