"""What a cuemem PostgreSQL database holds (docs/design.md promise 8): the schema `cuemem`, its tables, the advisory
locks its writers take, its migrations, and the reversible escaping of user text (PostgreSQL text cannot hold NUL).
"""

from __future__ import annotations

import re
from typing import Any

SCHEMA_VERSION = 2
SCHEMA = "cuemem"
# Writers (issue 36): a write to one namespace holds WRITE_LOCK shared and its namespace's lock exclusive, so writers
# of different namespaces run side by side and writers of one namespace one at a time; a write not scoped to one
# namespace (schema-wide declarations, deleting several namespaces at once) holds WRITE_LOCK exclusive.
WRITE_LOCK = 0x63756D6D_00000001
INIT_LOCK = 0x63756D6D_00000002  # creating or migrating the schema
NAMESPACE_LOCKS = 0x63756D6E_00000000  # + the namespace id (its low 32 bits): that namespace's writer lock


def write_locks(ns: int | None) -> list[tuple[str, tuple[int]]]:
    """The advisory locks a write transaction scoped to namespace `ns` (None: the whole store) takes first, in
    this order. Two namespace ids 2**32 apart share a lock: only more waiting."""
    if ns is None:
        return [("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK,))]
    return [
        ("SELECT pg_advisory_xact_lock_shared(%s)", (WRITE_LOCK,)),
        ("SELECT pg_advisory_xact_lock(%s)", (NAMESPACE_LOCKS + (ns & 0xFFFFFFFF),)),
    ]


TABLES = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS namespaces(
    id BIGSERIAL PRIMARY KEY,
    user_id TEXT NOT NULL,
    agent_id TEXT NOT NULL DEFAULT '',
    run_id TEXT NOT NULL DEFAULT '',
    created_at DOUBLE PRECISION NOT NULL,
    UNIQUE(user_id, agent_id, run_id)
);
-- The durable log: rows are inserted and deleted, never updated. seq orders the log (writers are serialised).
CREATE TABLE IF NOT EXISTS turns(
    ns BIGINT NOT NULL REFERENCES namespaces(id),
    seq BIGSERIAL NOT NULL,
    turn_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    speaker TEXT NOT NULL,
    text TEXT NOT NULL,
    timestamp TEXT,
    metadata TEXT NOT NULL DEFAULT '{}',
    added_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY(ns, seq),
    UNIQUE(ns, turn_id)
) PARTITION BY HASH (ns);
CREATE INDEX IF NOT EXISTS turns_by_session ON turns(ns, session_id, seq);
CREATE TABLE IF NOT EXISTS derived_specs(
    owner TEXT NOT NULL,
    space TEXT NOT NULL,
    on_delete TEXT NOT NULL,
    PRIMARY KEY(owner, space)
);
CREATE TABLE IF NOT EXISTS items(
    ns BIGINT NOT NULL REFERENCES namespaces(id),
    id BIGSERIAL NOT NULL,
    space TEXT NOT NULL,
    key TEXT NOT NULL,
    text TEXT NOT NULL,
    meta TEXT NOT NULL DEFAULT '{}',
    tokens INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY(ns, id),
    UNIQUE(ns, space, key)
) PARTITION BY HASH (ns);
CREATE INDEX IF NOT EXISTS items_by_space ON items(ns, space, id);
CREATE TABLE IF NOT EXISTS item_turns(
    ns BIGINT NOT NULL,
    item BIGINT NOT NULL,
    turn_seq BIGINT NOT NULL,
    cited SMALLINT NOT NULL DEFAULT 1,
    PRIMARY KEY(ns, item, turn_seq),
    FOREIGN KEY(ns, item) REFERENCES items(ns, id) ON DELETE CASCADE
) PARTITION BY HASH (ns);
CREATE INDEX IF NOT EXISTS item_turns_by_turn ON item_turns(ns, turn_seq);
CREATE TABLE IF NOT EXISTS vectors(
    ns BIGINT NOT NULL,
    item BIGINT NOT NULL,
    model TEXT NOT NULL,
    id BIGSERIAL NOT NULL,
    space TEXT NOT NULL,
    text_hash TEXT NOT NULL,
    vec vector NOT NULL,
    PRIMARY KEY(ns, item, model),
    FOREIGN KEY(ns, item) REFERENCES items(ns, id) ON DELETE CASCADE
) PARTITION BY HASH (ns);
CREATE INDEX IF NOT EXISTS vectors_by_space ON vectors(ns, space, model, id);
CREATE INDEX IF NOT EXISTS vectors_by_hash ON vectors(ns, text_hash);
CREATE TABLE IF NOT EXISTS labels(
    ns BIGINT NOT NULL,
    item BIGINT NOT NULL,
    kind TEXT NOT NULL,
    label TEXT NOT NULL,
    PRIMARY KEY(ns, item, kind, label),
    FOREIGN KEY(ns, item) REFERENCES items(ns, id) ON DELETE CASCADE
) PARTITION BY HASH (ns);
CREATE INDEX IF NOT EXISTS labels_by_label ON labels(ns, kind, label);
CREATE TABLE IF NOT EXISTS kv(
    ns BIGINT NOT NULL REFERENCES namespaces(id),
    engine TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY(ns, engine, key)
) PARTITION BY HASH (ns);
CREATE TABLE IF NOT EXISTS embed_cache(
    ns BIGINT NOT NULL REFERENCES namespaces(id),
    text_hash TEXT NOT NULL,
    model TEXT NOT NULL,
    vec BYTEA NOT NULL,
    PRIMARY KEY(ns, text_hash, model)
) PARTITION BY HASH (ns);
CREATE TABLE IF NOT EXISTS llm_calls(
    ns BIGINT NOT NULL REFERENCES namespaces(id),
    key TEXT NOT NULL,
    backend TEXT NOT NULL,
    method TEXT NOT NULL,
    stage TEXT NOT NULL,
    request TEXT NOT NULL,
    response TEXT NOT NULL,
    prompt_tokens INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    seconds DOUBLE PRECISION NOT NULL DEFAULT 0,
    at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY(ns, key)
) PARTITION BY HASH (ns);
CREATE TABLE IF NOT EXISTS watermarks(
    ns BIGINT NOT NULL REFERENCES namespaces(id),
    engine TEXT NOT NULL,
    upto BIGINT NOT NULL,
    PRIMARY KEY(ns, engine)
);
CREATE TABLE IF NOT EXISTS epochs(ns BIGINT PRIMARY KEY, epoch BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS history(
    id BIGSERIAL NOT NULL,
    ns BIGINT,
    at DOUBLE PRECISION NOT NULL,
    op TEXT NOT NULL,
    detail TEXT NOT NULL DEFAULT '{}'
) PARTITION BY HASH (ns);
CREATE INDEX IF NOT EXISTS history_by_ns ON history(ns, id);
-- The HNSW indexes built for large (namespace, space, model) vector sets: partial indexes, one per partition.
CREATE TABLE IF NOT EXISTS vector_indexes(
    ns BIGINT NOT NULL,
    space TEXT NOT NULL,
    model TEXT NOT NULL,
    dims INTEGER NOT NULL,
    name TEXT NOT NULL,
    PRIMARY KEY(ns, space, model)
)
"""
# Every table holding user text is split by a hash of the namespace into PARTITIONS partitions `<table>_p<r>`
# (issue 36): the scrub after a delete (VACUUM FULL, scrub.py) rewrites and locks only the partitions of the
# namespace it touched, a 1/PARTITIONS share of the store, not every namespace's rows. Fixed when a store is created
# (meta `partitions`).
PARTITIONS = 16
PARTITIONED = ("turns", "items", "item_turns", "vectors", "labels", "kv", "embed_cache", "llm_calls", "history")

# Columns holding user text, or what is derived from it (vectors, hashes), keep no planner statistics: ANALYZE
# (autovacuum runs it by itself) copies sample values into pg_statistic, where a deleted turn's text would outlive
# checkpoint(). Every query names its keys, so the planner does not need them.
NO_STATISTICS = {
    "namespaces": ("user_id", "agent_id", "run_id"),
    "turns": ("turn_id", "session_id", "speaker", "text", "timestamp", "metadata"),
    "items": ("key", "text", "meta"),
    "vectors": ("text_hash", "vec"),
    "labels": ("label",),
    "kv": ("key", "value"),
    "embed_cache": ("text_hash", "vec"),
    "llm_calls": ("key", "request", "response"),
    "history": ("detail",),
}
# Vectors stay inline in the row (compressed only if that saves a quarter, out of line only if the row cannot fit a
# page): a 512-float vector just passes TOAST's 2 KB threshold, and detoasting each one made an exact scan of 10k
# vectors take ~100 ms (benchmarks/scale.py).
STORAGE = "ALTER TABLE vectors ALTER COLUMN vec SET STORAGE MAIN"


def partition_name(table: str, remainder: int) -> str:
    return f"{table}_p{remainder}"


def schema_statements(partitions: int = PARTITIONS) -> list[str]:
    """The statements creating the schema's tables (in search_path `cuemem`), their partitions, then the column
    settings (ALTER TABLE on a partitioned table reaches its partitions)."""
    statements = [statement for statement in TABLES.split(";") if statement.strip()]
    statements += [
        f"CREATE TABLE IF NOT EXISTS {partition_name(table, r)} PARTITION OF {table}"
        f" FOR VALUES WITH (MODULUS {partitions}, REMAINDER {r})"
        for table in PARTITIONED
        for r in range(partitions)
    ]
    statements += [
        f"ALTER TABLE {table} ALTER COLUMN {column} SET STATISTICS 0"
        for table, columns in NO_STATISTICS.items()
        for column in columns
    ]
    return [*statements, STORAGE]


# Tables holding user text: what checkpoint() rewrites.
TEXT_TABLES = (
    "turns",
    "items",
    "item_turns",
    "vectors",
    "labels",
    "kv",
    "embed_cache",
    "llm_calls",
    "history",
    "namespaces",
)
_SERIALS = (("turns", "seq"), ("items", "id"), ("vectors", "id"), ("history", "id"))


def partition_tables(c: Any, rebuild_index: Any, partitions: int = PARTITIONS) -> None:
    """Schema 1 -> 2: the tables holding user text become hash-partitioned by namespace. Each is renamed aside
    (with its indexes), created anew with its partitions, filled from the old one in one statement, and the old
    one dropped; the serial counters go on where they were, and the HNSW indexes are built again on the partitions
    (`rebuild_index(c, ns, space, model, dims)`). One transaction: a failure leaves schema 1 as it was."""
    c.execute(f"SET LOCAL search_path = {SCHEMA}, public")
    for (name,) in c.execute("SELECT name FROM vector_indexes").fetchall():
        c.execute(f'DROP INDEX IF EXISTS {SCHEMA}."{name}"')
    for table in PARTITIONED:
        for (index,) in c.execute(
            "SELECT indexname FROM pg_indexes WHERE schemaname = %s AND tablename = %s", (SCHEMA, table)
        ).fetchall():
            c.execute(f'ALTER INDEX "{index}" RENAME TO "v1_{index}"')
        c.execute(f"ALTER TABLE {table} RENAME TO v1_{table}")
    for statement in schema_statements(partitions):
        c.execute(statement)
    for table in PARTITIONED:
        c.execute(f"INSERT INTO {table} SELECT * FROM v1_{table}")
    for table, column in _SERIALS:
        old = c.execute("SELECT pg_get_serial_sequence(%s, %s)", (f"{SCHEMA}.v1_{table}", column)).fetchone()[0]
        last, called = c.execute(f"SELECT last_value, is_called FROM {old}").fetchone()
        c.execute("SELECT setval(pg_get_serial_sequence(%s, %s), %s, %s)", (f"{SCHEMA}.{table}", column, last, called))
    c.execute("DROP TABLE " + ", ".join(f"v1_{table}" for table in PARTITIONED) + " CASCADE")
    for ns, space, model, dims in c.execute("SELECT ns, space, model, dims FROM vector_indexes").fetchall():
        rebuild_index(c, int(ns), space, model, int(dims))
    c.execute(
        "INSERT INTO meta(key, value) VALUES('partitions', %s) ON CONFLICT(key) DO UPDATE SET value=excluded.value",
        (str(partitions),),
    )


# version -> function(conn, rebuild_index, partitions) bringing the schema to version + 1
MIGRATIONS: dict[int, Any] = {1: partition_tables}


_ESC = "\ue000"
_ESCAPED = re.compile(_ESC + "(.)", re.S)


def encode_text(value: str) -> str:
    """Text as PostgreSQL can hold it: NUL (and the escape character itself) escaped reversibly."""
    if "\x00" not in value and _ESC not in value:
        return value
    return value.replace(_ESC, _ESC + _ESC).replace("\x00", _ESC + "0")


def decode_text(value: str) -> str:
    """The inverse of `encode_text`."""
    if _ESC not in value:
        return value
    return _ESCAPED.sub(lambda m: "\x00" if m.group(1) == "0" else m.group(1), value)
