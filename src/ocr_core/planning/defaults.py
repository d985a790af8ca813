"""The run's defaults that the engine side reads too: the command line offers them, and the plan, the window and
the server handle use the same numbers without asking the command line for them."""

DEFAULT_SERVER = "http://127.0.0.1:8000"
# Pages in flight per engine for -server (and where a -saturate window opens when the KV cache size is unknown).
SERVER_WINDOW = 32
# The most pages in flight per engine a -saturate window may grow to.
SATURATE_MAX_INFLIGHT = 512
OFFLINE_BATCH = 16
RETRY_BUDGET_S = 900.0
STALL_TIMEOUT_S = 300.0
