CREATE TABLE sandboxes (
	id           TEXT PRIMARY KEY,
	org          TEXT NOT NULL,
	class        TEXT NOT NULL,
	project      TEXT NOT NULL DEFAULT '',
	status       TEXT NOT NULL,
	image        TEXT NOT NULL,
	runtime      TEXT NOT NULL,
	workdir      TEXT NOT NULL,
	name         TEXT NOT NULL UNIQUE,
	uid          TEXT NOT NULL DEFAULT '',
	volume       TEXT NOT NULL,
	created_at   INTEGER NOT NULL,
	last_used_at INTEGER NOT NULL,
	expires_at   INTEGER NOT NULL,
	error        TEXT NOT NULL DEFAULT ''
);
CREATE INDEX sandboxes_newest ON sandboxes (org, created_at DESC, id DESC);
-- A project has at most one live sandbox; the index makes a racing second
-- lease fail at insert even if both passed the read-only check.
CREATE UNIQUE INDEX sandboxes_one_live_per_project ON sandboxes (org, project)
	WHERE project != '' AND status IN ('pending', 'running');
