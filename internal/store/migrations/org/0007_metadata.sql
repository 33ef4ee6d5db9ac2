-- A sandbox's metadata: the caller's string map (bounded by the service),
-- as a JSON object, filtered with json_extract.
ALTER TABLE sandboxes ADD COLUMN metadata TEXT NOT NULL DEFAULT '{}';
