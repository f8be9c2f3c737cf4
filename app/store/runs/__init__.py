"""Runs as clients see them: create, read, list, cancel, delete, purge, resume, resolve, re-run."""
