"""The results store: the output (local folder or Hub repo), progress parts, their compaction and mirror, the lease
and the manifest."""
