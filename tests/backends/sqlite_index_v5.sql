-- A SQLite index as lore wrote it before its migrations had names (schema version 5,
-- counted by PRAGMA user_version): two documents written with lore.testing.add_document
-- and the CountingEmbedder, then Connection.iterdump(). tests/test_migrations.py opens it.
BEGIN TRANSACTION;
CREATE TABLE alert_suggestions (
        tenant TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        time TEXT NOT NULL,
        event_id TEXT,
        record TEXT NOT NULL,
        PRIMARY KEY (tenant, fingerprint)
    ) WITHOUT ROWID;
CREATE TABLE chunk_labels (
            term TEXT NOT NULL,
            chunk INTEGER NOT NULL,
            PRIMARY KEY (term, chunk)
        ) WITHOUT ROWID;
INSERT INTO "chunk_labels" VALUES('source=test-source',1);
INSERT INTO "chunk_labels" VALUES('source_type=filesystem',1);
INSERT INTO "chunk_labels" VALUES('source=test-source',2);
INSERT INTO "chunk_labels" VALUES('source_type=filesystem',2);
CREATE TABLE chunk_vectors (
            chunk INTEGER PRIMARY KEY,
            embed_key TEXT NOT NULL,
            vector BLOB NOT NULL
        );
INSERT INTO "chunk_vectors" VALUES(1,'62a646b69b842f2b61a18068f9500b99d8e691b7e90b93f088e61b27a3d0dfda',X'42A904BE0000000042A9043E0000000000000000E2FD46BE0000000042A904BE0000000015843DBE41A9043E42A984BD42A984BDE2FD46BE15843D3E15843DBE00000000000000000000000042A984BD0000000000000000000000000000000042A9043E42A984BD15843D3E00000000000000001584BDBE000000000000000000000000000000000000000042A9843D42A9843D0000000042A904BE00000000000000000000000000000000000000000000000015843D3E42A984BD42A9843D42A9843D42A9843D00000000E09C973C38B81E3FE2FD46BE0000000042A984BD42A9843D42A984BD0000000042A9843D15843D3E000000000000000000000000');
INSERT INTO "chunk_vectors" VALUES(2,'caea61df3474d538fbb14dfc91c580ad315967212e130e94ea85f54df7be2dd0',X'10E400BE39CE8ABD000000000000000000000000553550BE2D4B46BE0000000000000000000000000000000000000000553550BE39CE8ABD0000000039CE8A3D00000000000000000000000039CE8ABD39CE8ABD000000002D4B46BE39CE8ABD2D4BC6BE0000000000000000000000000000000000000000000000000000000039CE8A3E000000002D4BC63E39CE8ABD00000000000000002D4B46BE39CE0ABE0000000000000000000000000000000039CE8ABD0000000039CE8ABD39CE8A3D39CE8A3D39CE0ABE00000000D1F36DBD39CE8A3E39CE8ABD39CE8ABD0000000039CE0A3E00000000000000002D4BC6BE39CE8A3D10E4003E10E400BE2D4B463E');
CREATE TABLE chunks (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            chunk_id TEXT NOT NULL,
            uri TEXT NOT NULL,
            ordinal INTEGER NOT NULL,
            section TEXT NOT NULL,
            title TEXT NOT NULL,
            revision TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            labels TEXT NOT NULL,
            content_hash TEXT NOT NULL,
            text TEXT NOT NULL
        );
