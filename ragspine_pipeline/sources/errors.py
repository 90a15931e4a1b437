"""Errors of the sources layer: a location that cannot be reached or read, or does not exist (yet)."""

from __future__ import annotations


class SourceError(Exception):
    """A trace store, manifest location or system under test that cannot be reached or read.

    ``str()`` is one line naming the location and the cause. The location is always given without
    credentials, and causes are built from error codes and reasons, never from request headers.
    """

    def __init__(self, location: str, cause: str) -> None:
        super().__init__(location, cause)  # args kept so that the error pickles across processes
        self.location = location
        self.cause = cause

    def __str__(self) -> str:
        return " ".join(f"{self.location}: {self.cause}".split())


class ManifestMissing(SourceError):
    """The index manifest does not exist (yet): the rebuild sensor skips with this as its reason."""


class RefusedReply(SourceError):
    """The SUT answered, with a reply no reader downstream would take (nested past the caps, a number
    of more digits than any reader converts): the case is quarantined with ``error``, not failed."""
