"""Declared queues, their per-minute counters and their activity streams."""
