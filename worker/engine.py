"""The worker's one `vllm.LLM`, driven request by request so it never runs dry.

Instead of `LLM.generate(chunk)`, which waits for the slowest sequence of a chunk,
the drain loop adds requests as documents arrive and calls `step()`; vLLM's
scheduler admits them into the running batch as other sequences finish.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import json
import logging
import os
import random
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from core.errors import EngineError
from core.profiles import Profile, memory_share_that_fits
from core.prompt import SummarySpec

RULES = "worker.rules:SummaryRules"  # imported by the engine's own process
# The CPU build's KV cache block, in tokens. Its default, 128, is longer than the chat prompt
# before the document (36 tokens with the default instruction), and only whole blocks are
# prefix-cached: so no prompt shared anything. At 32 (the CPU backend wants a multiple of 32)
# every prompt's first block comes from the cache (docs/performance.md, "The shared prefix").
CPU_BLOCK_TOKENS = 32

# A document's later request (a second try, a combining pass) goes before the new documents
# waiting in the engine: its chunk's message is acknowledged only once its slowest document
# is written, and a second try queued behind half a wave kept the message, and its share of
# SUMMARIZE_IN_FLIGHT, that much longer (docs/performance.md, "Stragglers"). vLLM's priority
# scheduling orders the waiting requests; it preempts no running request for it.
FOLLOW_UP = -1

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Finished:
    """One finished engine request, with the engine's own token counts."""

    request_id: str
    text: str
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int | None
    finish_reason: str


class Engine(Protocol):
    """What the drain loop needs of an engine; tests use a deterministic stand-in."""

    max_model_len: int

    def prompt_ids(self, instruction: str, text: str) -> list[int]: ...

    def token_ids(self, text: str) -> list[int]: ...

    def reading(self, texts: list[str]) -> AbstractContextManager[None]:
        """While open, the tokens of these texts (a wave's documents) may come from one call."""
        ...

    def text_of(self, token_ids: list[int]) -> str: ...

    def add(
        self,
        request_id: str,
        prompt_ids: list[int],
        spec: SummarySpec,
        loop_breaking: bool = False,
        watch_loops: bool = False,
        follow_up: bool = False,
    ) -> None:
        """Start a request: at most `spec.max_tokens`, ending after `spec.max_sentences`
        sentences, JSON valid under `spec.schema` (vLLM's structured outputs); with
        `loop_breaking`, the settings that break a loop; with `watch_loops`, ending as soon
        as it loops (core/prompt.SummarySpec.sampling); a `follow_up` (a second try, a
        combining pass) starts before the waiting requests that are not."""

    def step(self) -> list[Finished]: ...

    def unfinished(self) -> int: ...

    def abort(self, request_ids: list[str]) -> None: ...

    def close(self, timeout_s: float = 10.0, wait: bool = True) -> None: ...


def is_cpu_build() -> bool:
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


# /proc/cpuinfo: the CPU computes bfloat16 itself (x86's AVX512-BF16 or AMX, Arm's BF16).
BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")


def engine_dtype(asked: str, cpu: bool, cpuinfo: str | None = None) -> str:
    """The dtype to run the model in: `asked` (SUMMARIZE_DTYPE), except that "auto" on vLLM's
    CPU build is float32 where the CPU has no bfloat16 arithmetic and emulates it, several
    times slower (docs/performance.md, "bfloat16 on the CPU"). The model's own dtype stays "auto"."""
    if asked != "auto" or not cpu:
        return asked
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return "auto"
    return "auto" if set(cpuinfo.split()) & set(BF16_FLAGS) else "float32"


