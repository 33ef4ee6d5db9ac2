-- The org's own images (pulled, imported or saved from a sandbox): a name
-- pointing at the digest of an unpacked image. Their bytes count against
-- the org's disk quota.
CREATE TABLE images (
	org        TEXT NOT NULL,
	name       TEXT NOT NULL,
	digest     TEXT NOT NULL,
	source     TEXT NOT NULL,
	size_bytes INTEGER NOT NULL,
	created_at INTEGER NOT NULL,
	PRIMARY KEY (org, name)
);
