"""Rate-limit declarations and their GCRA buckets."""
