"""Fixtures for the judge tests."""

from tests.judge.fake_judge import fake_judge  # noqa: F401
