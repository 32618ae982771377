"""Scheduling-core benchmark: one pass over 10,000 queued jobs on 1,000 nodes."""
