"""Flow control: concurrency limits, slots and priorities."""
