"""Durable waits: a parked run (sleep, signal, person) and the signals sent to it."""
