"""Selected Tempest tests that fail against Nefos, each with the reason (docs/compatibility.md).

test_tempest.py fails on any other failure: a test leaving this list is progress, one joining it
needs a reason here.
"""

KNOWN_FAILURES: dict[str, str] = {
}
