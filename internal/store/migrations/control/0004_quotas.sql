-- Per-org quota overrides (a JSON quota.Policy; absent fields take the
-- server's). No row: the server's policy.
CREATE TABLE org_quotas (
	org        TEXT PRIMARY KEY,
	policy     TEXT NOT NULL,
	updated_at INTEGER NOT NULL
);
