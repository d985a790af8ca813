"""Judging answers: what a model's answer means for its row, and when a job's answers say the job must stop
(breaker, poison pages, repetition loops, canary)."""
