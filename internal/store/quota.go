package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/sandboxd/sandbox/internal/quota"
	"github.com/sandboxd/sandbox/internal/sandbox"
)

type queryer interface {
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row
}

// Use is what the org in ctx holds now, as the quotas count it (commands,
// which live in memory, excepted), and whether project (if not empty) would
// be a new one.
func (s *Store) Use(ctx context.Context, project string) (quota.Use, bool, error) {
	db, org, err := s.orgDB(ctx)
	if err != nil {
		return quota.Use{}, false, err
	}
	u, err := use(ctx, db, org)
	if err != nil || project == "" {
		return u, false, err
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM projects WHERE org = ? AND name = ?`, org, project).Scan(&n); err != nil {
		return u, false, fmt.Errorf("store: use: %w", err)
	}
	return u, n == 0, nil
}

func use(ctx context.Context, q queryer, org string) (quota.Use, error) {
	u := quota.Use{Live: map[string]int{}}
	rows, err := q.QueryContext(ctx, `SELECT class, status, checkpoint != '', COUNT(*) FROM sandboxes
		WHERE org = ? AND status IN ('pending', 'running', 'sleeping') GROUP BY class, status, checkpoint != ''`, org)
	if err != nil {
		return u, fmt.Errorf("store: use: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var class, status string
		var checkpoint bool
		var n int
		if err := rows.Scan(&class, &status, &checkpoint, &n); err != nil {
			return u, fmt.Errorf("store: use: %w", err)
		}
		c, err := sandbox.LookupClass(class)
		if err != nil {
			continue // a class this release no longer has holds nothing
		}
		u.Live[class] += n
		switch sandbox.Status(status) {
		case sandbox.StatusPending, sandbox.StatusRunning:
			u.CPUs += float64(n) * c.Limits.CPUs
			u.MemoryMiB += int64(n) * c.Limits.MemoryMiB
		case sandbox.StatusSleeping:
			if checkpoint {
				u.DiskMiB += int64(n) * c.Limits.MemoryMiB
			}
		}
	}
	if err := rows.Err(); err != nil {
		return u, fmt.Errorf("store: use: %w", err)
	}
	var disk sql.NullInt64
	if err := q.QueryRowContext(ctx, `SELECT COUNT(*), SUM(size_mib) FROM projects WHERE org = ?`, org).Scan(&u.Projects, &disk); err != nil {
		return u, fmt.Errorf("store: use: projects: %w", err)
	}
	u.DiskMiB += disk.Int64
	// The org's images, each digest once, rounded up to whole MiB.
	var images sql.NullInt64
	if err := q.QueryRowContext(ctx, `SELECT SUM(b) FROM (SELECT MAX(size_bytes) AS b FROM images WHERE org = ? GROUP BY digest)`, org).Scan(&images); err != nil {
		return u, fmt.Errorf("store: use: images: %w", err)
	}
	u.DiskMiB += (images.Int64 + 1<<20 - 1) >> 20
	return u, nil
}

// Project is a project whose volume the org keeps.
type Project struct {
	Name       string    `json:"project"`
	Volume     string    `json:"-"`
	SizeMiB    int64     `json:"sizeMiB"`
	CreatedAt  time.Time `json:"createdAt"`
	LastUsedAt time.Time `json:"lastUsedAt"`
	// LiveSandbox is the live sandbox holding it, if any.
	LiveSandbox string `json:"liveSandbox,omitempty"`
}

// Projects lists the org's projects, most recently used first.
func (s *Store) Projects(ctx context.Context) ([]Project, error) {
	db, org, err := s.orgDB(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := db.QueryContext(ctx, `SELECT p.name, p.volume, p.size_mib, p.created_at,
			MAX(p.last_used_at, COALESCE(MAX(s.last_used_at), 0)), COALESCE(MAX(CASE WHEN s.status IN ('pending', 'running', 'sleeping') THEN s.id END), '')
		FROM projects p LEFT JOIN sandboxes s ON s.org = p.org AND s.project = p.name
		WHERE p.org = ? GROUP BY p.name ORDER BY 5 DESC, p.name`, org)
	if err != nil {
		return nil, fmt.Errorf("store: projects: %w", err)
	}
	defer rows.Close()
	out := []Project{}
	for rows.Next() {
		var p Project
		var created, used int64
		if err := rows.Scan(&p.Name, &p.Volume, &p.SizeMiB, &created, &used, &p.LiveSandbox); err != nil {
			return nil, fmt.Errorf("store: projects: %w", err)
		}
		p.CreatedAt, p.LastUsedAt = fromMillis(created), fromMillis(used)
		out = append(out, p)
	}
	return out, rows.Err()
}

// ErrProjectLive refuses dropping a project a live sandbox holds.
var ErrProjectLive = errors.New("store: a live sandbox holds the project")

// DropProject forgets a project whose volume is gone (purged). With
// ifFree, it refuses (ErrProjectLive, with the holder's id) while a live
// sandbox holds it, checked in the same transaction. A project the org
// does not have is KindNotFound.
func (s *Store) DropProject(ctx context.Context, name string, ifFree bool) (Project, error) {
	db, org, err := s.orgDB(ctx)
	if err != nil {
		return Project{}, err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return Project{}, fmt.Errorf("store: drop project: %w", err)
	}
	defer tx.Rollback()
	var p Project
	var created, used int64
	err = tx.QueryRowContext(ctx, `SELECT name, volume, size_mib, created_at, last_used_at FROM projects WHERE org = ? AND name = ?`, org, name).
		Scan(&p.Name, &p.Volume, &p.SizeMiB, &created, &used)
	if errors.Is(err, sql.ErrNoRows) {
		return Project{}, sandbox.Errorf(sandbox.KindNotFound, "no project %q", name)
	}
	if err != nil {
		return Project{}, fmt.Errorf("store: drop project: %w", err)
	}
	p.CreatedAt, p.LastUsedAt = fromMillis(created), fromMillis(used)
	if ifFree {
		live, err := liveInProject(ctx, tx, org, name)
		if err != nil {
			return Project{}, err
		}
		if live != nil {
			p.LiveSandbox = live.ID
			return p, fmt.Errorf("%w: %s", ErrProjectLive, live.ID)
		}
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM projects WHERE org = ? AND name = ?`, org, name); err != nil {
		return Project{}, fmt.Errorf("store: drop project: %w", err)
	}
	return p, tx.Commit()
}

