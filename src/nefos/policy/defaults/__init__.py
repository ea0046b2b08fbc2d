"""Every API's default rules, by rule name: what is in force where an operator's policy file says
nothing. Each API's table is a module of its own, under the upstream service's rule names.

Defaults follow the upstream "new defaults" (secure RBAC, project scope):
``reader`` may list and show in its project, ``member`` may also create,
change and delete there, ``admin`` may do everything everywhere; ``admin``
implies ``member`` implies ``reader`` (the identity service puts implied roles
in tokens). Admin-only as upstream: os-services, os-hypervisors, os-aggregates, flavor
create/delete and extra-spec writes, flavor access, forced hosts,
``all_tenants``, other projects' quotas and limits, quota updates, AZ detail,
host status, action event tracebacks; os-server-external-events needs the
``service`` or ``admin`` role.

Attribute-level Neutron rules (``create_network:shared``, ``binding:host_id``, ...) are not
separate rules here: those attributes are the admin's (``context_is_admin``).
"""

from nefos.policy.defaults.base import BASE_RULES
from nefos.policy.defaults.compute import COMPUTE_RULES
from nefos.policy.defaults.identity import IDENTITY_RULES
from nefos.policy.defaults.image import IMAGE_RULES
from nefos.policy.defaults.network import NETWORK_RULES

DEFAULT_RULES: dict[str, str] = {**BASE_RULES, **COMPUTE_RULES, **NETWORK_RULES, **IMAGE_RULES,
                                 **IDENTITY_RULES}
