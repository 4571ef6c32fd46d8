"""`shardcdc`'s development-kit commands (demo, vtgate-sim) come from the `shardcdc.commands`
entry points, so the CLI never imports devkit; a missing one gets one clear line."""

from __future__ import annotations

import pytest

from shardcdc_cli import cli


def test_devkit_commands_are_entry_points_not_product_subcommands() -> None:
    plugins = cli.plugin_commands()
    assert plugins["demo"][0] == "cdcdemo.demo"
    assert plugins["vtgate-sim"][0] == "vtgatesim.cli"
    devkit = {"cdcdemo", "vtgatesim", "localkafka", "kubetest", "promlocal", "realvitess", "sparkcluster"}
    assert not {module.split(".")[0] for module, _ in cli.SUBCOMMANDS.values()} & devkit


def test_help_lists_the_plugins_with_their_own_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["--help"])
    assert exc.value.code == 0
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps to the terminal's width
    assert "Run the demo: local Kafka, the VTGate test server and a connector" in out
    assert "Serve the VTGate test server" in out


def test_a_plugin_command_dispatches_to_its_module(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["demo", "--help"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.startswith("usage: shardcdc demo [-h] [--quick]")


def test_an_unknown_command_says_what_exists_and_how_to_get_the_kit(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(cli, "entry_points", lambda group: [])  # a product-only install
    assert cli.main(["demo", "--quick"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("shardcdc: unknown command 'demo' (commands: worker, operator, backfill, run, scale, ")
    assert "pip install -e '.[demo]'" in err
