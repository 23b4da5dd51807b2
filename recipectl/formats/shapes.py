"""What each peer format's importer reads, as pydantic models: the subset of srt-slurm's and
Dynamo's schemas recipectl takes values from, typed and bounded.

An importer checks its document against its shape before it reads a value, so a value of the
wrong type (a word where a number goes, a string where a mapping goes, a list where a string
goes) is a finding naming the field and its line in the original file (exit 2), never an
`int()` or `.get()` that raises. Keys recipectl does not read are allowed and left alone: the
importers carry or drop them as before. The checked data itself is not replaced: the importers
read the document as written, which the shape has shown to have the types they expect.
"""

# No `from __future__ import annotations`: pydantic reads the annotations at class creation.

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, PlainValidator, ValidationError
from pydantic_core import PydanticCustomError

from ..fieldtypes import MAX_TOKENS, Number, Whole  # `Whole`: "8" (a Kubernetes quantity) is one, `true` is not
from ..placeholders import has_reference
from .registry import PathKey, PeerFileInvalid


def check(shape: type[BaseModel], data: Any, file: str, positions: dict[PathKey, tuple[int, int]]) -> None:
    """Raise PeerFileInvalid unless `data` has the types `shape` gives its fields."""
    try:
        shape.model_validate(data)
    except ValidationError as e:
        raise PeerFileInvalid(file, e, data, positions) from None


class Shape(BaseModel):
    model_config = ConfigDict(extra="allow", defer_build=True)


# ---------------------------------------------------------------------------------- value types
def _label(v: Any) -> Any:
    """A name or a version: text, or a number YAML read from unquoted text (`vllm: 0.26`)."""
    if isinstance(v, (str, int, float)) and not isinstance(v, bool):
        return v
    raise PydanticCustomError("string_type", "Input should be a valid string")


def _env_value(v: Any) -> Any:
    if isinstance(v, (str, int, float, bool)):
        return v
    raise PydanticCustomError("string_type", "Input should be a valid string (an environment value)")


def _word(v: Any) -> bool:
    return isinstance(v, (str, int, float, bool))


def _flag_value(v: Any) -> Any:
    """srtctl's vllm_config value: true (the bare flag), false or null (nothing), a value, a
    mapping (JSON), or a list of values (one word each)."""
    if (
        v is None
        or _word(v)
        or isinstance(v, dict)
        or (isinstance(v, list) and all(_word(x) or isinstance(x, dict) for x in v))
    ):
        return v
    raise PydanticCustomError("flag_value", "a flag's value is true, false, a value, a mapping or a list of values")


def _connector(v: Any) -> Any:
    if v is None or isinstance(v, (str, dict)):
        return v
    raise PydanticCustomError(
        "connector_type", "a connector is a name (nixl), null or a mapping (the --kv-transfer-config JSON)"
    )


def _concurrencies(v: Any) -> Any:
    """ "64x128", 64, or [64, 128]."""
    if isinstance(v, str):
        return v
    levels = v if isinstance(v, list) else [v]
    if all(isinstance(c, int) and not isinstance(c, bool) and 0 < c <= 1 << 24 for c in levels):
        return v
    raise PydanticCustomError(
        "concurrency_type", 'concurrencies are whole numbers from 1 to 16,777,216: "64x128", 64 or [64, 128]'
    )


def _replicas(v: Any) -> Any:
    """A whole number of replicas, or one set at deploy time (`${PREFILL_REPLICAS}`: IMP001)."""
    if has_reference(v):
        return v
    if isinstance(v, str) and v.strip().isdigit():
        v = int(v)
    if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 1 << 16:
        return v
    raise PydanticCustomError("int_type", "replicas is a whole number from 0 to 65,536, or a deploy-time ${VAR}")


Label = Annotated[Any, PlainValidator(_label)]
Replicas = Annotated[Any, PlainValidator(_replicas)]
EnvValue = Annotated[Any, PlainValidator(_env_value)]
FlagValue = Annotated[Any, PlainValidator(_flag_value)]
Connector = Annotated[Any, PlainValidator(_connector)]
Concurrencies = Annotated[Any, PlainValidator(_concurrencies)]
Env = dict[str, EnvValue]
# bounds past any real deployment (the recipe's schema has its own, tighter ones)
Nodes = Annotated[Whole, Field(ge=0, le=4096)]
Gpus = Annotated[Whole, Field(ge=0, le=1 << 20)]
Workers = Annotated[Whole, Field(ge=0, le=1 << 16)]


# ------------------------------------------------------------------------------------ srt-slurm
class SrtModel(Shape):
    path: Label = ""
    container: Label | None = None
    precision: Label | None = None


class SrtResources(Shape):
    gpu_type: Label = ""
    gpus_per_node: Annotated[Whole, Field(ge=1, le=1024)] = 4
    prefill_nodes: Nodes | None = None
    decode_nodes: Nodes | None = None
    prefill_workers: Workers | None = None
    decode_workers: Workers | None = None
    gpus_per_prefill: Gpus | None = None
    gpus_per_decode: Gpus | None = None


