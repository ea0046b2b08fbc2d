"""The scheduler: filters, weighers and atomic claims choose a host for each instance."""