class VllmEngine:
    """`vllm.LLM` built once per worker process with a serving profile."""

    def __init__(
        self,
        model: str,
        profile: Profile,
        served_name: str,
        tensor_parallel_size: int = 1,
        statistics: bool = False,
        dtype: str = "auto",
    ):
        """`statistics`: let vLLM record its engine metrics (running and waiting requests, KV
        cache use) in prometheus_client's registry, which the worker's metrics serve.
        `dtype` "auto": the model's own, or float32 on a CPU without bfloat16 (engine_dtype)."""
        # vLLM's CPU build keeps a core for its scheduler unless told otherwise; on a machine with
        # few cores that halves the compute (measured: 1.75 against 2.93 documents/s on 2 cores).
        os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
        from vllm import LLM

        # Importing torch and vLLM made about a million objects, and vLLM's model loader and
        # memory probes run full collections that walked them all (0.45 s each here): collected
        # once and frozen, they are not walked again (worker/runtime.collector_paused).
        gc.collect()
        gc.freeze()

        cpu = is_cpu_build()
        # The CPU build's engine runs in this process: vLLM otherwise starts two more (its
        # engine core, then its model worker), each importing torch and vLLM again before the
        # model loads: twice the time to the first document, for generating 2-3 % faster on
        # long runs (docs/performance.md, "The engine in the worker's process"). A GPU keeps
        # vLLM's processes: there the engine core schedules the next step while the GPU
        # computes.
        in_process = cpu and tensor_parallel_size == 1
        if in_process:
            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        memory_share = profile.cpu_memory_utilization if cpu else profile.gpu_memory_utilization
        _check_memory(memory_share, cpu)
        self.profile = profile
        asked, dtype = dtype, engine_dtype(dtype, cpu)
        if dtype != asked:
            log.info("this CPU has no bfloat16 arithmetic: the model runs in %s", dtype)
        try:
            self.llm = LLM(
                model=model,
                served_model_name=served_name,
                max_num_seqs=profile.max_num_seqs,
                max_model_len=profile.max_model_len,
                max_num_batched_tokens=profile.max_num_batched_tokens,
                gpu_memory_utilization=memory_share,
                tensor_parallel_size=tensor_parallel_size,  # one model over several GPUs
                distributed_executor_backend="uni" if in_process else None,
                dtype=dtype,
                enable_prefix_caching=True,
                block_size=CPU_BLOCK_TOKENS if cpu else None,  # GPUs: vLLM's own (16)
                disable_log_stats=not statistics,
                logits_processors=[RULES],  # worker/rules.py
                scheduling_policy="priority",  # a follow-up goes before new documents
                enforce_eager=cpu,  # torch.compile on the CPU build costs minutes for little
                use_tqdm_on_load=log.isEnabledFor(logging.DEBUG),  # its bars: DEBUG only
                seed=0,
            )
        except (ValueError, RuntimeError, MemoryError) as exc:
            raise EngineError(_explain(exc, profile, cpu)) from exc
        if in_process:  # vLLM seeded this process's `random` with 0: its own again, from the OS
            random.seed()
        self.engine = self.llm.llm_engine
        self.tokenizer = self.llm.get_tokenizer()
        # the template's tokens around the document, per instruction: rendered once, not per prompt
        self._around = functools.lru_cache(maxsize=64)(functools.partial(around, self.tokenizer))
        self._ahead: dict[str, list[int]] = {}  # a wave's documents, tokenized at once (reading)
        self.max_model_len = self.llm.llm_engine.model_config.max_model_len

    def prompt_ids(self, instruction: str, text: str) -> list[int]:
        return chat_prompt_ids(
            self.tokenizer, instruction, text, self._around(instruction), self._ahead.get(text)
        )

    def token_ids(self, text: str) -> list[int]:
        ids = self._ahead.get(text)
        return plain_ids(self.tokenizer, text) if ids is None else ids

    @contextlib.contextmanager
    def reading(self, texts: list[str]) -> Iterator[None]:
        self._ahead = plain_ids_of(self.tokenizer, texts)
        try:
            yield
        finally:
            self._ahead = {}

    def text_of(self, token_ids: list[int]) -> str:
        return self.tokenizer.decode(token_ids, skip_special_tokens=True)

    def add(
        self,
        request_id: str,
        prompt_ids: list[int],
        spec: SummarySpec,
        loop_breaking: bool = False,
        watch_loops: bool = False,
        follow_up: bool = False,
    ) -> None:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind, StructuredOutputsParams

        kwargs = spec.sampling(loop_breaking, watch_loops)
        if spec.schema is not None:
            kwargs["structured_outputs"] = StructuredOutputsParams(json=json.loads(spec.schema))
        params = SamplingParams(output_kind=RequestOutputKind.FINAL_ONLY, **kwargs)
        prompt = TokensPrompt(prompt_token_ids=prompt_ids)
        self.engine.add_request(request_id, prompt, params, priority=FOLLOW_UP if follow_up else 0)

    def step(self) -> list[Finished]:
        finished = []
        for output in self.engine.step():
            if not output.finished:
                continue
            completion = output.outputs[0]
            finished.append(
                Finished(
                    request_id=output.request_id,
                    text=completion.text.strip(),
                    prompt_tokens=len(output.prompt_token_ids or ()),
                    completion_tokens=len(completion.token_ids),
                    cached_tokens=output.num_cached_tokens,
                    finish_reason=completion.finish_reason or "unknown",
                )
            )
        return finished

    def unfinished(self) -> int:
        return self.engine.get_num_unfinished_requests()

    def abort(self, request_ids: list[str]) -> None:
        if request_ids:
            self.engine.abort_request(request_ids)

    def close(self, timeout_s: float = 10.0, wait: bool = True) -> None:
        """Stop the engine's processes now, rather than at interpreter exit (which can hang).

        Without `wait`, for a process about to leave: they are sent SIGTERM and left to tear
        themselves down, which takes them seconds (vLLM waits for each in turn)."""
        if wait:
            self.engine.engine_core.shutdown(timeout=timeout_s)
            return
        import psutil

        for process in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if process.name().startswith(ENGINE_PROCESSES):
                    process.terminate()


