"""A latency and throughput model of a P/D deployment, per role: what `recipectl plan --sla` ranks
configurations by, and what `recipectl calibrate` fits to a deployment's own measurements.

Pure arithmetic, no I/O. The pieces, each a few coefficients:

- prefill: a step of ``n`` tokens takes ``overhead_s + per_token_s * n`` on one endpoint (the
  scheduler step, tokenisation and the HTTP hop are the overhead; the forward pass is linear in
  tokens at the lengths a P/D prefill sees). A prompt takes one step, or more: where it is cut by
  the step's token budget, and, for a hybrid model with prefix caching on, where vLLM ends a step
  at the prompt's last block boundary (``prompt_chunk``);
- decode: one step (the inter-token latency every resident request sees) at ``c`` requests of mean
  context ``L`` on one endpoint takes ``step_s + per_seq_s * c + per_ctx_token_s * c * L`` (the
  weights read once per step; per request its GDN state and sampling; per resident token its KV);
- transfer: a request's KV (``kv_bytes_per_token`` x prompt tokens) plus its GDN state (one
  request's conv + SSM state, whatever the prompt length) per rank, ``latency_s + bytes /
  bytes_per_s``, the router's hand-off included in the latency;
- the closed loop: ``c`` users of one ISL and OSL move in waves (``predict``): a wave's prompts
  are prefilled in batches of a step's tokens, its states cross one after another, and its
  requests decode together, so a request waits for its wave at prefill and at the link;
- the capacity planner caps it: a decode endpoint holds no more requests than its cache does.

TTFT = the wave's prefill (where each role has cores of its own, the prompt's own steps and part of
the rest) + the wave's transfers + decode's first step. Without measurements the
coefficients come from the hardware's published peak compute and memory bandwidth
(``analytic_model``), and every prediction says it is uncalibrated.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict, Field


class WaveSchedule(NamedTuple):
    """How one prefill endpoint works through a wave of alike prompts that arrived together: its
    steps, and where each prompt's last step ends, as sums over the prompts (a step count and the
    tokens of every step up to it), so that the mean time a prompt waits for its own last step is
    ``PrefillCoeffs.done_s`` of them, whatever the coefficients."""

    steps: int
    prompts: int
    done_steps: int  # the sum over the prompts of the step that finished each
    done_tokens: int  # the sum over the prompts of the tokens of the steps up to that one


class PrefillCoeffs(BaseModel):
    model_config = ConfigDict(frozen=True, allow_inf_nan=False)  # a calibration file's: finite

    overhead_s: float = Field(ge=0)
    per_token_s: float = Field(ge=0)

    def time_s(self, tokens: int, steps: int = 1) -> float:
        return self.overhead_s * steps + self.per_token_s * tokens

    def done_s(self, wave: WaveSchedule) -> float:
        """The mean time a prompt of ``wave`` waits for its own last step."""
        return (self.overhead_s * wave.done_steps + self.per_token_s * wave.done_tokens) / wave.prompts


class DecodeCoeffs(BaseModel):
    model_config = ConfigDict(frozen=True, allow_inf_nan=False)  # a calibration file's: finite

    step_s: float = Field(ge=0)
    per_seq_s: float = Field(ge=0)
    per_ctx_token_s: float = Field(ge=0)

    def itl_s(self, concurrency: float, context: float) -> float:
        return self.step_s + self.per_seq_s * concurrency + self.per_ctx_token_s * concurrency * context


class TransferCoeffs(BaseModel):
    model_config = ConfigDict(frozen=True, allow_inf_nan=False)  # a calibration file's: finite

    latency_s: float = Field(ge=0)
    bytes_per_s: float = Field(gt=0)

    def time_s(self, nbytes: float) -> float:
        return self.latency_s + nbytes / self.bytes_per_s


class PerfModel(BaseModel):
    """One deployment's coefficients per endpoint, and whether they were measured."""

    model_config = ConfigDict(frozen=True)

    prefill: PrefillCoeffs
    decode: DecodeCoeffs
    transfer: TransferCoeffs
    calibrated: bool
    # the most users a decode endpoint held in the calibration's points: beyond them a prediction
    # carries the fit past what was measured (None: analytic, or a calibration that did not say)
    measured_users: int | None = Field(default=None, ge=1)


