"""Where the records of the hybrid preference memory live (design 3, "records live in a vector store with per-user
namespaces"): the store itself (SQLite or PostgreSQL, the default) or ChromaDB, the report's choice. Both keep the
whole record with its history; search reads the current records of one namespace only."""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ...errors import CuememError
from ...store.base import NewItem
from ..base import EngineContext
from .consolidate import Profile
from .records import Record

Scored = list[tuple[Record, float]]


class RecordBackend(Protocol):
    name: str

    def load(self, ctx: EngineContext) -> Profile: ...
    def save(self, ctx: EngineContext, profile: Profile, changed: Sequence[Record], vectors: np.ndarray) -> None: ...
    def search(self, ctx: EngineContext, vector: np.ndarray, k: int, types: Sequence[str]) -> Scored: ...
    def drop(self, ctx: EngineContext) -> None: ...


def namespace_key(ctx: EngineContext) -> str:
    """The namespace as one string (user, agent, run): the filter every record query carries."""
    ns = ctx.namespace
    return json.dumps([ns.user_id, ns.agent_id, ns.run_id], ensure_ascii=False)


class StoreRecords:
    """Records in the store: the profile (every record with its history) is the owner's engine state, and each
    version of a record is an item citing its evidence turns, with its vector; search reads the current versions."""

    name = "sqlite"

    def __init__(self, owner: str, space: str) -> None:
        self.owner, self.space = owner, space

    def load(self, ctx: EngineContext) -> Profile:
        data = ctx.store.kv_get(ctx.ns, self.owner, "profile")
        if not data:
            return Profile()
        return Profile.from_json(data, lambda ids: ctx.store.seqs_of(ctx.ns, ids))

    def save(self, ctx: EngineContext, profile: Profile, changed: Sequence[Record], vectors: np.ndarray) -> None:
        ctx.store.kv_set(ctx.ns, self.owner, "profile", profile.to_json())
        if not changed:
            return
        texts = [r.render() for r in changed]
        ctx.store.put_items(
            ctx.ns,
            self.space,
            [
                NewItem(
                    r.item_key,
                    text,
                    {"record": r.id, "type": r.type, "version": r.version},
                    [s for _, s in r.evidence],
                    ctx.tokens.count(text),
                    depends=[s for h in r.history for _, s in h.get("evidence", [])],
                )
                for r, text in zip(changed, texts, strict=True)
            ],
        )
        ids = ctx.store.item_ids(ctx.ns, self.space, [r.item_key for r in changed])
        rows = [
            (ids[r.item_key], _hash(text), v)
            for r, text, v in zip(changed, texts, vectors, strict=True)
            if r.item_key in ids
        ]
        if rows:
            ctx.store.put_vectors(ctx.ns, self.space, ctx.embedder.name, rows)

    def search(self, ctx: EngineContext, vector: np.ndarray, k: int, types: Sequence[str]) -> Scored:
        records, matrix = self._current(ctx)
        if not records:
            return []
        sims = matrix @ (vector / (np.linalg.norm(vector) or 1.0))
        order = np.argsort(-sims, kind="stable")
        return [(records[i], float(sims[i])) for i in order if records[i].type in types][:k]

    def _current(self, ctx: EngineContext) -> tuple[list[Record], np.ndarray]:
        """The current record versions with their unit vectors, cached until the next write or delete."""
        store, ns = ctx.store, ctx.ns
        name = f"{self.space}:current"
        with ctx.indexes.lock_for(ctx.ns), store.snapshot():
            version = (store.epoch(ns), store.last_seq(ns), ctx.embedder.name)
            cached = ctx.indexes.view(ns, name, version)
            if isinstance(cached, tuple):
                return cached
            profile = self.load(ctx)
            ids = store.item_ids(ns, self.space, [r.item_key for r in profile.records.values()])
            vectors = store.item_vectors(ns, ctx.embedder.name, list(ids.values()))
            records = [r for r in profile.records.values() if ids.get(r.item_key) in vectors]
            matrix = np.zeros((0, 1), dtype=np.float32)
            if records:
                matrix = np.array([vectors[ids[r.item_key]] for r in records], dtype=np.float32)
                matrix /= np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)
            view = (records, matrix)
            ctx.indexes.keep_view(ns, name, version, view)
            return view

    def drop(self, ctx: EngineContext) -> None:
        """Nothing to do: the store drops the owner's state and items with the turns (on_delete="rebuild")."""


