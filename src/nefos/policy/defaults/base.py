"""The base rules every API's defaults refer to (upstream's "new defaults": secure RBAC, project
scope), and the personas as the rules name them."""

ADMIN = "rule:context_is_admin"
PROJECT_READER = "role:reader and project_id:%(project_id)s"
PROJECT_MEMBER = "role:member and project_id:%(project_id)s"
ADMIN_OR_READER = "rule:project_reader_or_admin"
ADMIN_OR_MEMBER = "rule:project_member_or_admin"
ADMIN_OR_OWNER = "rule:admin_or_owner"
ADMIN_OR_MANAGER = "rule:project_manager_or_admin"
SERVICE_OR_ADMIN = "rule:service_or_admin"
ANYONE = "@"

BASE_RULES: dict[str, str] = {
    "context_is_admin": "role:admin",
    "admin_api": ADMIN,
    "admin_required": ADMIN,
    "service_role": "role:service",
    "service_or_admin": "rule:service_role or rule:context_is_admin",
    "project_reader_api": PROJECT_READER,
    "project_member_api": PROJECT_MEMBER,
    "project_reader_or_admin": "rule:project_reader_api or rule:context_is_admin",
    "project_member_or_admin": "rule:project_member_api or rule:context_is_admin",
    # Nova's project manager persona (a ``manager`` role on the project); no default role implies it.
    "project_manager_api": "role:manager and project_id:%(project_id)s",
    "project_manager_or_admin": "rule:project_manager_api or rule:context_is_admin",
    "admin_or_owner": "rule:context_is_admin or user_id:%(user_id)s",
}
