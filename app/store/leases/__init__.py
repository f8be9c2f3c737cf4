"""Leases: claims, renewals, finishes, releases, the reconciler's sweeps; who holds them."""
