"""The control plane's database repositories: the persistence operations on instances, actions,
quotas, claims, migrations, services and the rest (what a host needs of them goes through the
conductor; the states and constants both sides share are ``nefos.model``)."""
