"""The Image API's default rules, under Glance's names."""

from nefos.policy.defaults.base import ADMIN, ADMIN_OR_MEMBER, ADMIN_OR_READER

IMAGE_RULES: dict[str, str] = {
    "add_image": ADMIN_OR_MEMBER,
    "get_image": ADMIN_OR_READER,
    "get_images": ADMIN_OR_READER,
    "modify_image": ADMIN_OR_MEMBER,
    "delete_image": ADMIN_OR_MEMBER,
    "upload_image": ADMIN_OR_MEMBER,
    "download_image": ADMIN_OR_READER,
    "publicize_image": ADMIN,
}
