"""Errors a user can fix. The CLI prints their message and exits 1; anything else is a bug."""

from __future__ import annotations


class CrawdadError(Exception):
    """A problem with the user's input or setup; the message says what to fix."""


class DataError(CrawdadError):
    """The dataset files are missing, malformed or inconsistent."""


class ConfigError(CrawdadError):
    """The config file or the flags are wrong."""


class ServersNotReady(CrawdadError):
    """A run's model servers do not answer, or lack its models (`crawdad doctor` says which)."""


class PromptError(CrawdadError):
    """A prompt template is missing or uses a variable that was not given."""


class StoreError(CrawdadError):
    """The run folder cannot be used (not writable, or made with another config)."""


class StoreWriteError(StoreError):
    """A write to the run folder failed (a full disk, an I/O error): the run cannot go on."""


class UnsafePathError(StoreError):
    """A path leaves its folder through a link, or is not the kind of file expected there (a
    FIFO, a device, a folder), or an input file is larger than the config allows."""


class BackendError(CrawdadError):
    """A model server failed to answer a request (after retries, where they apply)."""

    def __init__(self, message: str, *, transient: bool = False, endpoint: str = "") -> None:
        super().__init__(message)
        self.transient = transient
        self.endpoint = endpoint


class ServerUnavailable(BackendError):
    """A server could not be reached at all."""

    def __init__(self, message: str, *, endpoint: str = "") -> None:
        super().__init__(message, transient=True, endpoint=endpoint)


class ModelNotFound(BackendError):
    """The server answers but does not have the model."""


class GarbledReply(BackendError):
    """A server answered 200 with a body that is not what its API sends: retried, as a proxy or
    an overloaded server may do this once and answer properly the next time."""

    def __init__(self, message: str, *, endpoint: str = "") -> None:
        super().__init__(message, transient=True, endpoint=endpoint)
