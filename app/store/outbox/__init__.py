"""The transactional outbox: a run's end that must reach another slot (its parent, its children)."""
