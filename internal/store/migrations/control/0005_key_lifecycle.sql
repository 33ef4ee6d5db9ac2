-- Keys have a lifecycle: a public id (from the hash, safe to show), the last
-- use (stamped at most once a minute) and an optional expiry (0: none).
-- Revoking a key deletes its row.
ALTER TABLE api_keys ADD COLUMN last_used_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE api_keys ADD COLUMN expires_at INTEGER NOT NULL DEFAULT 0;
