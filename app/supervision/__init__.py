"""The policy side of supervision: operation leases, the watchdog, evaluators, budgets.

Detection and allocation are different jobs (DESIGN §1): an operation lease
*detects* that work outlived its expected time and wakes the watchdog; budgets
*allocate* time and steps and fail with their own typed errors.
"""
