"""Leasehold: a durable run executor on Redis."""

__version__ = "0.1.0"
