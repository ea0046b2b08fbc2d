"""The Compute API service (Nova's nova-api): OpenStack Compute v2.1 over HTTP."""
