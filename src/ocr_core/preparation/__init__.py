"""Preparing a job before its first page: whose output it is (ownership), this run's claim on its slice (claim),
and the job itself, settled in the order that keeps foreign and earlier results safe (job)."""
