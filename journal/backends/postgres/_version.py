"""The PostgreSQL store's format version: a module of its own, read by the registry entry,
the schema and the migration alike, so that none of them imports another for it."""

# 1: every table `(k bytea, v bytea)` with LMDB's keys, no invocation_id column
FORMAT_VERSION = 2
