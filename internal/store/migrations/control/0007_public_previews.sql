-- Which org a sandbox with public ports is in: a request to a public
-- preview names only the sandbox, and finding its org must be one lookup,
-- not a search of every org's store (the request carries no credential).
-- Written at the lease, dropped at the end; a row left by a crash points
-- at a sandbox that is gone, which the lookup then refuses.
CREATE TABLE public_previews (
	id  TEXT PRIMARY KEY,
	org TEXT NOT NULL
);
