"""Identity: a Keystone v3 subset (tokens, catalog, domains, projects, users, roles)."""