class SrtVllmConfig(Shape):
    prefill: dict[str, FlagValue] | None = None
    decode: dict[str, FlagValue] | None = None


class SrtBackend(Shape):
    type: Label | None = None
    connector: Connector = "nixl"
    prefill_environment: Env | None = None
    decode_environment: Env | None = None
    vllm_config: SrtVllmConfig | None = None


class SrtBenchmark(Shape):
    type: Label | None = None
    isl: Annotated[Whole, Field(ge=0, le=MAX_TOKENS)] | None = None
    osl: Annotated[Whole, Field(ge=0, le=MAX_TOKENS)] | None = None
    concurrencies: Concurrencies | None = None
    random_range_ratio: Annotated[Number, Field(ge=0, le=1, allow_inf_nan=False)] | None = None
    num_shots: Annotated[Whole, Field(ge=0, le=1000)] | None = None
    num_prompts_mult: Annotated[Whole, Field(ge=1, le=1 << 20)] | None = None


class SrtFrameworks(Shape):
    vllm: Label | None = None


class SrtIdentityModel(Shape):
    repo: Label | None = None
    revision: Label | None = None


class SrtIdentity(Shape):
    frameworks: SrtFrameworks | None = None
    model: SrtIdentityModel | None = None


class SrtRecipe(Shape):
    name: Label = "imported"
    model: SrtModel | None = None
    identity: SrtIdentity | None = None
    environment: Env | None = None
    resources: SrtResources | None = None
    backend: SrtBackend | None = None
    benchmark: SrtBenchmark | None = None


# --------------------------------------------------------------------------------------- Dynamo
class DynamoKeyRef(Shape):
    name: Label | None = None
    key: Label | None = None


class DynamoValueFrom(Shape):
    configMapKeyRef: DynamoKeyRef | None = None  # Kubernetes' spelling
    secretKeyRef: DynamoKeyRef | None = None


class DynamoEnvVar(Shape):
    name: Label
    value: EnvValue = ""
    valueFrom: DynamoValueFrom | None = None


class DynamoNamedRef(Shape):
    name: Label | None = None


class DynamoEnvFrom(Shape):
    prefix: Label | None = None
    configMapRef: DynamoNamedRef | None = None
    secretRef: DynamoNamedRef | None = None


class DynamoContainer(Shape):
    image: Label | None = None
    env: list[DynamoEnvVar] | None = None
    envFrom: list[DynamoEnvFrom] | None = None
    command: list[Label] | None = None
    args: list[Label] | None = None


class DynamoPodSpec(Shape):
    mainContainer: DynamoContainer | None = None  # Dynamo's spelling


class DynamoLimits(Shape):
    gpu: Annotated[Whole, Field(ge=0, le=1024)] = 1


class DynamoResources(Shape):
    limits: DynamoLimits | None = None


class DynamoService(Shape):
    componentType: Label | None = None
    subComponentType: Label | None = None
    replicas: Replicas = 1
    resources: DynamoResources | None = None
    extraPodSpec: DynamoPodSpec | None = None
    envs: list[DynamoEnvVar] | None = None
    envFromSecret: Label | None = None


class DynamoContainerResources(Shape):
    limits: dict[str, Label] | None = None


class DynamoPodContainer(DynamoContainer):
    """A container of a v1beta1 component's podTemplate (the worker is the one named `main`)."""

    name: Label | None = None
    resources: DynamoContainerResources | None = None


class DynamoPodTemplateSpec(Shape):
    containers: list[DynamoPodContainer] | None = None


class DynamoPodTemplate(Shape):
    spec: DynamoPodTemplateSpec | None = None


class DynamoComponent(Shape):
    """One of v1beta1's `spec.components`."""

    name: Label | None = None
    type: Label | None = None
    replicas: Replicas = 1
    podTemplate: DynamoPodTemplate | None = None


class DynamoSpec(Shape):
    services: dict[str, DynamoService] | None = None  # v1alpha1
    components: list[DynamoComponent] | None = None  # v1beta1
    envs: list[DynamoEnvVar] | None = None  # the graph's environment: v1alpha1's spelling
    env: list[DynamoEnvVar] | None = None  # v1beta1's


class DynamoMetadata(Shape):
    name: Label | None = None


class DynamoGraph(Shape):
    metadata: DynamoMetadata | None = None
    spec: DynamoSpec | None = None


class DynamoConfigMap(Shape):
    """A ConfigMap of the same file, whose values a container's env reads by name and key."""

    metadata: DynamoMetadata | None = None
    data: dict[str, EnvValue] | None = None


class DynamoConfigMapDocument(Shape):
    """A ConfigMap's document under its kind, so that a finding names it (`ConfigMap.metadata`),
    not a field of the graph's own document."""

    ConfigMap: DynamoConfigMap