def _hash(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


class ChromaRecords:
    """Records in ChromaDB (`chromadb.PersistentClient` in a directory): one collection per namespace, and the
    namespace is also a metadata filter that every read and query carries (never optional). A record is one
    entry (document = its rendering, metadata = the whole record with its history); the profile's counter and
    progress are one state entry. Dropping a namespace deletes its collection, then vacuums Chroma's SQLite file
    and removes index directories no collection uses, so no page or file keeps a deleted record.

    Chroma's client is not safe across processes: use this backend from one process (threads are fine)."""

    name = "chroma"
    STATE = "__profile_state__"

    def __init__(self, path: str | Path, owner: str) -> None:
        self.path, self.owner = Path(path), owner
        self._client: Any = None

    def client(self) -> Any:
        if self._client is None:
            try:
                import chromadb
                from chromadb.config import Settings as ChromaSettings
            except ImportError as exc:  # pragma: no cover - the extra is installed by `make setup`
                raise CuememError("profile backend 'chroma' needs chromadb: pip install 'cuemem[chroma]'") from exc
            self.path.mkdir(parents=True, exist_ok=True)
            self._client = chromadb.PersistentClient(
                path=str(self.path), settings=ChromaSettings(anonymized_telemetry=False)
            )
        return self._client

    def collection_name(self, ctx: EngineContext) -> str:
        digest = hashlib.sha256(f"{self.owner}\0{namespace_key(ctx)}".encode()).hexdigest()[:40]
        return f"cuemem-{digest}"

    def _collection(self, ctx: EngineContext) -> Any:
        return self.client().get_or_create_collection(
            self.collection_name(ctx), embedding_function=None, metadata={"hnsw:space": "cosine"}
        )

    @staticmethod
    def _where(ctx: EngineContext, kind: str) -> dict[str, Any]:
        return {"$and": [{"namespace": namespace_key(ctx)}, {"kind": kind}]}

    def load(self, ctx: EngineContext) -> Profile:
        got = self._collection(ctx).get(where={"namespace": namespace_key(ctx)}, include=["metadatas"])
        data: dict[str, Any] = {"records": []}
        for meta in got["metadatas"] or []:
            if meta.get("namespace") != namespace_key(ctx):  # belt and braces: the filter already holds
                continue
            if meta["kind"] == "state":
                data["counter"], data["upto"] = int(meta["counter"]), str(meta["upto"])
            else:
                data["records"].append(json.loads(meta["record"]))
        return Profile.from_json(data, lambda ids: ctx.store.seqs_of(ctx.ns, ids))

    def save(self, ctx: EngineContext, profile: Profile, changed: Sequence[Record], vectors: np.ndarray) -> None:
        col, key = self._collection(ctx), namespace_key(ctx)
        dim = vectors.shape[1] if len(changed) else ctx.embedder.dim  # no model call just to size the state entry
        ids, embeddings, documents, metadatas = (
            [self.STATE],
            [[1.0] + [0.0] * (dim - 1)],
            ["profile state"],
            [{"namespace": key, "kind": "state", "counter": profile.counter, "upto": profile.upto_id}],
        )
        for record, vector in zip(changed, vectors, strict=True):
            ids.append(record.id)
            embeddings.append([float(x) for x in vector])
            documents.append(record.render())
            data = json.dumps(record.to_json(), ensure_ascii=False)
            metadatas.append(
                {
                    "namespace": key,
                    "kind": "record",
                    "type": record.type,
                    "subject": record.subject,
                    "key": record.key,
                    "record": data,
                }
            )
        col.upsert(ids=ids, embeddings=embeddings, documents=documents, metadatas=metadatas)

    def search(self, ctx: EngineContext, vector: np.ndarray, k: int, types: Sequence[str]) -> Scored:
        col = self._collection(ctx)
        total = col.count()
        if total <= 1:
            return []
        where = {"$and": [{"namespace": namespace_key(ctx)}, {"kind": "record"}, {"type": {"$in": list(types)}}]}
        found = col.query(
            query_embeddings=[[float(x) for x in vector]],
            n_results=min(k, total),
            where=where,
            include=["metadatas", "distances"],
        )
        rows = [
            (json.loads(meta["record"]), 1.0 - float(distance))
            for meta, distance in zip(found["metadatas"][0], found["distances"][0], strict=True)
            if meta.get("namespace") == namespace_key(ctx)
        ]
        seqs = ctx.store.seqs_of(ctx.ns, sorted({str(t) for row, _ in rows for t in Record.stored_turns(row)}))
        return [(Record.from_json(row, seqs), sim) for row, sim in rows]

    def drop(self, ctx: EngineContext) -> None:
        """Delete the namespace's collection and every trace of it on disk."""
        client = self.client()
        name = self.collection_name(ctx)
        if name not in {c.name if hasattr(c, "name") else str(c) for c in client.list_collections()}:
            return
        client.delete_collection(name)
        self.vacuum()

    def vacuum(self) -> None:
        """Rewrite Chroma's SQLite file without free pages (deleted text is not left in them) and remove index
        directories of deleted collections."""
        database = self.path / "chroma.sqlite3"
        if database.exists():
            con = sqlite3.connect(database, timeout=30)
            try:
                con.execute("VACUUM")
                live = {row[0] for row in con.execute("SELECT id FROM segments")}
            finally:
                con.close()
            for child in self.path.iterdir():
                if child.is_dir() and child.name not in live:
                    shutil.rmtree(child, ignore_errors=True)
