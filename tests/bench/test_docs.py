"""Every bench command and option has help text and is named in docs/bench.md."""

from __future__ import annotations

from pathlib import Path

import click

from ringleader.cli.main import cli

DOCS = (Path(__file__).parents[2] / "docs" / "bench.md").read_text()


def _commands() -> list[tuple[str, click.Command]]:
    ctx = click.Context(cli)
    bench, data, env = (cli.get_command(ctx, name) for name in ("bench", "data", "env"))
    assert isinstance(bench, click.Group) and isinstance(data, click.Group) and env is not None
    return [*((f"bench {n}", c) for n, c in bench.commands.items()),
            ("data synth", data.commands["synth"]), ("env", env)]  # fmt: skip


def test_every_command_and_option_is_documented() -> None:
    for name, cmd in _commands():
        assert cmd.help, name
        assert f"ringleader {name}" in DOCS or f"`{name}`" in DOCS, name
        for param in cmd.params:
            if isinstance(param, click.Option) and param.name not in ("help", "output"):
                assert param.help, (name, param.name)
                assert any(opt in DOCS for opt in param.opts), (name, param.opts)
