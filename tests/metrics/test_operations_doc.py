"""docs/operations.md's Prometheus configurations and alert rules are valid, as promtool (Debian's
Prometheus package) reads them, and the rules name only metrics Nefos serves."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from nefos import metrics

DOC = Path(__file__).resolve().parents[2] / "docs" / "operations.md"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


def yaml_blocks() -> list[str]:
    return re.findall(r"```yaml\n(.*?)```", DOC.read_text(), flags=re.S)


def promtool(*args: str) -> subprocess.CompletedProcess:
    if not Path(PROMTOOL).exists():
        pytest.fail("promtool is not installed: scripts/install-test-deps.sh installs Debian's prometheus")
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=60)


def test_the_scrape_configurations_and_rules_are_valid(tmp_path):
    blocks = yaml_blocks()
    configs = [b for b in blocks if "scrape_configs:" in b]
    [rules] = [b for b in blocks if b.startswith("groups:")]
    assert len(configs) == 2
    (tmp_path / "nefos-alerts.yml").write_text(rules)
    result = promtool("check", "rules", str(tmp_path / "nefos-alerts.yml"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 10 rules found" in result.stdout + result.stderr
    for i, config in enumerate(configs):
        path = tmp_path / f"prometheus-{i}.yml"
        path.write_text(config)  # its rule_files entry is read from beside it
        result = promtool("check", "config", str(path))
        assert result.returncode == 0, result.stdout + result.stderr


def test_the_rules_and_the_table_name_metrics_nefos_serves():
    served = {collector._name for collector in vars(metrics).values()
              if hasattr(collector, "_name") and hasattr(collector, "_documentation")}
    [rules] = [b for b in yaml_blocks() if b.startswith("groups:")]
    named = set(re.findall(r"\bnefos_[a-z_]+", rules))
    # A histogram's series carry suffixes; a counter's family name drops its _total.
    base = {re.sub(r"_(bucket|count|sum)$", "", n) for n in named}
    assert base <= served | {n.removesuffix("_total") for n in served} | {f"{n}_total" for n in served}, \
        base - served
    table = set(re.findall(r"^\| `(nefos_[a-z_]+)`", DOC.read_text(), flags=re.M))
    assert {n.removesuffix("_total") for n in table} == {n.removesuffix("_total") for n in served}


def test_the_host_alerts_fire_when_they_should(tmp_path):
    """promtool's rule unit tests: a compute host down for 5 minutes, or disabled by itself for 10,
    raises its alert; one down for less, or disabled by an operator, does not."""
    [rules] = [b for b in yaml_blocks() if b.startswith("groups:")]
    (tmp_path / "nefos-alerts.yml").write_text(rules)
    (tmp_path / "tests.yml").write_text("""
rule_files: [nefos-alerts.yml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'nefos_service_up{binary="nova-compute", host="h1"}'
        values: '1 1 0x10'
      - series: 'nefos_service_up{binary="nova-compute", host="h2"}'
        values: '1 0 0 1x10'
      - series: 'nefos_service_disabled{binary="nova-compute", host="h3", auto="true"}'
        values: '0 1x15'
      - series: 'nefos_service_disabled{binary="nova-compute", host="h4", auto="false"}'
        values: '0 1x15'
    alert_rule_test:
      - eval_time: 4m
        alertname: NefosComputeHostDown
        exp_alerts: []
      - eval_time: 8m
        alertname: NefosComputeHostDown
        exp_alerts:
          - exp_labels: {severity: critical, binary: nova-compute, host: h1}
            exp_annotations:
              summary: "Compute host h1 has been down for 5 minutes: its servers cannot be managed"
      - eval_time: 12m
        alertname: NefosComputeHostAutoDisabled
        exp_alerts:
          - exp_labels: {severity: warning, binary: nova-compute, host: h3, auto: "true"}
            exp_annotations:
              summary: "Compute host h3 disabled itself (its hypervisor is unreachable)"
""")
    result = promtool("test", "rules", str(tmp_path / "tests.yml"))
    assert result.returncode == 0, result.stdout + result.stderr
