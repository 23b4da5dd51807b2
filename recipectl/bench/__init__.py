"""`recipectl bench`: the seed's concurrency sweep with the engine's own client (`vllm bench serve`)."""
