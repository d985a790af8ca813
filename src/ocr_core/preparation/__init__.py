"""Preparing a job: everything a run settles before its first page, in the order that keeps foreign and earlier
results safe (ownership, lease, manifest, input, what is left to do)."""
