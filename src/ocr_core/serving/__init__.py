"""Serving: the `vllm serve` replicas a run talks to, spawned or found, restarted, planned over the machine's GPUs
and watched for stalls; and the engine cache that carries their compiled engine between jobs."""
