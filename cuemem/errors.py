"""Typed errors: every bad input gets one of these, with a message that says what to do."""


class CuememError(Exception):
    """Base class of every error cuemem raises on purpose."""


class InvalidTurnError(CuememError, ValueError):
    """A turn cannot be stored: empty, too large, not UTF-8, or malformed."""


class UnknownNamespaceError(CuememError, KeyError):
    """The namespace has never been written to (or was deleted)."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else "unknown namespace"


class TurnNotFoundError(CuememError, KeyError):
    """No turn with this id exists in the namespace."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "turn not found"


class UnknownEngineError(CuememError, ValueError):
    """No engine is registered under this name."""


class EmbeddingError(CuememError, RuntimeError):
    """The embedder could not be loaded or did not answer."""


class ImportFormatError(CuememError, ValueError):
    """An input file (JSONL, LoCoMo JSON) is malformed."""


class StoreError(CuememError):
    """The store file cannot be opened or written (not a cuemem store, newer schema, read-only, locked, disk full)."""