INSERT INTO "chunks" VALUES(1,'runbooks/etcd.md#0#5dab92c89a87','runbooks/etcd.md',0,'','etcd quorum','rev-1','2024-05-01T12:30:00+00:00','{"source": "test-source", "source_type": "filesystem"}','5dab92c89a87a9f0cbd254f18f382129674d02b577127dad21d5699ad9114f95','etcd quorum lost: restore the etcd members from the last snapshot');
INSERT INTO "chunks" VALUES(2,'runbooks/disk.md#0#d2f5809f5337','runbooks/disk.md',0,'','Disk pressure','rev-1','2024-05-01T12:30:00+00:00','{"source": "test-source", "source_type": "filesystem"}','d2f5809f5337ba042cf3bf920895959fb1fc8b0514316f195b0cf7378082264e','disk pressure on a node: evict pods and clean the image cache');
CREATE TABLE documents (
            uri TEXT PRIMARY KEY,
            source TEXT NOT NULL,
            title TEXT NOT NULL,
            revision TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            labels TEXT NOT NULL,
            media_type TEXT NOT NULL,
            chunk_count INTEGER NOT NULL,
            indexed_at TEXT NOT NULL
        , access TEXT, tenant TEXT);
INSERT INTO "documents" VALUES('runbooks/etcd.md','test-source','etcd quorum','rev-1','2024-05-01T12:30:00+00:00','{"source": "test-source", "source_type": "filesystem"}','text/markdown',1,'2026-12-07T04:39:44.886441+00:00','["sre"]','acme');
INSERT INTO "documents" VALUES('runbooks/disk.md','test-source','Disk pressure','rev-1','2024-05-01T12:30:00+00:00','{"source": "test-source", "source_type": "filesystem"}','text/markdown',1,'2026-12-07T04:39:45.072238+00:00','["*"]',NULL);
CREATE TABLE fulltext_journal (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            op TEXT NOT NULL CHECK (op IN ('add', 'delete')),
            chunk INTEGER NOT NULL
        );
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
INSERT INTO "meta" VALUES('embedder_dimension','64');
INSERT INTO "meta" VALUES('embedder_model','test-counting-64');
INSERT INTO "meta" VALUES('generation','4');
CREATE TABLE reembed_vectors (embed_key TEXT PRIMARY KEY, vector BLOB NOT NULL);
CREATE TABLE retrieval_events (
        event_id TEXT PRIMARY KEY,
        time TEXT NOT NULL,
        tenant TEXT,
        empty INTEGER NOT NULL,
        degraded INTEGER NOT NULL,
        record TEXT NOT NULL
    );
CREATE TABLE retrieval_feedback (
        feedback_id TEXT PRIMARY KEY,
        event_id TEXT NOT NULL,
        time TEXT NOT NULL,
        record TEXT NOT NULL
    );
CREATE TABLE state (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
INSERT INTO "state" VALUES('last_sync','2024-05-01T12:30:00+00:00');
CREATE TABLE sync_run_sources (
            source TEXT NOT NULL,
            started_at TEXT NOT NULL,
            run_id TEXT NOT NULL,
            PRIMARY KEY (source, started_at, run_id)
        ) WITHOUT ROWID;
CREATE TABLE sync_runs (
            run_id TEXT PRIMARY KEY,
            started_at TEXT NOT NULL,
            finished_at TEXT NOT NULL,
            trigger TEXT NOT NULL,
            status TEXT NOT NULL,
            record TEXT NOT NULL
        );
CREATE INDEX documents_by_source ON documents (source);
CREATE INDEX chunks_by_uri ON chunks (uri);
CREATE INDEX chunk_vectors_by_key ON chunk_vectors (embed_key);
CREATE INDEX chunk_labels_by_chunk ON chunk_labels (chunk);
CREATE INDEX sync_runs_by_start ON sync_runs (started_at);
CREATE INDEX sync_run_sources_by_run ON sync_run_sources (run_id);
CREATE INDEX retrieval_events_by_time ON retrieval_events (time);
CREATE INDEX retrieval_feedback_by_event ON retrieval_feedback (event_id);
DELETE FROM "sqlite_sequence";
INSERT INTO "sqlite_sequence" VALUES('chunks',2);
INSERT INTO "sqlite_sequence" VALUES('fulltext_journal',2);
COMMIT;
PRAGMA user_version = 5;