// OrgQuota returns the quota override of org (the zero Policy when it has
// none). It reads the control database on every call, so a change by the
// operator (or the CLI, on the data directory) applies to the next call.
func (s *Store) OrgQuota(ctx context.Context, org string) (quota.Policy, error) {
	var raw string
	err := s.control.QueryRowContext(ctx, `SELECT policy FROM org_quotas WHERE org = ?`, org).Scan(&raw)
	if errors.Is(err, sql.ErrNoRows) {
		return quota.Policy{}, nil
	}
	if err != nil {
		return quota.Policy{}, fmt.Errorf("store: quota: %w", err)
	}
	var p quota.Policy
	if err := json.Unmarshal([]byte(raw), &p); err != nil {
		return quota.Policy{}, fmt.Errorf("store: quota of %q: %w", org, err)
	}
	return p, nil
}

// SetOrgQuota replaces org's quota override; the zero Policy removes it.
func (s *Store) SetOrgQuota(ctx context.Context, org string, p quota.Policy) error {
	if err := p.Validate(); err != nil {
		return sandbox.Wrap(sandbox.KindInvalid, err, err.Error())
	}
	raw, err := json.Marshal(p)
	if err != nil {
		return err
	}
	if string(raw) == "{}" {
		_, err = s.control.ExecContext(ctx, `DELETE FROM org_quotas WHERE org = ?`, org)
	} else {
		_, err = s.control.ExecContext(ctx, `INSERT INTO org_quotas (org, policy, updated_at) VALUES (?, ?, ?)
			ON CONFLICT (org) DO UPDATE SET policy = excluded.policy, updated_at = excluded.updated_at`, org, string(raw), time.Now().UnixMilli())
	}
	if err != nil {
		return fmt.Errorf("store: set quota: %w", err)
	}
	return nil
}
