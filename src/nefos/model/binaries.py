"""Service binary names, as Nova's (tools and Tempest filter os-services on them)."""

COMPUTE_BINARY = "nova-compute"
