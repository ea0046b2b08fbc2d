"""Each service's client: the declared, versioned interface its callers use."""
