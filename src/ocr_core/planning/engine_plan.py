"""The engine a run will start, decided once: each replica's exact flags and environment, and what they are keyed by.

The spawned `vllm serve` command, the engine cache's key, the window's batch size, the readiness check's count of
API servers, the summary's `engine_plan` and the offline engine's arguments all read this record; none of them
builds a flag list of its own. So the key names exactly the command that ran, and what the summary says ran is what
ran.

The flags are layered as the parser of the vLLM that runs reads them (serve_flags.py, through that release's table):
the recipe's serve flags (after the model's own `prepare_serve` hook), `--max-model-len`, then the machine plan's
flags, then the user's `--extra-serve-args` exactly as typed, each layer replacing the options the next one sets, so
exactly one flag of each option reaches vLLM. The machine plan sees the recipe's and the user's flags before it
chooses: a user who turns the processor cache on gets no renderer threads from a vLLM that refuses them together.
A `--gpu-memory-utilization` the user gives is the budget of the GPU: where replicas share a GPU, the plan splits
it between them and each is started with its share, not with the whole.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .flag_table import GENERIC, Grammar, grammar_for
from .machine import Gpu, Machine
from .scale import ScalePlan, max_num_seqs, memory_utilization, plan_scale
from .serve_flags import canonical, flag_value, merged, replaced_options, without_options


@dataclass(frozen=True)
class EngineRequest:
    """What the recipe and the command line ask of the engine, before the machine is known: the same on every
    machine, so the results' fingerprint and the offline engine read it."""

    model: str
    max_model_len: int
    model_flags: tuple[str, ...]
    user_flags: tuple[str, ...] = ()
    serve_env: Mapping[str, str] = field(default_factory=dict)
    params_b: float | None = None
    vllm_pin: str | None = None
    replicas: int | None = None
    api_servers: int | None = None
    data_parallel: int | None = None

    @property
    def grammar(self) -> Grammar:
        """How the recipe's pinned vLLM reads flags (the generic rules where the package has no table for it)."""
        return grammar_for(self.vllm_pin) or GENERIC

    def engine_flags(self) -> list[str]:
        """The recipe's flags under the user's, in one spelling: the engine's options on any machine (no length, no
        plan), which the results' fingerprint reads, so two spellings of one command are one fingerprint."""
        return canonical(merged(self.model_flags, self.user_flags, self.grammar), self.grammar)

    def offline_flags(self) -> list[str]:
        """The in-process engine's flags in one spelling: the recipe's and the user's, with the run's
        --max-model-len between."""
        length = ["--max-model-len", str(self.max_model_len)]
        return canonical(merged(merged(self.model_flags, length), self.user_flags, self.grammar), self.grammar)


