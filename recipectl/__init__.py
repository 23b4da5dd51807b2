"""recipectl: validate, render, launch and check disaggregated prefill/decode vLLM deployments
of hybrid-attention models (full attention + Gated DeltaNet)."""

__version__ = "0.1.0"
