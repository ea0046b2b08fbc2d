"""What the control plane, the compute hosts and the agents share without the database: the instance,
task and power states, action names, migration states, faults, the passwords' keys, image format
inspection, the metadata trees."""
