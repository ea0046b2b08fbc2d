"""Compute, the control plane's side: the compute API layer (validation, quotas, records, the API's
steps of each action) and its database-backed resources (flavors, keypairs, aggregates, quota sets,
services, hypervisors, usage); its HTTP routes are ``rest``. A host's side is ``nefos.host.compute``."""