class PromptSplit(BaseModel):
    """Where vLLM ends a hybrid model's prefill chunk besides the token budget, with prefix caching
    on (Mamba cache mode "align": the GDN state is cached at block boundaries only). Each flag is
    an engine fact's, set by the release (prompt_split in recipe_plan.py). Not modelled, each off
    by default: speculative decoding on the prefill role, --long-prefill-token-threshold, partial
    prefix-cache hits (scripts/check-prefill-split.py, which holds them fixed, says how each moves
    a chunk)."""

    model_config = ConfigDict(frozen=True)

    block: int = Field(ge=1)  # tokens; a step ends at the prompt's last boundary of these
    # hybrid-prefill-split-whole-blocks (0.32+): that boundary is the last before the prompt's
    # last token, so a prompt of whole blocks is split too; before, it is prefilled in one step
    whole_blocks: bool = True
    # hybrid-prefill-cuts-aligned-to-prompt-end (0.27+): a chunk the budget cuts ends on a block
    # anywhere in the prompt; before, only a cut before the last boundary is moved back to one
    cuts_aligned_to_end: bool = True
    # hybrid-prefill-no-split-flashinfer-gdn (0.33+, FlashInfer's GDN prefill): a prompt's last
    # chunk that starts on a block is not stopped at the last boundary where the kernel can write
    # that state inside the step, the boundary a whole number of its checkpoint alignment (64
    # tokens, hybrid-block-align-flashinfer-gdn-64) past the chunk's start; a chunk the budget
    # cuts is still aligned
    last_chunk_whole: bool = False
    checkpoint_alignment: int = Field(default=1, ge=1)


class RoleShape(BaseModel):
    """What the model needs to know of a role's layout, from the capacity planner."""

    model_config = ConfigDict(frozen=True)

    endpoints: int = Field(ge=1)
    gpus_per_endpoint: int = Field(ge=1)
    tp: int = Field(default=1, ge=1)
    kv_bytes_per_token: int = Field(ge=0)  # per rank
    gdn_state_bytes_per_request: int = Field(ge=0)  # per rank
    max_concurrency_per_endpoint: int | None = None  # decode: what its cache keeps resident
    # prefill: max_num_batched_tokens (None: a wave in one step)
    tokens_per_step: int | None = Field(default=None, ge=1)
    # prefill: where a hybrid prompt's chunks end besides the budget; None where nothing splits
    # them (not hybrid, or prefix caching off)
    split: PromptSplit | None = None
    # GPUs of this role's own, no server of the other role on them: decode then runs while prefill
    # does (predict: the pipeline). False on a GPU both roles share, and on the CPU platform (the
    # wave was measured there)
    own_gpus: bool = False
    # CPU platform: no core of this role's servers is one of the other role's (CPU001 asks it),
    # so decode runs while prefill does, and a prompt's first token need not wait for the wave's
    # last prefill step (predict, OWN_CORES_WAVE_WAIT); the users still go in waves, the next when
    # the last has finished
    own_cores: bool = False


class Prediction(BaseModel):
    model_config = ConfigDict(frozen=True)

    concurrency: int
    ttft_s: float
    itl_s: float
    prefill_s: float
    queue_s: float  # waiting for the rest of the wave's prompts at its prefill endpoint
    transfer_s: float
    transfer_wait_s: float  # waiting for the link: decode pulls the wave's states one after another
    transfer_sources: int  # prefill endpoints one decode endpoint pulls a wave from
    # where each role has cores of its own: how long, on average, the wave's prefill goes on after
    # a prompt's own last step (0 elsewhere), of which TTFT counts OWN_CORES_WAVE_WAIT
    wave_after_own_s: float = 0.0
    # TTFT were those sources' transfers all in parallel and each prompt's first token after its
    # own last step (ttft_s where one source and the roles share a device)
    ttft_low_s: float
    ttft_high_s: float  # TTFT were the transfers one after another and the wave's prefill waited for
    first_step_s: float
    prefill_utilisation: float
    decode_residents: float  # per decode endpoint: the requests of a wave, decoding together
    request_rate: float
    output_tps: float
    total_tps: float
    tps_per_gpu: float
    tps_per_user: float
    calibrated: bool


