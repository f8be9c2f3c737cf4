"""Bulk operations' records (a bulk re-run's filter and progress) and their driver's lease."""
