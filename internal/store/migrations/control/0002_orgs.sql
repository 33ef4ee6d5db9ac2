-- Every org that ever had a store, so background work (the reaper) can visit
-- each per-org file without guessing raw names from slugged directories.
CREATE TABLE orgs (
	name       TEXT PRIMARY KEY,
	slug       TEXT NOT NULL,
	created_at INTEGER NOT NULL
);
