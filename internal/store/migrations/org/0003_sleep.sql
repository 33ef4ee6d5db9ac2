-- A sleeping sandbox has no container but keeps its row, its volume and its
-- project; checkpoint names the saved memory to restore on wake, if any.
ALTER TABLE sandboxes ADD COLUMN checkpoint TEXT NOT NULL DEFAULT '';
DROP INDEX sandboxes_one_live_per_project;
CREATE UNIQUE INDEX sandboxes_one_live_per_project ON sandboxes (org, project)
	WHERE project != '' AND status IN ('pending', 'running', 'sleeping');
