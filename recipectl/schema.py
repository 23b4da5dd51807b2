"""The recipe schema (version 1): pydantic v2 models, frozen, unknown keys are errors.

Impossible recipes fail here (exit 2); inadvisable ones are rules (recipectl/rules/).
Defaults live here and nowhere else, so `recipectl show --resolved` shows exactly what runs.
"""

# No `from __future__ import annotations` here: with it every field annotation is a string that
# pydantic compiles and evaluates when the class is created, at start-up.

import re
from enum import Enum
from typing import Annotated, Any, Literal

from pydantic import Field, PrivateAttr, field_validator, model_validator

from .fieldtypes import (
    MAX_SECONDS,
    MAX_TOKENS,
    Number,
    PathText,
    SchemaValueError,
    Strict,
    TokenCount,
    Whole,
    check_core_lists,
    check_env_names,
    check_path,
    check_program,
    is_image_reference,
    is_version,
    parse_tokens,
    parse_version,
    release_image_version,
)
from .hardware import ClusterSection, Parallelism
from .hardware import GpuType as GpuType
from .models.family import ModelFamily
from .models.info import ModelFacts
from .placeholders import with_stand_ins

SCHEMA_VERSION = 1
MAX_IGNORE_ENTRIES = 256  # ignore: names rules, code prefixes or families: a few hundred exist
MAX_SELECTOR_CHARS = 128  # the longest rule name is under 64


# ---------------------------------------------------------------------------------------- model
class Quantization(str, Enum):
    NVFP4 = "nvfp4"
    FP8 = "fp8"
    BF16 = "bf16"


class ModelSection(Strict):
    path: PathText = Field(description="Hugging Face id or local directory of the model")
    served_name: str | None = Field(None, description="--served-model-name; default: the path")
    family: ModelFamily | None = Field(
        None, description="hybrid | dense | moe; inferred from a local config.json or a built-in spec"
    )
    quantization: Quantization | None = None
    dtype: Literal["auto", "bfloat16", "float16", "float32"] | None = None
    num_experts: Whole | None = Field(None, ge=1, le=1 << 20, description="routed experts (inferred when known)")
    spec: str | None = Field(None, description="built-in model spec for planning, e.g. Qwen3.5-397B-A17B")
    multimodal: bool | None = Field(None, description="the checkpoint has a vision/audio tower (inferred)")
    language_model_only: bool = Field(False, description="--language-model-only (text workloads)")
    max_model_len: Whole | None = Field(None, ge=1, le=MAX_TOKENS, description="--max-model-len for every endpoint")
    load_format: str | None = None
    trust_remote_code: bool = False

    @field_validator("path")
    @classmethod
    def _path_is_a_path(cls, v: str) -> str:
        return check_path(v)

    @property
    def name(self) -> str:
        return self.served_name or self.path


# --------------------------------------------------------------------------------------- engine
class EngineSection(Strict):
    vllm_version: str | None = Field(
        None, description="vLLM release the endpoints run, e.g. 0.26.0 (or read from the image tag)"
    )
    image: str | None = Field(None, description="container image; only vllm/vllm-openai:vX.Y.Z gives the vLLM version")
    patches: list[Annotated[Whole, Field(ge=1, le=10**8)]] = Field(
        default_factory=lambda: [], description="upstream vLLM PR numbers a nightly/patched build carries"
    )
    venv: PathText | None = Field(None, description="virtual environment whose bin/ holds vllm and vllm-router")
    serve_command: list[str] = Field(
        default_factory=lambda: ["vllm", "serve"], description="how to call the server; the model path follows"
    )
    router_command: list[str] = Field(default_factory=lambda: ["vllm-router"])
    env: dict[str, str] = Field(default_factory=dict, description="environment for every process")

    @field_validator("vllm_version")
    @classmethod
    def _version_parses(cls, v: str | None) -> str | None:
        if v is not None and not is_version(v):
            raise SchemaValueError("not a vLLM version (a PEP 440 version)", fix="write it like 0.26.0")
        return v

    @field_validator("image")
    @classmethod
    def _image_is_a_reference(cls, v: str | None) -> str | None:
        # an envsubst placeholder (`${VLLM_IMAGE}`, `nvcr.io/team/vllm:${TAG}`) is set at deploy time, not
        # invalid: IMP001 says so
        if v is not None and not is_image_reference(with_stand_ins(v)):
            raise SchemaValueError(
                "not a container image reference",
                fix="write it like vllm/vllm-openai:v0.26.0 or registry.example:5000/team/vllm@sha256:<digest>",
            )
        return v

    _env_names = field_validator("env")(check_env_names)
    _commands = field_validator("serve_command", "router_command")(check_program)

    @field_validator("venv")
    @classmethod
    def _venv_is_a_path(cls, v: str | None) -> str | None:
        return None if v is None else check_path(v, program=True)

    @property
    def version(self) -> tuple[int, int, int] | None:
        """The vLLM version, from vllm_version or a vLLM release image; None when unknown.

        Only `vllm/vllm-openai:vX.Y.Z` names a vLLM version. Other tags number something else
        (Dynamo's `vllm-runtime:1.3.0` ships vLLM 0.23; NGC tags are dates) or nothing (nightly
        builds): reading them as vLLM versions once advised turning async scheduling back on, on
        an engine without the race fixes."""
        if self.vllm_version:
            return parse_version(self.vllm_version)
        return release_image_version(self.image) if self.image else None


