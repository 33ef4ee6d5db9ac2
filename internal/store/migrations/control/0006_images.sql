-- The operator's images, offered to every org: a name pointing at the
-- digest of an unpacked image.
CREATE TABLE server_images (
	name       TEXT PRIMARY KEY,
	digest     TEXT NOT NULL,
	source     TEXT NOT NULL,
	size_bytes INTEGER NOT NULL,
	created_at INTEGER NOT NULL
);
