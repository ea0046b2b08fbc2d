"""The network service (Neutron's part): networks, subnets, ports, security groups, quotas."""