# ------------------------------------------------------------------------------------------ roles
class RoleSection(Strict):
    endpoints: Whole = Field(1, ge=1, le=1024, description="number of endpoints of this role")
    parallel: Parallelism = Field(default_factory=Parallelism, description="per endpoint: DEP8, TP4, ...")
    port: Whole = Field(..., ge=1, le=65535, description="HTTP port of the first endpoint; +1 per endpoint on a host")
    side_channel_port: Whole = Field(
        ..., ge=1, le=65535, description="VLLM_NIXL_SIDE_CHANNEL_PORT base of the first endpoint on a host"
    )
    kv_role: Literal["kv_producer", "kv_consumer", "kv_both"] | None = None
    env: dict[str, str] = Field(default_factory=dict)
    extra_args: list[str] = Field(
        default_factory=lambda: [],
        description=(
            "extra vllm serve arguments, verbatim; a whole ${NAME} item is a reference, expanded where the process runs"
        ),
    )
    cpu_cores: list[str] | None = Field(
        None, description="CPU platform: cores per endpoint, e.g. ['0'] or ['0-3', '4-7']"
    )
    data_parallel_rpc_port: Whole | None = Field(
        None, ge=1, le=65535, description="--data-parallel-rpc-port (multi-node DP)"
    )
    devices: list[list[Annotated[Whole, Field(ge=0, le=4095)]]] | None = Field(
        None,
        description=(
            "GPUs: local GPU ids per endpoint, e.g. [[0]]; endpoints that name the same GPU share it, "
            "each taking its role's gpu_memory_utilization of the GPU's memory"
        ),
    )

    # engine flags; None = not rendered (the engine's own default applies)
    max_num_batched_tokens: TokenCount | None = None
    max_num_seqs: Whole | None = Field(None, ge=1, le=1 << 24)
    max_model_len: Whole | None = Field(None, ge=1, le=MAX_TOKENS)
    gpu_memory_utilization: Number | None = Field(None, gt=0, le=1)
    async_scheduling: bool | None = None
    mamba_ssm_cache_dtype: Literal["auto", "float32", "float16", "bfloat16"] | None = None
    mamba_cache_dtype: Literal["auto", "float32", "float16", "bfloat16"] | None = None
    kv_cache_dtype: str | None = None
    block_size: Whole | None = Field(None, ge=1, le=1 << 20)
    attention_backend: str | None = None
    gdn_prefill_backend: Literal["auto", "flashinfer", "triton", "cutedsl", "aiter_flydsl", "sycl"] | None = None
    stream_interval: Whole | None = Field(None, ge=1, le=1 << 20)
    api_server_count: Whole | None = Field(None, ge=1, le=1024)
    enable_prefix_caching: bool | None = None
    disable_hybrid_kv_cache_manager: bool | None = None
    speculative_config: dict[str, Any] | None = None
    max_cudagraph_capture_size: Whole | None = Field(None, ge=1, le=1 << 20)
    enforce_eager: bool | None = None
    all2all_backend: str | None = None
    enable_eplb: bool | None = None

    _tokens = field_validator("max_num_batched_tokens", mode="before")(parse_tokens)

    _env_names = field_validator("env")(check_env_names)
    _core_lists = field_validator("cpu_cores")(check_core_lists)

    @model_validator(mode="after")
    def _cores_per_endpoint(self) -> "RoleSection":
        if self.cpu_cores is not None and len(self.cpu_cores) != self.endpoints:
            raise SchemaValueError(
                f"{len(self.cpu_cores)} cpu_cores entries for {self.endpoints} endpoint(s)",
                fix="give one core list per endpoint, e.g. cpu_cores: ['0'] for one endpoint",
            )
        if self.devices is not None:
            if len(self.devices) != self.endpoints:
                raise SchemaValueError(
                    f"{len(self.devices)} devices entries for {self.endpoints} endpoint(s)",
                    fix="give one GPU list per endpoint, e.g. devices: [[0]] for one endpoint",
                )
            for ids in self.devices:
                if len(ids) != self.parallel.gpus:
                    raise SchemaValueError(
                        f"devices {ids}: {len(ids)} GPU(s) for an endpoint of {self.parallel.label} "
                        f"({self.parallel.gpus} GPUs)",
                        fix=f"name {self.parallel.gpus} GPU id(s) per endpoint, e.g. "
                        f"devices: [{list(range(self.parallel.gpus))}]",
                    )
                if len(set(ids)) != len(ids):
                    raise SchemaValueError(f"devices {ids} names a GPU twice", fix="name each GPU of an endpoint once")
        return self


