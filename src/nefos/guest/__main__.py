"""``python -m nefos.guest [OUT_DIR]``: build the tiny guest (kernel + initramfs) and print where."""

import json
import sys

from nefos.guest.build import GuestImageUnavailable, build


def main() -> int:
    out = sys.argv[1] if len(sys.argv) > 1 else ".nefos/guest-image"
    try:
        image = build(out)
    except GuestImageUnavailable as exc:
        print(f"build-guest-image: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(image.as_dict(), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
