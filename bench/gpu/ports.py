"""The loopback ports the bench's servers take: the hand-driven server's, the recipe's own, the replicas'.

On the device one bench runs at a time, on 8003, 8010 and 8020 up. BENCH_PORT_BASE moves all three together, so that
benches sharing a machine (the test suite's workers, each running the kit on the fake engine) never answer for one
another: a replica that found another bench's server on its port was refused as a server left over from another job.
"""

from __future__ import annotations

import os

BASE = int(os.environ.get("BENCH_PORT_BASE", "8000"))
HAND_PORT = BASE + 3
RECIPE_PORT = BASE + 10
FIRST_REPLICA_PORT = BASE + 20
