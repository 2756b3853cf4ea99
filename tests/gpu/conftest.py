"""The command-line fixture of tests/cli, for the provider tests here."""

from tests.cli.conftest import cli  # noqa: F401 (a fixture, found by pytest by name)
