"""The shapes that drive a job's pages: offline batches through an in-process `vllm.LLM`, or a window of requests
in flight over served replicas; and what every shape shares (stop signals, the tally, the record of the drive)."""
