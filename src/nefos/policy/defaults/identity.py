"""The Identity API's default rules, under Keystone's names."""

IDENTITY_RULES: dict[str, str] = {
    f"identity:{a}": "rule:admin_required" for a in (
        "list_domains", "create_domain", "update_domain", "delete_domain",
        "list_projects", "create_project", "update_project", "delete_project",
        "list_users", "create_user", "update_user", "delete_user",
        "list_roles", "get_role", "create_role", "update_role", "delete_role",
        "list_grants", "create_grant", "revoke_grant", "list_groups",
        "list_services", "get_service", "list_endpoints", "get_endpoint",
        "revoke_token:other_user", "list_role_assignments")
}
IDENTITY_RULES.update({
    # Services validate the tokens their callers send; only an admin revokes another user's token.
    "identity:validate_token:other_user": "rule:admin_required or rule:service_role",
    "identity:get_domain": "rule:admin_required or token.domain.id:%(target.domain.id)s "
                           "or token.user.domain.id:%(target.domain.id)s "
                           "or token.project.domain.id:%(target.domain.id)s",
    "identity:get_project": "rule:admin_required or project_id:%(target.project.id)s",
    "identity:get_user": "rule:admin_required or user_id:%(target.user.id)s",
    "identity:list_user_projects": "rule:admin_required or user_id:%(target.user.id)s",
    "identity:check_grant": "rule:admin_required or user_id:%(target.user.id)s",
    "identity:change_password": "user_id:%(target.user.id)s",
    "identity:list_role_assignments:own": "user_id:%(target.user.id)s or project_id:%(target.project.id)s",
})
