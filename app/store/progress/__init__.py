"""A running run's progress: checkpoints and side effects, fenced."""
