"""API keys bound to namespace prefixes: hashed at rest, shown once, checked in constant time (issue 17).

A key is `cm_<id>_<secret>`. Only the SHA-256 of the secret is stored (the secret is 256 random bits, so a plain
hash cannot be reversed by guessing), beside the namespace prefix the key is bound to: a user, optionally one
agent of that user. A request can name any ids it likes; `KeyRing.scope` settles the namespace it may touch, and
refuses (`Forbidden`) anything outside the key's prefix. Admin keys manage keys and touch no memory.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import secrets
import sqlite3
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from ..types import Namespace

PREFIX = "cm_"


class Forbidden(Exception):
    """The key is valid but the request reaches outside the namespace prefix it is bound to."""


@dataclass(frozen=True)
class ApiKey:
    """A key's record (never its secret): id, the namespace prefix it is bound to, admin or not."""

    id: str
    user_id: str | None
    agent_id: str | None = None
    admin: bool = False
    label: str = ""
    created: str = ""

    def as_dict(self) -> dict[str, object]:
        return {
            "id": self.id,
            "user_id": self.user_id,
            "agent_id": self.agent_id,
            "admin": self.admin,
            "label": self.label,
            "created": self.created,
        }

    def scope(self, user_id: str | None = None, agent_id: str | None = None, run_id: str | None = None) -> Namespace:
        """The namespace a request naming these ids may touch: the key's own prefix filled in where the request
        is silent; Forbidden where it names another user or agent (ids compared after Namespace's normalising)."""
        if self.admin or self.user_id is None:
            raise Forbidden("an admin key manages keys and reads no memory: use a key bound to a user")
        wanted = Namespace(self.user_id if user_id is None else user_id, agent_id, run_id)  # normalises, validates
        if wanted.user_id != self.user_id:
            raise Forbidden(f"this key is bound to user {self.user_id!r}; it cannot reach user {wanted.user_id!r}")
        if self.agent_id is not None:
            if agent_id is None:
                return Namespace(self.user_id, self.agent_id, wanted.run_id)
            if wanted.agent_id != self.agent_id:
                raise Forbidden(
                    f"this key is bound to agent {self.agent_id!r} of user {self.user_id!r};"
                    f" it cannot reach agent {wanted.agent_id!r}"
                )
        return wanted

    def covers_user(self) -> bool:
        """Whether the key may act on its user as a whole (delete every agent's memory): only an agent-free key."""
        return not self.admin and self.user_id is not None and self.agent_id is None


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def default_path(db: Path | str) -> Path:
    """Where a store's keys live unless told otherwise: beside the store file, `<db>.keys` (for a PostgreSQL
    store, in the user data dir; servers sharing one database share a key file given with --keys-file)."""
    from ..config import beside_store

    return beside_store(db, ".keys")


class KeyRing:
    """The key file: a small SQLite table of (id, digest of the secret, prefix, admin, label, created, revoked)."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute(
            "CREATE TABLE IF NOT EXISTS api_keys (id TEXT PRIMARY KEY, digest TEXT NOT NULL, user_id TEXT,"
            " agent_id TEXT, admin INTEGER NOT NULL DEFAULT 0, label TEXT NOT NULL DEFAULT '',"
            " created TEXT NOT NULL, revoked TEXT)"
        )
        with contextlib.suppress(OSError):  # the digests are not secrets, but the file is nobody else's business
            self.path.chmod(0o600)

    def close(self) -> None:
        self._conn.close()

    def create(
        self, *, user_id: str | None = None, agent_id: str | None = None, admin: bool = False, label: str = ""
    ) -> tuple[ApiKey, str]:
        """A new key and its token (shown once, never stored). A user key needs a user_id; an admin key none."""
        if admin and (user_id is not None or agent_id is not None):
            raise ValueError("an admin key is bound to no namespace: give --admin or --user-id, not both")
        if not admin:
            if user_id is None:
                raise ValueError("a key must be bound to a user: give a user_id (or make an admin key)")
            namespace = Namespace(user_id, agent_id)  # validates and normalises the ids
            user_id, agent_id = namespace.user_id, namespace.agent_id
        if len(label) > 200:
            raise ValueError("a key's label is at most 200 characters")
        key_id = secrets.token_hex(6)
        secret = secrets.token_urlsafe(32)
        created = datetime.now(UTC).isoformat(timespec="seconds")
        with self._lock:
            self._conn.execute(
                "INSERT INTO api_keys (id, digest, user_id, agent_id, admin, label, created) VALUES (?,?,?,?,?,?,?)",
                (key_id, _digest(secret), user_id, agent_id, int(admin), label, created),
            )
        return ApiKey(key_id, user_id, agent_id, admin, label, created), f"{PREFIX}{key_id}_{secret}"

    def verify(self, token: str | None) -> ApiKey | None:
        """The key a token belongs to, or None (malformed, unknown, revoked or wrong secret: all alike)."""
        if not token or not token.startswith(PREFIX) or len(token) > 200:
            return None
        key_id, _, secret = token[len(PREFIX) :].partition("_")
        if not key_id or not secret:
            return None
        with self._lock:
            row = self._conn.execute(
                "SELECT id, digest, user_id, agent_id, admin, label, created FROM api_keys"
                " WHERE id = ? AND revoked IS NULL",
                (key_id,),
            ).fetchone()
        expected = row[1] if row else _digest("-")  # compare even when unknown: no timing hint of which ids exist
        if not hmac.compare_digest(expected, _digest(secret)) or row is None:
            return None
        return ApiKey(row[0], row[2], row[3], bool(row[4]), row[5], row[6])

    def live(self) -> list[ApiKey]:
        """Every key not revoked, oldest first."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT id, user_id, agent_id, admin, label, created FROM api_keys WHERE revoked IS NULL"
                " ORDER BY created, id"
            ).fetchall()
        return [ApiKey(r[0], r[1], r[2], bool(r[3]), r[4], r[5]) for r in rows]

    def revoke(self, key_id: str) -> bool:
        """Revoke a key at once; False when there is no such live key."""
        revoked = datetime.now(UTC).isoformat(timespec="seconds")
        with self._lock:
            cursor = self._conn.execute(
                "UPDATE api_keys SET revoked = ? WHERE id = ? AND revoked IS NULL", (revoked, key_id)
            )
        return cursor.rowcount > 0
