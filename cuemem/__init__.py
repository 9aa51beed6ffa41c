"""cuemem: long-term memory for LLM agents."""

from .config import Settings
from .errors import (
    CuememError,
    EmbeddingError,
    ImportFormatError,
    InvalidTurnError,
    StoreError,
    TurnNotFoundError,
    UnknownEngineError,
    UnknownNamespaceError,
)
from .memory import AddResult, ImportReport, Memory
from .types import Answer, Hit, Namespace, Retrieval, Turn

__version__ = "0.1.0"

__all__ = [
    "AddResult",
    "Answer",
    "CuememError",
    "EmbeddingError",
    "Hit",
    "ImportFormatError",
    "ImportReport",
    "InvalidTurnError",
    "Memory",
    "Namespace",
    "Retrieval",
    "Settings",
    "StoreError",
    "Turn",
    "TurnNotFoundError",
    "UnknownEngineError",
    "UnknownNamespaceError",
]