@dataclass(frozen=True)
class ReplicaLaunch:
    """One replica: the GPU it sees (None: whatever the process sees), every flag after `vllm serve MODEL`, its
    environment beside the engine cache's, and how many API servers it runs (readiness waits for each)."""

    gpu: str | None
    flags: tuple[str, ...]
    env: Mapping[str, str]
    api_servers: int = 1

    def environment(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The replica's variables, then `extra` (the engine cache's folders), then the GPU it may see."""
        env = {**self.env, **(extra or {})}
        if self.gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = self.gpu
        return env


@dataclass(frozen=True)
class EnginePlan:
    """The engine of a run on this machine: the machine plan, the exact flags each replica gets (the user's words as
    typed), the same flags in one spelling (`spelled`: what the engine cache's key and every question about them
    read), the options the user replaced, and the memory budget the user gave that the plan split (`split_budget`)."""

    request: EngineRequest
    scale: ScalePlan
    flags: tuple[str, ...]
    replaced: tuple[str, ...]
    spelled: tuple[str, ...]
    split_budget: str | None = None

    @property
    def machine(self) -> Machine:
        return self.scale.machine

    @property
    def api_servers(self) -> int:
        """API server processes per replica, as vLLM will read the flags."""
        return int(flag_value(self.spelled, "--api-server-count") or 1)

    @property
    def renderer_workers(self) -> int:
        return int(flag_value(self.spelled, "--renderer-num-workers") or 1)

    @property
    def memory_share(self) -> float | None:
        """The --gpu-memory-utilization each replica is started with (None: vLLM's default)."""
        value = flag_value(self.spelled, "--gpu-memory-utilization")
        return float(value) if value is not None else None

    def replicas(self) -> list[ReplicaLaunch]:
        """One launch per replica, GPU by GPU: each replica sees only its own GPU (CUDA_VISIBLE_DEVICES)."""
        env = dict(self.request.serve_env)
        gpus = self.machine.gpus
        if self.scale.data_parallel > 1 or not gpus:
            return [ReplicaLaunch(None, self.flags, env, self.api_servers)] * self.scale.replicas
        per_gpu = self.scale.per_gpu
        return [ReplicaLaunch(gpu.device, self.flags, env, self.api_servers) for gpu in gpus for _ in range(per_gpu)]

    def gpu(self) -> Gpu | None:
        return self.machine.gpus[0] if self.machine.gpus else None

    @property
    def shares_gpus(self) -> bool:
        """Whether replicas share a GPU: a run that starts them then runs them under CUDA MPS (serving/mps.py)."""
        return self.scale.per_gpu > 1 and bool(self.machine.gpus)

    def max_num_seqs(self) -> int:
        """Sequences one engine's scheduler runs at once under these flags on this GPU."""
        return max_num_seqs(self.spelled, self.gpu())

    def describe(self) -> str:
        yours = f"; --extra-serve-args replaces {' '.join(self.replaced)}" if self.replaced else ""
        if self.split_budget is not None and self.memory_share is not None:
            yours += (
                f"; --gpu-memory-utilization {self.split_budget} is the GPU's budget: "
                f"{self.memory_share:.2f} to each of the {self.scale.per_gpu} replicas on it"
            )
        return self.scale.describe() + yours

    def record(self) -> dict:
        """The plan that ran, for the summary and the card: its counts and the flags each replica got."""
        return {
            "cpus": self.machine.cpus,
            "gpus": len(self.machine.gpus),
            "replicas": self.scale.replicas,
            "api_servers": self.api_servers,
            "renderer_workers": self.renderer_workers,
            "gpu_memory_utilization": self.memory_share,
            "serve_args": list(self.flags),
            "replaced_by_extra_serve_args": list(self.replaced),
            "why": self.scale.why,
        }


def plan_engine(
    request: EngineRequest, machine: Machine, vllm_version: str | None, model_flags: tuple[str, ...] | None = None
) -> EnginePlan:
    """The engine plan for `machine` under the vLLM that will run (`vllm_version`, None: the recipe's pin).
    `model_flags` are the recipe's flags after its `prepare_serve` hook (default: as the recipe states them).

    The machine plan sees the recipe's and the user's flags; its own flags go between the two, and the user's
    replace both, read by the table of that vLLM (the pin's, or the generic rules, where the package has none for
    it); a memory share the user gives is split between the replicas of a GPU instead (a CommandError where
    --replicas does not fit the machine)."""
    grammar = grammar_for(vllm_version) or request.grammar
    recipe = tuple(request.model_flags if model_flags is None else model_flags)
    declared = canonical(merged(recipe, request.user_flags, grammar), grammar)
    scale = plan_scale(
        machine,
        request.params_b,
        memory_utilization(declared),
        request.replicas,
        request.api_servers,
        request.data_parallel,
        vllm_version or request.vllm_pin,
        declared,
    )
    planned = scale.serve_args()
    user = list(request.user_flags)
    budget = flag_value(user, "--gpu-memory-utilization", grammar) if scale.memory_share is not None else None
    if budget is not None:
        user = without_options(user, ["--gpu-memory-utilization"], grammar)
    base = merged(merged(recipe, ["--max-model-len", str(request.max_model_len)], grammar), planned, grammar)
    flags = merged(base, user, grammar)
    replaced = replaced_options(planned, user, grammar)
    return EnginePlan(request, scale, tuple(flags), tuple(replaced), tuple(canonical(flags, grammar)), budget)
