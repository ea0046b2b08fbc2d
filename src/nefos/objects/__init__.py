"""Domain objects shared by the services: states and the persistence operations on them."""
