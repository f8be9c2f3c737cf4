"""Runs that start runs: spawns, joins, the outbox that carries ends across slots, trees."""
