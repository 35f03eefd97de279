"""`python -m eqsat rules` lists every rule eqsat runs, from the rule definitions themselves."""

from __future__ import annotations

import pytest

from eqsat.__main__ import main
from eqsat.extract.machine import host
from eqsat.rewrites.fusion import IDENTITIES as FUSION
from eqsat.rewrites.rule import summary
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
            for predicate in identity.guard:
                assert f"if {summary(predicate)}\n" in printed


def test_a_guard_is_printed_from_its_predicates() -> None:
    """The printed guard is each predicate's name, variables and docstring summary: rules that
    share a guard print the same text, and the text is the code's own."""
    siblings, then = FUSION
    assert siblings.guard == then.guard
    assert siblings.describe().splitlines()[1:] == then.describe().splitlines()[1:]
    guard = then.describe().splitlines()[1]
    assert guard.startswith("    if fusable(a, first, second, c, pair, pair_mixed): a walks c;")


def test_rules_command_rejects_extra_arguments() -> None:
    assert main(["rules", "--bogus"]) == 2


def test_help_exits_0_and_an_unknown_command_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert "python -m eqsat demo" in capsys.readouterr().out
    assert main(["nosuch"]) == 2
    assert "unknown command 'nosuch'" in capsys.readouterr().err
