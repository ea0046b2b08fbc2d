"""Identity's face to the other services: where the endpoints are, the service user's session, token
validation."""
