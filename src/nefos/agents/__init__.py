"""The host side of networking: the agents (L2, DHCP, L3), the firewall, namespaces, the metadata proxy."""
