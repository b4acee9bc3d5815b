CREATE TABLE commands (
        session_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        command_id TEXT NOT NULL,
        request_id TEXT,
        kind TEXT NOT NULL,
        input TEXT NOT NULL,
        meta TEXT,
        state TEXT NOT NULL,
        terminal TEXT,
        accepted_at INTEGER NOT NULL,
        settled_at INTEGER,
        turn_id TEXT,
        attempt INTEGER NOT NULL DEFAULT 0,
        started_at INTEGER,
        retry_at INTEGER,
        last_error TEXT,
        usage TEXT,
        settlement TEXT,
        PRIMARY KEY (session_id, seq)
    ) WITHOUT ROWID;
CREATE UNIQUE INDEX commands_by_request ON commands (session_id, request_id)
        WHERE request_id IS NOT NULL;
CREATE INDEX commands_unsettled ON commands (session_id, seq) WHERE settled_at IS NULL;
CREATE TABLE fences (
        session_id TEXT NOT NULL,
        request_id TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        PRIMARY KEY (session_id, request_id)
    ) WITHOUT ROWID;
CREATE TABLE messages (
        session_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        body TEXT NOT NULL,
        bytes INTEGER NOT NULL,
        PRIMARY KEY (session_id, seq)
    ) WITHOUT ROWID;
CREATE TABLE session_grants (
        session_id TEXT PRIMARY KEY,
        version INTEGER NOT NULL,
        grants TEXT NOT NULL,
        delivered_at INTEGER NOT NULL
    ) WITHOUT ROWID;
CREATE TABLE sessions (
        seq INTEGER PRIMARY KEY,
        session_id TEXT NOT NULL UNIQUE,
        created_at INTEGER NOT NULL
    );
CREATE TABLE shiitake_attention (
                    session_id TEXT NOT NULL,
                    ext TEXT NOT NULL,
                    id TEXT NOT NULL,
                    kind TEXT NOT NULL,
                    summary TEXT NOT NULL,
                    since INTEGER NOT NULL,
                    expires_at INTEGER,
                    updated_at INTEGER NOT NULL,
                    PRIMARY KEY (session_id, ext, id)
                ) WITHOUT ROWID;
CREATE INDEX shiitake_attention_by_ext ON shiitake_attention (ext);
CREATE TABLE shiitake_delivery (
        seq INTEGER PRIMARY KEY,
        key TEXT NOT NULL UNIQUE,
        body TEXT NOT NULL,
        at INTEGER NOT NULL
    );
CREATE TABLE shiitake_directory (
                seq INTEGER PRIMARY KEY,
                agent_id TEXT NOT NULL UNIQUE,
                name TEXT,
                creator TEXT,
                request_id TEXT,
                model TEXT,
                reasoning TEXT,
                archived INTEGER NOT NULL DEFAULT 0,
                created_at INTEGER NOT NULL,
                updated_at INTEGER NOT NULL
            );
CREATE UNIQUE INDEX shiitake_directory_by_request ON shiitake_directory (creator, request_id)
             WHERE request_id IS NOT NULL;
CREATE INDEX shiitake_directory_listed ON shiitake_directory (archived, seq);
CREATE TABLE shiitake_directory_erased (
                agent_id TEXT PRIMARY KEY,
                erased_at INTEGER NOT NULL
            ) WITHOUT ROWID;
CREATE TABLE shiitake_ext_history (
            session_id TEXT NOT NULL,
            ext TEXT NOT NULL,
            body TEXT NOT NULL,
            PRIMARY KEY (session_id, ext)
        ) WITHOUT ROWID;
CREATE TABLE shiitake_ext_log (
                seq INTEGER PRIMARY KEY,
                session_id TEXT NOT NULL,
                command_id TEXT NOT NULL
            );
CREATE TABLE shiitake_ext_requests (
                ext TEXT NOT NULL,
                scope TEXT NOT NULL,
                request_id TEXT NOT NULL,
                command TEXT NOT NULL,
                input TEXT NOT NULL,
                result TEXT NOT NULL,
                at INTEGER NOT NULL
            );
CREATE UNIQUE INDEX shiitake_ext_requests_id ON shiitake_ext_requests (ext, scope, request_id);
CREATE TABLE shiitake_ext_timers (
                ext TEXT NOT NULL,
                name TEXT NOT NULL,
                due_at INTEGER NOT NULL,
                session_id TEXT,
                payload TEXT NOT NULL,
                PRIMARY KEY (ext, name)
            ) WITHOUT ROWID;
CREATE INDEX shiitake_ext_timers_due ON shiitake_ext_timers (due_at);
CREATE TABLE shiitake_extensions (
                id TEXT PRIMARY KEY,
                revision TEXT NOT NULL,
                state_version INTEGER NOT NULL,
                stopped TEXT,
                stopped_at INTEGER,
                cursor INTEGER,
                updated_at INTEGER NOT NULL
            ) WITHOUT ROWID;
CREATE TABLE shiitake_files (
    path TEXT PRIMARY KEY,
    content TEXT NOT NULL,
    bytes INTEGER NOT NULL,
    modified_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE shiitake_files_journal (
    id INTEGER NOT NULL,
    file INTEGER NOT NULL,
    part INTEGER NOT NULL,
    port TEXT NOT NULL,
    session_id TEXT NOT NULL,
    command_id TEXT NOT NULL,
    call_id TEXT NOT NULL,
    path TEXT NOT NULL,
    before TEXT,
    after TEXT,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (id, file, part)
);
CREATE TABLE shiitake_fleet_member (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE shiitake_host_lane (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        attempts INTEGER NOT NULL,
        retry_at INTEGER NOT NULL,
        error TEXT NOT NULL
    );
CREATE TABLE shiitake_hosted_sessions (session_id TEXT PRIMARY KEY) WITHOUT ROWID;
CREATE TABLE shiitake_mail_inbox (
                key TEXT PRIMARY KEY,
                digest TEXT NOT NULL,
                session_id TEXT NOT NULL,
                command_id TEXT NOT NULL,
                from_agent TEXT NOT NULL,
                from_session TEXT NOT NULL,
                to_agent TEXT NOT NULL,
                reply_to TEXT NOT NULL,
                facts TEXT,
                received_at INTEGER NOT NULL
            ) WITHOUT ROWID;
CREATE INDEX shiitake_mail_inbox_by_command ON shiitake_mail_inbox (session_id, command_id);
CREATE TABLE shiitake_mail_outbox (
                key TEXT PRIMARY KEY,
                mail TEXT NOT NULL,
                reply_to TEXT NOT NULL,
                state TEXT NOT NULL,
                attempts INTEGER NOT NULL,
                next_at INTEGER,
                receipt TEXT,
                reason TEXT,
                error TEXT,
                replied_at INTEGER,
                created_at INTEGER NOT NULL,
                updated_at INTEGER NOT NULL
            ) WITHOUT ROWID;
CREATE INDEX shiitake_mail_outbox_due ON shiitake_mail_outbox (next_at)
             WHERE state = 'pending';
CREATE TABLE shiitake_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE shiitake_model_choice (
                    scope TEXT PRIMARY KEY,
                    model TEXT NOT NULL,
                    reasoning TEXT,
                    updated_at INTEGER NOT NULL
                ) WITHOUT ROWID;
