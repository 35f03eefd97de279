"""`python -m eqsat rules` lists every rule eqsat runs, from the rule definitions themselves."""

from __future__ import annotations

import pytest

from eqsat.__main__ import main
from eqsat.extract.machine import host
from eqsat.tools.catalog import rule_catalog


def test_rules_command_lists_every_rule_with_identity_and_guard(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["rules"]) == 0
    printed = capsys.readouterr().out
    families = rule_catalog(host(), "float32")
    assert {name for name, _ in families} >= {"interchange", "tiling", "fusion", "annotate"}
    for _, identities in families:
        for identity in identities:
            assert f"{identity.name}: {identity.identity}" in printed
            assert f"[guard: {identity.guard_text}]" in printed


def test_rules_command_rejects_extra_arguments() -> None:
    assert main(["rules", "--bogus"]) == 2