ENGINE_PROCESSES = "VLLM::"  # how vLLM titles its processes (VLLM::EngineCore, VLLM::Worker)
_DOCUMENT = "\x00the document\x00"  # where the text goes; no template changes it
Template = tuple[tuple[int, ...], tuple[int, ...]]  # the chat prompt's tokens before and after it


def chat_prompt_ids(
    tokenizer,
    instruction: str,
    text: str,
    template: Template | None = None,
    text_ids: list[int] | None = None,
) -> list[int]:
    """The chat prompt: the fixed instruction first (shared, so prefix-cached), then the text.

    The template is rendered around a placeholder and the document's tokens are spliced in,
    tokenized as plain text: `<|im_end|>` or `<|im_start|>system` written in a document
    stays words, and never becomes the control tokens that would let it write its own turns.
    `text_ids`: the text's plain_ids when made already (a wave's, by plain_ids_of).
    """
    before, after = template or around(tokenizer, instruction)
    return [*before, *(plain_ids(tokenizer, text) if text_ids is None else text_ids), *after]


def around(tokenizer, instruction: str) -> Template:
    """The chat prompt's tokens before and after the document, under `instruction` (`template`
    above: the worker renders it once per instruction, not once per document)."""
    messages = [
        {"role": "system", "content": instruction},
        {"role": "user", "content": _DOCUMENT},
    ]
    rendered = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    before, after = rendered.split(_DOCUMENT)
    return (
        tuple(tokenizer.encode(before, add_special_tokens=False)),
        tuple(tokenizer.encode(after, add_special_tokens=False)),
    )


PLAIN = {"add_special_tokens": False, "split_special_tokens": True}  # see plain_ids


def plain_ids(tokenizer, text: str) -> list[int]:
    """Tokens of text a user or a file wrote: special-token markers in it are split as words."""
    return list(tokenizer(text, **PLAIN)["input_ids"])


def plain_ids_of(tokenizer, texts: list[str]) -> dict[str, list[int]]:
    """plain_ids of each text, in one call: the tokenizer's threads share the texts (half the
    time a document of one call each, docs/performance.md). Empty when one of them cannot be
    tokenized: each is then tokenized alone, and fails alone."""
    try:
        ids = tokenizer(texts, **PLAIN)["input_ids"]
    except Exception:  # noqa: BLE001 - that text's own call says what is wrong with it
        return {}
    return dict(zip(texts, ids, strict=True))


def _check_memory(share: float, cpu: bool, memory=None) -> None:
    """Refuse a memory share this machine cannot give, before vLLM fails obscurely."""
    if not cpu:
        return
    if memory is None:
        import psutil

        memory = psutil.virtual_memory()
    fits = memory_share_that_fits(share, memory.total, memory.available)
    if fits is not None:
        raise EngineError(
            f"The memory share {share:.2f} asks for {share * memory.total / 2**30:.1f} GiB of "
            f"host memory, but only {memory.available / 2**30:.1f} GiB is free: lower "
            f"SUMMARIZE_GPU_MEMORY_UTILIZATION (for example to {fits:.2f}) or "
            "SUMMARIZE_MAX_NUM_SEQS."
        )


def _explain(exc: Exception, profile: Profile, cpu: bool) -> str:
    share = "SUMMARIZE_GPU_MEMORY_UTILIZATION" + (" (a share of host memory here)" if cpu else "")
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    lowered = text.lower()
    if "kv cache" in lowered:
        hint = f"lower SUMMARIZE_MAX_MODEL_LEN, or raise {share}"
    elif "max_model_len" in lowered or "max_position_embeddings" in lowered:
        hint = "lower SUMMARIZE_MAX_MODEL_LEN to what the model supports"
    elif "memory" in lowered:
        hint = f"lower {share} or SUMMARIZE_MAX_NUM_SEQS"
    else:
        hint = "check SUMMARIZE_MODEL and the profile's knobs"
    return (
        f"The engine could not start with profile {profile.name!r} "
        f"(max_num_seqs={profile.max_num_seqs}, max_model_len={profile.max_model_len}): "
        f"{text}. To fix it, {hint}."
    )
