"""What a run will do, as one frozen value: made once, in the entry, before the first page (make_plan.py), and
read by every stage after it instead of the command line.

Each stage receives the record it needs: the job's preparation the input selection and the output layout, the
shapes the engine plan, the servers, the page rules and the window policy, the engine cache its key and mount, the
manifest the fields it fingerprints. None of them reads the parsed command (`Settings`) or the world again: the
machine, the installed vLLM and whether a server already answers were read once, by the maker.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ..inputs.columns import Columns
from ..inputs.pdf import RenderSize
from ..inputs.source import InputSelection
from .cache_key import CacheKey
from .engine_plan import EnginePlan, EngineRequest
from .machine import Machine
from .page_rules import PageRules
from .server_policy import ServerPolicy


@dataclass(frozen=True)
class OutputLayout:
    """Where the results go and how they are held there: OUTPUT, its split and config, the Hub repo's settings,
    the result columns, how earlier results and other runs' leases are treated, and how often progress is uploaded."""

    output: str
    split: str
    config: str | None
    columns: Columns
    private: bool = False
    create_pr: bool = False
    overwrite: bool = False
    take_over: bool = False
    take_over_jobs: tuple[str, ...] = ()
    retry_errors: bool = False
    upload_every: float = 0.0


@dataclass(frozen=True)
class WindowPolicy:
    """How pages are fed to the engines: offline in batches of `batch_size`; served in a window fixed at
    `max_inflight` (server shape, when given) or sized from the engines, with the stall watch's patience."""

    mode: str
    batch_size: int | None = None
    max_inflight: int | None = None
    stall_timeout: float | None = None


@dataclass(frozen=True)
class CachePlan:
    """The --engine-cache (None: no cache) and the key its archives are read and written under: the vLLM, torch and
    Triton where the engine runs, the GPUs and the engine's exact flags (None: no vLLM to key by)."""

    location: str | None
    key: CacheKey | None


@dataclass(frozen=True)
class RunPlan:
    """The run decided: its shape (`mode`), the model, what the engine is asked (`request`) and, for a served run,
    the engine plan on this machine and the servers; the rules every page is held to, the window, the engine
    cache, the input's rows and pages, the output, and the machine and vLLM versions the plan was made on."""

    mode: str
    model: str
    request: EngineRequest
    rules: PageRules
    window: WindowPolicy
    selection: InputSelection
    pdf_size: RenderSize
    output: OutputLayout
    machine: Machine
    versions: Mapping[str, str | None]
    cache: CachePlan
    engine: EnginePlan | None = None
    servers: ServerPolicy | None = None
    price_per_hour: float | None = None
    verbose: bool = False
    hf_token: str | None = field(default=None, repr=False)

    @property
    def shard(self) -> tuple[int, int] | None:
        return self.selection.shard

    @property
    def starts_servers(self) -> bool:
        """Whether this run starts its own servers, given rows to do: one local address, where none answers yet."""
        return self.servers is not None and self.servers.will_start