def prompt_chunk(done: int, isl: int, left: int, shape: RoleShape) -> int:
    """The tokens of a prompt of ``isl`` tokens, ``done`` of them prefilled, that one prefill step
    with ``left`` tokens of its budget left takes: vLLM's scheduler (Scheduler.
    _mamba_block_aligned_split, engine fact hybrid-prefill-split-at-last-block). Where prompts are
    split (``shape.split``) a step ends at the prompt's last block boundary (the GDN state there is
    cached), and a chunk the budget cuts ends on a block boundary; so a prompt longer than a block
    is prefilled in (at least) two steps, and a prompt sent during the first rides in the second,
    which it delays.
    Measured on the CPU engine: of two 160-token prompts sent 85 ms apart to one prefill endpoint,
    the first took 0.57-0.63 s where one alone takes 0.35-0.40 s (docs/sla-planner.md)."""
    budget = shape.tokens_per_step or isl
    end = min(isl, done + left)
    split = shape.split
    if split is None:
        return end - done
    block = split.block
    last = (isl - 1 if split.whole_blocks else isl) // block * block
    if split.last_chunk_whole and end == isl and done % block == 0 and (last - done) % split.checkpoint_alignment == 0:
        last = 0  # the kernel caches the boundary's state inside the step
    if end < isl and (split.cuts_aligned_to_end or end < last):
        aligned = end // block * block
        if aligned > done or block <= budget:  # else a block wider than a step: sub-block chunks
            end = aligned
    if done < last < end:
        end = last
    return max(end - done, 0)


def wave_prefill_steps(requests: int, isl: int, shape: RoleShape) -> int:
    """The steps one prefill endpoint takes for ``requests`` prompts of ``isl`` tokens that arrived
    together: each step fills its budget (``tokens_per_step``) from the prompts in order, each
    prompt its next chunk (``prompt_chunk``). Where nothing splits them the budget alone cuts
    them: the tokens over the budget, rounded up."""
    budget = shape.tokens_per_step or requests * isl
    if shape.split is None:
        return math.ceil(requests * isl / budget)
    return wave_schedule(requests, isl, shape).steps


