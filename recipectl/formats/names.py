"""The names of the formats recipectl reads (what `sniff` answers and each importer records)."""

NATIVE = "recipectl"
SRT_SLURM = "srt-slurm"
DYNAMO = "dynamo"
VLLM_SERVE = "vllm-serve"