def endpoints_per_host(spec: RoleSection, cluster: ClusterSection) -> int:
    """The most endpoints of one role that placement can put on one host (recipectl/topology.py):
    round-robin over the hosts on the CPU platform (over both roles' endpoints, so a role never gets
    more than its share); on GPUs as many as fit in a node's GPUs, and one
    per node for an endpoint larger than a node."""
    if cluster.is_cpu:
        return -(-spec.endpoints // cluster.nodes)
    need = spec.parallel.gpus
    if need > cluster.gpus_per_node or cluster.gpus_per_node < 1:
        return 1
    return max(1, min(spec.endpoints, cluster.gpus_per_node // need))


class PrefillRole(RoleSection):
    port: Whole = Field(8100, ge=1, le=65535)
    side_channel_port: Whole = Field(5600, ge=1, le=65535)

    @property
    def effective_kv_role(self) -> str:
        return self.kv_role or "kv_producer"


class DecodeRole(RoleSection):
    port: Whole = Field(8200, ge=1, le=65535)
    side_channel_port: Whole = Field(5700, ge=1, le=65535)

    @property
    def effective_kv_role(self) -> str:
        return self.kv_role or "kv_consumer"


# ---------------------------------------------------------------------------------- kv transfer
class KVTransferSection(Strict):
    connector: Literal["NixlConnector", "NixlPullConnector", "NixlPushConnector"] = "NixlConnector"
    backends: list[str] = Field(default_factory=lambda: ["UCX"])
    buffer_device: Literal["cuda", "cpu"] | None = Field(None, description="default: the platform's device")
    load_failure_policy: Literal["fail", "recompute"] = "fail"
    extra_config: dict[str, Any] = Field(default_factory=dict, description="more kv_connector_extra_config")


# --------------------------------------------------------------------------------------- router
RouterPolicy = Literal[
    "random", "round_robin", "cache_aware", "kv_aware", "power_of_two", "consistent_hash", "sticky_least_loaded"
]


class RouterSection(Strict):
    kind: Literal["vllm-router", "vllm-proxy"] = "vllm-router"
    port: Whole = Field(30000, ge=1, le=65535)
    host_index: Whole = Field(0, ge=0, le=4095, description="which node runs the router")
    policy: RouterPolicy | None = None
    prefill_policy: RouterPolicy | None = None
    decode_policy: RouterPolicy | None = None
    prometheus_port: Whole | None = Field(None, ge=1, le=65535)
    request_timeout_s: Whole | None = Field(None, ge=1, le=MAX_SECONDS)
    worker_startup_timeout_s: Whole | None = Field(None, ge=1, le=MAX_SECONDS)
    proxy_command: list[str] | None = Field(None, description="vllm-proxy: the command of the proxy server")
    extra_args: list[str] = Field(
        default_factory=lambda: [],
        description=(
            "extra router arguments, verbatim; a whole ${NAME} item is a reference, expanded where the process runs"
        ),
    )

    _proxy_command = field_validator("proxy_command")(check_program)


# ------------------------------------------------------------------------------------- workload
class WorkloadSection(Strict):
    isl: Whole = Field(..., ge=1, le=MAX_TOKENS, description="input sequence length (tokens)")
    osl: Whole = Field(..., ge=1, le=MAX_TOKENS, description="output sequence length (tokens)")
    random_range_ratio: Number = Field(0.0, ge=0, lt=1)
    concurrency: list[Annotated[Whole, Field(le=1 << 24)]] = Field(
        default_factory=lambda: [1], min_length=1, max_length=1024
    )
    prompts_per_concurrency: Whole = Field(10, ge=1, le=1 << 20, description="requests per level = this x concurrency")
    text_only: bool = Field(True, description="the workload sends text only (no images/audio)")

    @field_validator("concurrency")
    @classmethod
    def _positive(cls, v: list[int]) -> list[int]:
        if any(c < 1 for c in v):
            raise SchemaValueError("concurrency levels must be >= 1")
        return v

    @property
    def max_isl(self) -> int:
        return int(self.isl * (1 + self.random_range_ratio))

    @property
    def max_osl(self) -> int:
        return int(self.osl * (1 + self.random_range_ratio))


# --------------------------------------------------------------------------------------- checks
class Gsm8kCheck(Strict):
    enabled: bool = True
    threshold: Number = Field(0.88, ge=0, le=1, description="expected accuracy (the seed: 0.88)")
    tolerance: Number = Field(0.08, ge=0, le=1, description="pass when accuracy >= threshold - tolerance")
    num_questions: Whole = Field(200, ge=1, le=1319)
    num_shots: Whole = Field(5, ge=0, le=8)
    concurrency: Whole = Field(64, ge=1, le=1 << 16)
    max_tokens: Whole = Field(256, ge=1, le=MAX_TOKENS)
    timeout_s: Number = Field(600, gt=0, le=MAX_SECONDS, allow_inf_nan=False, description="per request")


class ParityCheck(Strict):
    enabled: bool = True
    reference: str = Field("prefill", description="'prefill' (its endpoint served directly) or a URL")
    num_prompts: Whole = Field(20, ge=1, le=1 << 20)
    max_tokens: Whole = Field(32, ge=1, le=MAX_TOKENS)
    near_tie_nats: Number = Field(
        0.1, ge=0, le=1000, allow_inf_nan=False, description="a divergence under this margin is numerical"
    )
    min_match_rate: Number = Field(0.75, ge=0, le=1)


class ChecksSection(Strict):
    gsm8k: Gsm8kCheck = Field(default_factory=Gsm8kCheck)
    parity: ParityCheck = Field(default_factory=ParityCheck)
    timeout_s: Number = Field(30, gt=0, le=MAX_SECONDS, allow_inf_nan=False, description="per endpoint check")


class LaunchSection(Strict):
    ready_timeout_s: Number = Field(1200, gt=0, le=MAX_SECONDS, allow_inf_nan=False)
    stop_grace_s: Number = Field(20, gt=0, le=3600, allow_inf_nan=False)
    run_dir: PathText = Field(".recipectl/runs", description="where run state and logs are kept")

    _run_dir = field_validator("run_dir")(check_path)


# --------------------------------------------------------------------------------------- recipe
class Recipe(Strict):
    version: Literal[1] = Field(..., description="recipe schema version")
    name: str = Field(..., min_length=1)
    description: str | None = None
    model: ModelSection
    engine: EngineSection = Field(default_factory=EngineSection)
    cluster: ClusterSection
    prefill: PrefillRole = Field(default_factory=PrefillRole)
    decode: DecodeRole = Field(default_factory=DecodeRole)
    kv_transfer: KVTransferSection = Field(default_factory=KVTransferSection)
    router: RouterSection = Field(default_factory=RouterSection)
    workload: WorkloadSection | None = Field(
        None, description="the benchmark workload (isl/osl/concurrency); an accuracy-only recipe has none"
    )
    checks: ChecksSection = Field(default_factory=ChecksSection)
    launch: LaunchSection = Field(default_factory=LaunchSection)
    matrix: dict[str, list[Any]] | None = Field(
        None, description="field path -> values; expands into one recipe per combination"
    )
    ignore: dict[str, str] = Field(default_factory=dict, description="rule code -> reason it does not apply")

    @field_validator("ignore")
    @classmethod
    def _ignore_is_a_few_selectors(cls, v: dict[str, str]) -> dict[str, str]:
        """Each entry names a rule, a code prefix or a family: there are a few hundred of those."""
        if len(v) > MAX_IGNORE_ENTRIES:
            raise SchemaValueError(
                f"{len(v):,} ignore: entries; at most {MAX_IGNORE_ENTRIES} (recipectl has fewer "
                "rules, codes and families than that)",
                fix="ignore a family (hybrid) or a code prefix (VER0) rather than each rule",
            )
        long = next((k for k in v if len(k) > MAX_SELECTOR_CHARS), None)
        if long is not None:
            raise SchemaValueError(
                f"an ignore: key of {len(long):,} characters names no rule",
                fix="name a rule listed by `recipectl rules`, or drop the entry",
            )
        return v

    @field_validator("prefill", "decode")
    @classmethod
    def _derived_ports_in_range(cls, spec: RoleSection, info: Any) -> RoleSection:
        """The k-th endpoint of a role on a host listens on `port + k` and its DP ranks on
        `side_channel_port + k * dp + rank` (recipectl/topology.py): the last of them must be a port."""
        cluster = info.data.get("cluster")
        if cluster is None:
            return spec
        role = info.field_name
        per_host = endpoints_per_host(spec, cluster)
        last_http = spec.port + per_host - 1
        if last_http > 65535:
            raise SchemaValueError(
                f"{role}.port {spec.port}: endpoint {per_host} on one host would listen on port {last_http}",
                fix=f"{role}:\n  port: {65535 - per_host + 1}",
            )
        last_side = spec.side_channel_port + per_host * spec.parallel.dp - 1
        if last_side > 65535:
            raise SchemaValueError(
                f"{role}.side_channel_port {spec.side_channel_port}: {per_host} endpoint(s) of DP "
                f"{spec.parallel.dp} on one host would use side-channel port {last_side}",
                fix=f"{role}:\n  side_channel_port: {65535 - per_host * spec.parallel.dp + 1}",
            )
        return spec

    @field_validator("name")
    @classmethod
    def _name_is_safe(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", v):
            raise SchemaValueError(f"'{v}' cannot name a run", fix="use letters, digits, '.', '_' and '-'")
        return v

    # What the loader read about the model beyond the recipe (its config.json): set once, by
    # with_model_facts; empty for a recipe validated from data alone.
    _model_facts: ModelFacts = PrivateAttr(default_factory=ModelFacts)

    @property
    def model_facts(self) -> ModelFacts:
        return self._model_facts

    def with_model_facts(self, model: ModelSection, facts: ModelFacts) -> "Recipe":
        """This recipe with `model` (its section, filled in from `facts`) and carrying `facts`."""
        recipe = self.model_copy(update={"model": model})
        recipe._model_facts = facts
        return recipe

    # -- derived facts the rules and renderers share
    @property
    def is_hybrid(self) -> bool:
        return self.model.family is ModelFamily.HYBRID

    @property
    def roles(self) -> dict[str, RoleSection]:
        return {"prefill": self.prefill, "decode": self.decode}

    @property
    def served_name(self) -> str:
        return self.model.name

    def role_env(self, role: str) -> dict[str, str]:
        """Environment of a role's processes as the recipe states it (engine env, then role env)."""
        return {**self.engine.env, **self.roles[role].env}

    def max_model_len(self, role: str) -> int | None:
        return self.roles[role].max_model_len or self.model.max_model_len