@lru_cache(maxsize=4096)
def wave_schedule(requests: int, isl: int, shape: RoleShape) -> WaveSchedule:
    """``fill_schedule`` with ``prompt_chunk``, worked out on runs of prompts instead of one prompt
    at a time (plan --sla asks for waves of thousands of prompts, at many concurrencies; each
    schedule is cached too).

    The prompts are alike and served in order, so those at the same point of their prompt form a
    run, and a run's prompts take the same chunk while the step has room for it (``prompt_chunk``
    with more left than a prompt's next stop needs gives that stop); what the step has left after
    them goes, as ``fill_schedule`` gives it, to the next prompts one at a time until one takes
    nothing (two at most: a budget cut ends on a block). Once the started prompts repeat a
    pattern, the waiting ones are taken a pattern at a time (``_skip_repeats``).
    tests/test_plan_perf.py holds this to fill_schedule on random waves."""
    budget = shape.tokens_per_step or requests * isl
    runs: list[tuple[int, int]] = [(0, requests)]  # (tokens done, prompts), in order; unfinished only
    at = _Progress()
    seen: dict[tuple, _Progress] = {}
    while runs:
        left = budget
        after: list[tuple[int, int]] = []
        for done, count in runs:
            if left > 0:
                stop = prompt_chunk(done, isl, isl - done, shape)
                whole = min(count, left // stop)
                if whole:
                    after.append((done + stop, whole))
                    left -= whole * stop
                    count -= whole
                while count and left > 0:
                    chunk = prompt_chunk(done, isl, left, shape)
                    if not chunk:
                        break
                    after.append((done + chunk, 1))
                    left -= chunk
                    count -= 1
            if count:
                after.append((done, count))
        at = at.step(budget - left, sum(count for done, count in after if done >= isl))
        runs = _merged(after, isl)
        at, runs = _skip_repeats(at, runs, seen)
    return WaveSchedule(at.steps, requests, at.done_steps, at.done_tokens)


class _Progress(NamedTuple):
    """A wave's schedule so far (wave_schedule): steps, tokens, prompts finished, their sums."""

    steps: int = 0
    tokens: int = 0
    finished: int = 0
    done_steps: int = 0
    done_tokens: int = 0
    waiting: int = 0  # prompts not yet started, where _skip_repeats records it

    def step(self, tokens: int, finished: int) -> _Progress:
        steps, total = self.steps + 1, self.tokens + tokens
        return _Progress(
            steps,
            total,
            self.finished + finished,
            self.done_steps + finished * steps,
            self.done_tokens + finished * total,
        )


def _merged(runs: list[tuple[int, int]], isl: int) -> list[tuple[int, int]]:
    """``runs`` less the finished prompts, neighbours at the same point as one run."""
    out: list[tuple[int, int]] = []
    for done, count in runs:
        if done >= isl:
            continue
        if out and out[-1][0] == done:
            out[-1] = (done, out[-1][1] + count)
        else:
            out.append((done, count))
    return out


def _skip_repeats(
    at: _Progress, runs: list[tuple[int, int]], seen: dict[tuple, _Progress]
) -> tuple[_Progress, list[tuple[int, int]]]:
    """Where the started prompts stand as they stood some steps ago, with fewer prompts waiting,
    the steps between repeat for as long as the waiting prompts outlast them: skip ahead by whole
    repeats, leaving more waiting prompts than one repeat takes (so none is cut short). Each
    repeat finishes the prompts the last one did, its steps and tokens later by the repeat's."""
    waiting = runs[-1][1] if runs and runs[-1][0] == 0 else 0
    started = tuple(runs[:-1] if waiting else runs)
    before = seen.get(started)
    at = at._replace(waiting=waiting)
    seen[started] = at
    if before is None or waiting >= before.waiting:
        return at, runs
    taken = before.waiting - waiting
    repeats = (waiting - taken - 1) // taken
    if repeats <= 0:
        return at, runs
    seen.clear()
    period, tokens = at.steps - before.steps, at.tokens - before.tokens
    finished = at.finished - before.finished
    # repeat j (1..repeats) finishes the last repeat's prompts j periods later: sum_j j = r(r+1)/2
    later = repeats * (repeats + 1) // 2
    skipped = _Progress(
        at.steps + repeats * period,
        at.tokens + repeats * tokens,
        at.finished + repeats * finished,
        at.done_steps + repeats * (at.done_steps - before.done_steps) + later * finished * period,
        at.done_tokens + repeats * (at.done_tokens - before.done_tokens) + later * finished * tokens,
    )
    return skipped, [*started, (0, waiting - repeats * taken)]


def fill_steps(requests: int, isl: int, budget: int, chunk: Callable[[int, int], int]) -> int | None:
    """The steps of ``fill_schedule``; None where a step schedules nothing.
    scripts/check-prefill-split.py fills steps with each vLLM release's own chunk function."""
    schedule = fill_schedule(requests, isl, budget, chunk)
    return schedule.steps if schedule else None


def fill_schedule(requests: int, isl: int, budget: int, chunk: Callable[[int, int], int]) -> WaveSchedule | None:
    """How one prefill endpoint works through ``requests`` prompts of ``isl`` tokens that arrived
    together, each step filling its ``budget`` from the prompts in order (vLLM's scheduler: the
    prompts it has started, then those waiting, in the order they came), each prompt taking
    ``chunk(done, left)`` of the ``left`` tokens of the step. None where a step schedules nothing."""
    done = [0] * requests
    steps = tokens = done_steps = done_tokens = 0
    while any(d < isl for d in done):
        steps += 1
        left = budget
        finished = 0
        for i, d in enumerate(done):
            if d >= isl or left <= 0:
                continue
            c = chunk(d, left)
            done[i] += c
            left -= c
            finished += done[i] >= isl
        if left == budget:
            return None
        tokens += budget - left
        done_steps += finished * steps
        done_tokens += finished * tokens
    return WaveSchedule(steps, requests, done_steps, done_tokens)


def wave_splits(prefill: RoleShape, isl: int, concurrency: int) -> bool:
    """Whether ``concurrency`` users' wave takes a prefill endpoint more steps than one prompt does
    (on GPUs of each role's own its users then drift apart: predict's pipeline). Once true, true
    for every larger concurrency."""
    per_prefill = math.ceil(concurrency / prefill.endpoints)
    return wave_prefill_steps(per_prefill, isl, prefill) != wave_prefill_steps(1, isl, prefill)


def transfer_bytes(shape: RoleShape, isl: int) -> int:
    """Bytes one prefill rank sends decode for one request: its prompt's KV and its GDN state."""
    return shape.kv_bytes_per_token * isl + shape.gdn_state_bytes_per_request


# Where several prefill endpoints feed one decode endpoint, how much of what parallel links would
# save their transfers save: the wave's transfers take between one after another (a cost at the
# sink, such as its NIC's bandwidth, takes all of them: no saving) and each source's in parallel
# (a cost at each end, per request: the whole saving). Which it is depends on where a transfer
# spends its time, which a calibration of one prefill endpoint does not measure; the midpoint,
# and the range beside it. Measured on one H200 (docs/sla-planner.md): two prefill endpoints moved
# a wave's states into one decode endpoint in 62-96% of the serial time, where all in parallel is
# 50-67%; on 8 points measured after it was chosen, 7 TTFTs lay inside the range.
TRANSFER_OVERLAP = 0.5

# Where each role has cores of its own (the CPU platform), how much of the wave's prefill steps
# after a prompt's own last step the prompt still waits for: none were decode to take it at once
# (its first token after its own step), all were the wave waited for (as where the roles share a
# device). On the CPU with prefill steps of 256 tokens, waves of 2-4 steps measured in between and
# host by host apart (docs/sla-planner.md, "Prompts longer than a prefill step, on the CPU"): on a
# slow host the wave's prefill predicted them 9-35% long and their own steps within 23%, on a fast
# one (held out) the wave's within 8% and their own steps 17-23% short. The midpoint, and the
# range beside it.
OWN_CORES_WAVE_WAIT = 0.5


def predict(
    model: PerfModel,
    prefill: RoleShape,
    decode: RoleShape,
    *,
    isl: int,
    osl: int,
    concurrency: int,
) -> Prediction:
    """The steady state of ``concurrency`` users of the same ISL and OSL, each sending its next
    request when the last one finished (vllm bench serve's --max-concurrency), on
    ``prefill.endpoints`` x ``decode.endpoints``.

    Such users move in waves. They start together; each prefill endpoint batches the prompts it
    was sent (``tokens_per_step`` at a time, a step's overhead each); decode pulls the wave's KV
    and GDN state one request after another, and starts the requests it was sent together once
    the last has arrived (on H200 four users at 2,048 tokens got their first tokens within 1 ms of
    each other, 0.97 s after they were sent, where one user's parts add up to 0.29 s); they decode
    together and finish together, and the next wave starts. So within a wave prefill, transfer and
    decode do not overlap, and a request waits for the others of its wave at prefill and at the
    link. Where each role has cores of its own (``own_cores``, the CPU platform) a prompt of a wave
    of several prefill steps waits for its own last step (``wave_schedule``) and part of the steps
    after it (OWN_CORES_WAVE_WAIT), and the next wave starts when the wave's last user has
    finished. Where
    each role has GPUs of its own: ``_pipelined``. Several prefill endpoints feeding one decode
    endpoint: TRANSFER_OVERLAP."""
    if concurrency < 1:
        raise ValueError(f"concurrency {concurrency}: a closed loop has at least one user")
    per_prefill = math.ceil(concurrency / prefill.endpoints)  # the router spreads a wave evenly
    per_decode = math.ceil(concurrency / decode.endpoints)
    one_steps = wave_prefill_steps(1, isl, prefill)
    wave_steps = wave_prefill_steps(per_prefill, isl, prefill)
    service = model.prefill.time_s(isl, one_steps)
    batch = model.prefill.time_s(per_prefill * isl, wave_steps)
    transfer = model.transfer.time_s(transfer_bytes(prefill, isl))
    first = model.decode.itl_s(per_decode, isl)
    itl = model.decode.itl_s(per_decode, isl + osl / 2)  # a resident request's mean context over its decode
    decoding = max(0, osl - 1) * itl
    sources = min(prefill.endpoints, per_decode)  # the router spreads a wave over the prefill endpoints
    serial = per_decode * transfer
    parallel = math.ceil(per_decode / sources) * transfer
    if prefill.own_gpus and decode.own_gpus:
        ttft, transfer_wait = _pipelined(
            model,
            per_prefill=per_prefill,
            per_decode=per_decode,
            service=service,
            batch=batch,
            transfer=transfer,
            first=first,
            decoding=decoding,
            one_wave=wave_steps == one_steps,
        )
        sources, low, high = 1, ttft, ttft  # the latency overlaps whatever the sources: no range
        queue = max(0.0, ttft - service - transfer - transfer_wait - first)
        cycle = ttft + decoding
        after_own = 0.0
    else:
        transfers = serial - TRANSFER_OVERLAP * (serial - parallel)
        # a prompt waits for the wave's prefill where the roles share a device; where each has
        # cores of its own, for its own last step and OWN_CORES_WAVE_WAIT of the wave's steps
        # after it; the wave's next starts once its last user has finished either way
        own = batch
        if prefill.own_cores and decode.own_cores:
            own = model.prefill.done_s(wave_schedule(per_prefill, isl, prefill))
        after_own = batch - own
        waited = own + OWN_CORES_WAVE_WAIT * after_own
        ttft = waited + transfers + first
        cycle = batch + transfers + first + decoding
        transfer_wait = transfers - transfer
        low, high = own + parallel + first, batch + serial + first
        queue = max(0.0, waited - service)
    rate = concurrency / cycle
    gpus = prefill.endpoints * prefill.gpus_per_endpoint + decode.endpoints * decode.gpus_per_endpoint
    return Prediction(
        concurrency=concurrency,
        ttft_s=ttft,
        itl_s=itl,
        prefill_s=service,
        queue_s=queue,
        transfer_s=transfer,
        transfer_wait_s=transfer_wait,
        transfer_sources=sources,
        wave_after_own_s=after_own,
        ttft_low_s=low,
        ttft_high_s=high,
        first_step_s=first,
        prefill_utilisation=min(batch / cycle, 1.0),
        decode_residents=per_decode,
        request_rate=rate,
        output_tps=rate * osl,
        total_tps=rate * (isl + osl),
        tps_per_gpu=rate * (isl + osl) / gpus,
        tps_per_user=1 / itl if itl > 0 else math.inf,
        calibrated=model.calibrated,
    )


def _pipelined(
    model: PerfModel,
    *,
    per_prefill: int,
    per_decode: int,
    service: float,
    batch: float,
    transfer: float,
    first: float,
    decoding: float,
    one_wave: bool,
) -> tuple[float, float]:
    """TTFT, and the part of it spent waiting for the link, where each role has GPUs of its own
    (predict). Decode then starts a request as soon as its state has arrived, while prefill goes
    on (on two H200s, four users at 8,192 tokens got their first tokens 0.26, 0.68, 0.69 and 0.89 s
    after they were sent together), and a transfer's latency is paid by all of a wave's requests
    at once, only their bytes one after another (on two H200s over NVLink a request's 43-295 MB
    arrived in 11-21 ms whatever its size, and 16 users at 512 tokens waited 223 ms, where their
    prefill step alone took 216).

    - A wave whose prompts the prefill endpoint takes in the steps one prompt takes (they fit its
      token budget) ends together and stays a wave: TTFT = the wave's prefill + the transfers +
      decode's first step.
    - A wave of more steps splits: the prompts of its first step decode while the next is
      prefilled, finish earlier, and come back apart; the users drift into a pipeline, a closed
      loop of the prefill endpoint's users, each away for its transfer, first step and decoding,
      and queueing at the prefill endpoint for one another's prompts (`_queued`): TTFT = that wait
      and its own prefill, transfer and first step, and at least what the endpoint's batches
      leave of a user's cycle (the bottleneck bound: a cycle is at least the wave's prefill); each
      request moves its own state, and what it waits for is prefill."""
    latency = model.transfer.latency_s
    transfers = latency + per_decode * (transfer - latency)  # the latency at once, the bytes in turn
    if one_wave:
        return batch + transfers + first, transfers - transfer
    away = transfer + first + decoding
    return max(_queued(per_prefill, service, away) + transfer + first, batch + transfers + first - decoding), 0.0


def _queued(users: int, service: float, away: float) -> float:
    """A prompt's time at its prefill endpoint, its wait included, where ``users`` users each send
    one, wait ``service`` for it alone and are ``away`` until they send the next: mean-value
    analysis of that closed loop (Schweitzer's approximation), each queued prompt's wait halved,
    as a queue of fixed service times waits half of one of random ones (Pollaczek-Khinchine). On
    two H200s, 7 prompts' waves that split: TTFT -46% to +10%, median 7% (the exponential's full
    wait: +3% to +54%, median 32%).

    The fixed point Q = n R / (R + Z), R = s (1 + a Q), a = (n - 1) / 2n, is the positive root of
    s a Q^2 + (s + Z - n s a) Q - n s = 0."""
    if users <= 1 or service <= 0:
        return service
    a = 0.5 * (users - 1) / users
    b = service + away - users * service * a
    queue = (-b + math.sqrt(b * b + 4 * service * a * users * service)) / (2 * service * a)
    return service * (1 + a * queue)


# ----- other tensor-parallel sizes -------------------------------------------------------------
# What one doubling of TP buys a role's compute: twice the devices, less the all-reduce each layer
# adds (a round guess, as the analytic rows' efficiencies are; nothing here measured it).
TP_EFFICIENCY_PER_DOUBLING = 0.9


def tp_speedup(tp: int, reference_tp: int) -> float:
    """How much faster a role's forward pass runs at ``tp`` than at ``reference_tp``: the ratio of
    devices times TP_EFFICIENCY_PER_DOUBLING per doubling (1.8x at twice the TP, 3.24x at four
    times; below the reference, the inverse)."""
    ratio = tp / reference_tp
    return ratio * TP_EFFICIENCY_PER_DOUBLING ** math.log2(ratio)


def at_tp(model: PerfModel, reference: tuple[RoleShape, RoleShape], shapes: tuple[RoleShape, RoleShape]) -> PerfModel:
    """``model``, whose coefficients describe the (prefill, decode) shapes ``reference``, moved to
    the TPs of ``shapes``: prefill's cost per token and decode's step and per-request cost divided
    by tp_speedup; decode's cost per resident token follows the KV bytes a rank holds (the capacity
    planner's, which stop shrinking once TP passes the KV heads), over the same efficiency; the
    fixed prefill overhead and the transfer stay (each rank moves its own shard in parallel)."""
    (ref_pre, ref_dec), (pre, dec) = reference, shapes
    if (pre.tp, dec.tp) == (ref_pre.tp, ref_dec.tp):
        return model
    p_speed, d_speed = tp_speedup(pre.tp, ref_pre.tp), tp_speedup(dec.tp, ref_dec.tp)
    kv_ratio = (
        dec.kv_bytes_per_token / ref_dec.kv_bytes_per_token if ref_dec.kv_bytes_per_token else ref_dec.tp / dec.tp
    )
    comm = TP_EFFICIENCY_PER_DOUBLING ** math.log2(dec.tp / ref_dec.tp)
    return model.model_copy(
        update={
            "prefill": PrefillCoeffs(
                overhead_s=model.prefill.overhead_s, per_token_s=model.prefill.per_token_s / p_speed
            ),
            "decode": DecodeCoeffs(
                step_s=model.decode.step_s / d_speed,
                per_seq_s=model.decode.per_seq_s / d_speed,
                per_ctx_token_s=model.decode.per_ctx_token_s * kv_ratio / comm,
            ),
        }
    )


# ----- fitting ---------------------------------------------------------------------------------
def nonneg_least_squares(rows: Sequence[Sequence[float]], y: Sequence[float]) -> list[float]:
    """Least squares with every coefficient >= 0, exactly: every subset of the columns is solved and
    the non-negative solution with the smallest residual kept (the models here have at most three
    columns, so eight solves). A column the points cannot tell from another (every point at
    concurrency 1, say) is left out where that fits as well; a coefficient left out is 0."""
    n = len(rows[0])
    best: tuple[float, int, list[float]] | None = None
    for mask in range(1, 1 << n):
        cols = [j for j in range(n) if mask >> j & 1]
        coef = _solve([[r[j] for j in cols] for r in rows], y)
        if coef is None or min(coef) < 0:
            continue
        full = [0.0] * n
        for j, c in zip(cols, coef, strict=True):
            full[j] = c
        resid = sum((t - sum(c * x for c, x in zip(full, r, strict=True))) ** 2 for r, t in zip(rows, y, strict=True))
        key = (resid * (1 + 1e-9), -len(cols))  # an equal fit with more columns is no better: prefer fewer
        if best is None or key < best[:2]:
            best = (key[0], key[1], full)
    return best[2] if best else [0.0] * n


def _solve(rows: Sequence[Sequence[float]], y: Sequence[float]) -> list[float] | None:
    """The normal equations by Gaussian elimination with partial pivoting; None if singular.
    Columns are scaled to unit norm first: seconds per token and per request differ by 10^4."""
    k = len(rows[0])
    scale = [math.sqrt(sum(r[j] ** 2 for r in rows)) or 1.0 for j in range(k)]
    a = [
        [sum(r[i] * r[j] for r in rows) / (scale[i] * scale[j]) for j in range(k)]
        + [sum(r[i] * t for r, t in zip(rows, y, strict=True)) / scale[i]]
        for i in range(k)
    ]
    for col in range(k):
        piv = max(range(col, k), key=lambda i: abs(a[i][col]))
        if abs(a[piv][col]) < 1e-12:
            return None
        a[col], a[piv] = a[piv], a[col]
        for i in range(k):
            if i != col:
                f = a[i][col] / a[col][col]
                a[i] = [x - f * z for x, z in zip(a[i], a[col], strict=True)]
    return [a[i][k] / a[i][i] / scale[i] for i in range(k)]


class PrefillPoint(BaseModel):
    """One prompt's time on a prefill endpoint alone (seconds), at concurrency 1, in ``steps``
    prefill steps (``wave_prefill_steps``)."""

    isl: int
    seconds: float
    steps: int = 1


class DecodePoint(BaseModel):
    """The median inter-token latency (seconds) at ``concurrency`` requests of mean context."""

    concurrency: float
    context: float
    itl_s: float


class TransferPoint(BaseModel):
    """What TTFT through the router adds to the prefill alone and decode's first step (seconds),
    for a request of ``nbytes`` transferred."""

    nbytes: int
    seconds: float


def fit_prefill(points: Sequence[PrefillPoint]) -> PrefillCoeffs:
    a, b = nonneg_least_squares([[float(p.steps), p.isl] for p in points], [p.seconds for p in points])
    return PrefillCoeffs(overhead_s=a, per_token_s=b)


def fit_decode(points: Sequence[DecodePoint]) -> DecodeCoeffs:
    a, b, c = nonneg_least_squares(
        [[1.0, p.concurrency, p.concurrency * p.context] for p in points], [p.itl_s for p in points]
    )
    return DecodeCoeffs(step_s=a, per_seq_s=b, per_ctx_token_s=c)


def fit_transfer(points: Sequence[TransferPoint], default: TransferCoeffs) -> TransferCoeffs:
    """Latency and bandwidth; where the points do not pin the bandwidth (every request moved about
    as many bytes, or the time did not grow with them) the default bandwidth stays."""
    lat, per_byte = nonneg_least_squares([[1.0, p.nbytes] for p in points], [max(0.0, p.seconds) for p in points])
    sizes = {p.nbytes for p in points}
    if per_byte <= 0 or len(sizes) < 2:
        lat = max(0.0, sum(max(0.0, p.seconds) - p.nbytes / default.bytes_per_s for p in points) / len(points))
        return TransferCoeffs(latency_s=lat, bytes_per_s=default.bytes_per_s)
    return TransferCoeffs(latency_s=lat, bytes_per_s=1 / per_byte)


# ----- analytic defaults -----------------------------------------------------------------------
class DeviceSpeed(BaseModel):
    """Published peak figures of one device (dense bf16 FLOP/s, memory bytes/s), the share of them
    an engine reaches, the fixed costs of a step, and the prefill -> decode link."""

    model_config = ConfigDict(frozen=True)

    flops: float
    mem_bytes_per_s: float
    compute_efficiency: float
    memory_efficiency: float
    prefill_overhead_s: float
    decode_step_overhead_s: float
    link_bytes_per_s: float
    link_latency_s: float


# NVIDIA's data sheets (dense BF16 Tensor Core, HBM bandwidth); a P/D link of 400 Gb/s RDMA per
# GPU. The CPU row is one core of a server CPU (AVX-512, ~10 GB/s of a memory channel's share)
# and UCX over TCP on loopback. Efficiencies and fixed costs are round guesses: these are the
# numbers a calibration replaces, and the output says so.
def _gpu(flops: float, mem_bytes_per_s: float) -> DeviceSpeed:
    """A GPU row: its data-sheet peaks, with the round guesses every GPU shares."""
    return DeviceSpeed(
        flops=flops,
        mem_bytes_per_s=mem_bytes_per_s,
        compute_efficiency=0.4,
        memory_efficiency=0.6,
        prefill_overhead_s=0.01,
        decode_step_overhead_s=0.003,
        link_bytes_per_s=50e9,
        link_latency_s=0.002,
    )


ANALYTIC_DEVICES: dict[str, DeviceSpeed] = {
    "GB200": _gpu(flops=2.5e15, mem_bytes_per_s=8e12),
    "B200": _gpu(flops=2.25e15, mem_bytes_per_s=8e12),
    "H200": _gpu(flops=989e12, mem_bytes_per_s=4.8e12),
    "H100": _gpu(flops=989e12, mem_bytes_per_s=3.35e12),
    "CPU": DeviceSpeed(
        flops=1e11,
        mem_bytes_per_s=10e9,
        compute_efficiency=0.2,
        memory_efficiency=0.5,
        prefill_overhead_s=0.02,
        decode_step_overhead_s=0.01,
        link_bytes_per_s=1e9,
        link_latency_s=0.01,
    ),
}


def analytic_model(
    device: str,
    *,
    active_params: int,
    weight_bytes_per_gpu: int,
    kv_bytes_per_token: int,
    gdn_state_bytes_per_request: int,
    tp: int = 1,
) -> PerfModel:
    """Coefficients from the device's peak figures: prefill compute-bound (2 FLOP per active
    parameter per token), a decode step memory-bound (the weights once, then each request's GDN
    state and each resident token's KV)."""
    d = ANALYTIC_DEVICES[device]
    flops = d.flops * d.compute_efficiency * tp
    bw = d.mem_bytes_per_s * d.memory_efficiency
    per_token = 2 * active_params / flops
    return PerfModel(
        prefill=PrefillCoeffs(overhead_s=d.prefill_overhead_s, per_token_s=per_token),
        decode=DecodeCoeffs(
            step_s=d.decode_step_overhead_s + weight_bytes_per_gpu / bw,
            per_seq_s=per_token + gdn_state_bytes_per_request / bw,
            per_ctx_token_s=kv_bytes_per_token / bw,
        ),
        transfer=TransferCoeffs(latency_s=d.link_latency_s, bytes_per_s=d.link_bytes_per_s),
        calibrated=False,
    )
