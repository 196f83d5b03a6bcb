"""Placeholder: this command group is being written."""

import click


def register(cli: click.Group) -> None:
    del cli
