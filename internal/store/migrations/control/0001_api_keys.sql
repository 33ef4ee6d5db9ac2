CREATE TABLE api_keys (
	hash       TEXT PRIMARY KEY, -- hex sha256 of the key; the key itself is never stored
	org        TEXT NOT NULL,
	subject    TEXT NOT NULL,
	prefix     TEXT NOT NULL,    -- first characters, to recognise a key in a list
	created_at INTEGER NOT NULL
);
CREATE INDEX api_keys_org ON api_keys (org);
