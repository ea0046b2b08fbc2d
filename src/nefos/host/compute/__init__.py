"""The compute host (nova-compute): everything that runs beside the hypervisor."""
