"""Serving profiles: named sets of the engine knobs that trade throughput for latency or context.

A profile is plain data so that `summarize submit` can read it without importing vLLM.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace


@dataclass(frozen=True)
class Profile:
    """How the engine is sized: concurrency, context, memory, and how long a summary may be."""

    name: str
    max_num_seqs: int  # sequences the engine runs at once
    max_model_len: int  # longest prompt + summary admitted, in tokens
    max_num_batched_tokens: int  # tokens the scheduler packs into one step
    gpu_memory_utilization: float  # share of accelerator memory for weights + KV cache
    cpu_memory_utilization: float  # the same share on the CPU build, where it is host memory
    max_tokens: int  # default summary length, in tokens
    use_when: str

    def knobs(self) -> dict[str, object]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "use_when"}

    def problems(self) -> list[str]:
        """Knob combinations the engine cannot run, each with the variable to change."""
        found = []
        if self.max_tokens + MIN_PROMPT_TOKENS > self.max_model_len:
            found.append(
                f"a summary of {self.max_tokens} tokens leaves no room for the document in a "
                f"{self.max_model_len}-token context: lower SUMMARIZE_MAX_TOKENS or raise "
                "SUMMARIZE_MAX_MODEL_LEN"
            )
        if self.max_num_batched_tokens < self.max_num_seqs:
            found.append(
                f"max_num_batched_tokens={self.max_num_batched_tokens} is below "
                f"max_num_seqs={self.max_num_seqs}: raise SUMMARIZE_MAX_NUM_BATCHED_TOKENS or "
                "lower SUMMARIZE_MAX_NUM_SEQS"
            )
        return found


PROFILES: dict[str, Profile] = {
    profile.name: profile
    for profile in (
        Profile(
            name="throughput",
            max_num_seqs=256,
            max_model_len=2048,
            max_num_batched_tokens=8192,
            gpu_memory_utilization=0.90,
            cpu_memory_utilization=0.40,
            max_tokens=128,
            use_when="nightly and bulk batches: most documents per second, results in bulk",
        ),
        Profile(
            name="latency",
            max_num_seqs=16,
            max_model_len=2048,
            max_num_batched_tokens=2048,
            gpu_memory_utilization=0.90,
            cpu_memory_utilization=0.25,
            max_tokens=128,
            use_when="small batches someone is waiting for: each document finishes sooner",
        ),
        Profile(
            name="long-context",
            max_num_seqs=32,
            max_model_len=8192,
            max_num_batched_tokens=8192,
            gpu_memory_utilization=0.90,
            cpu_memory_utilization=0.40,
            max_tokens=256,
            use_when="long reports: fewer, larger parts per document, fewer sequences at once",
        ),
    )
}

DEFAULT_PROFILE = "throughput"
MIN_PROMPT_TOKENS = 128  # the instruction, the chat template and some of the document


def memory_share_that_fits(share: float, total: int, available: int) -> float | None:
    """None when `share` of host memory fits in what is free; otherwise a share that would.

    The CPU build takes its share of all host memory up front, so it must fit in what is free
    now, with a little room left (the worker refuses to start, and `doctor` warns, alike).
    """
    if share * total <= available * 0.95:
        return None
    return max(0.05, available * 0.8 / total)


def with_overrides(profile: Profile, **overrides: object) -> Profile:
    """The profile with the knobs that were set explicitly (None means not set)."""
    return replace(profile, **{k: v for k, v in overrides.items() if v is not None})
