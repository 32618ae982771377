"""API latency benchmark: job list, job detail and submit under 16 concurrent clients."""
