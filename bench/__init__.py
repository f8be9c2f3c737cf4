"""Benchmarks: ``make bench`` runs :mod:`bench.throughput`; results go to ``bench/out``."""
