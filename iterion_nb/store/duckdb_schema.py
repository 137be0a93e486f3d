"""The DuckDB schema, as numbered migrations applied in order.

``schema_migrations`` records which versions a file has; opening a file
applies the missing ones, each in its own transaction. A file from a newer
iterion_nb (a version we do not know) is refused rather than touched.
"""

from __future__ import annotations

#: Marks a DuckDB file as ours; a database without it belongs to someone else.
APP_MARK = "iterion_nb"

MIGRATIONS: list[tuple[int, str]] = [
    (
        1,
        """
        CREATE TABLE iterion_meta (key VARCHAR PRIMARY KEY, value VARCHAR);
        CREATE TABLE runs (
            id VARCHAR PRIMARY KEY,
            workflow VARCHAR NOT NULL,
            source_hash VARCHAR NOT NULL,
            status VARCHAR NOT NULL,
            created_at TIMESTAMP NOT NULL,
            updated_at TIMESTAMP NOT NULL,
            source VARCHAR NOT NULL,
            vars VARCHAR NOT NULL,
            error VARCHAR,
            checkpoint VARCHAR
        );
        CREATE TABLE events (
            run_id VARCHAR NOT NULL,
            seq BIGINT NOT NULL,
            type VARCHAR NOT NULL,
            occurred_at TIMESTAMP NOT NULL,
            node_id VARCHAR,
            branch_id VARCHAR,
            data VARCHAR NOT NULL
        );
        CREATE TABLE artifacts (
            run_id VARCHAR NOT NULL,
            name VARCHAR NOT NULL,
            version INTEGER NOT NULL,
            node_id VARCHAR NOT NULL,
            value VARCHAR NOT NULL,
            created_at TIMESTAMP NOT NULL,
            PRIMARY KEY (run_id, name, version)
        );
        CREATE SEQUENCE interaction_order;
        CREATE TABLE interactions (
            id VARCHAR PRIMARY KEY,
            n BIGINT NOT NULL DEFAULT nextval('interaction_order'),
            run_id VARCHAR NOT NULL,
            node_id VARCHAR NOT NULL,
            branch_id VARCHAR,
            kind VARCHAR NOT NULL,
            questions VARCHAR NOT NULL,
            options VARCHAR NOT NULL,
            allow_free_text BOOLEAN NOT NULL,
            waits_on VARCHAR NOT NULL,
            requested_at TIMESTAMP NOT NULL,
            answered_at TIMESTAMP,
            answers VARCHAR,
            answered_by VARCHAR
        );
        CREATE INDEX interactions_by_run ON interactions (run_id);
        CREATE SEQUENCE message_order;
        CREATE TABLE messages (
            id VARCHAR PRIMARY KEY,
            n BIGINT NOT NULL DEFAULT nextval('message_order'),
            run_id VARCHAR NOT NULL,
            node_id VARCHAR NOT NULL,
            text VARCHAR NOT NULL,
            created_at TIMESTAMP NOT NULL,
            delivered_at TIMESTAMP
        );
        """,
    ),
    (
        2,
        # Run ownership (a lease renewed by the owner's heartbeat), a cancel
        # request for the owner, and what the run was launched with.
        """
        ALTER TABLE runs ADD COLUMN owner_id VARCHAR;
        ALTER TABLE runs ADD COLUMN owner_pid BIGINT;
        ALTER TABLE runs ADD COLUMN owner_host VARCHAR;
        ALTER TABLE runs ADD COLUMN owner_since TIMESTAMP;
        ALTER TABLE runs ADD COLUMN lease_expires_at TIMESTAMP;
        ALTER TABLE runs ADD COLUMN cancel_requested BOOLEAN DEFAULT false;
        ALTER TABLE runs ADD COLUMN launch VARCHAR;
        """,
    ),
    (
        3,
        # DuckDB 2.0.1 replays an UPDATE from its write-ahead log without its text
        # columns when the table has a secondary index, the row was in the last
        # checkpoint and a row was inserted since: an answer committed before a
        # crash would come back answered, with no answer. No secondary index on
        # a table we update (pending questions are served from memory anyway);
        # a drain records its token, so a drain repeated after its reply was lost
        # returns what it took.
        """
        DROP INDEX interactions_by_run;
        ALTER TABLE messages ADD COLUMN drain_token VARCHAR;
        """,
    ),
    (
        4,
        # Questions that end well: an expiry, an end without an answer (expired or
        # retracted, with a reason), amendments, and what an answer must be.
        """
        ALTER TABLE interactions ADD COLUMN expires_at TIMESTAMP;
        ALTER TABLE interactions ADD COLUMN ended VARCHAR;
        ALTER TABLE interactions ADD COLUMN ended_at TIMESTAMP;
        ALTER TABLE interactions ADD COLUMN end_reason VARCHAR;
        ALTER TABLE interactions ADD COLUMN revision INTEGER DEFAULT 0;
        ALTER TABLE interactions ADD COLUMN accepts VARCHAR;
        """,
    ),
]

LATEST = MIGRATIONS[-1][0]
