"""Compute: the compute API layer (validation, quotas, records, actions) and the compute manager."""
