package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/sandboxd/sandbox/internal/sandbox"
)

// Image is a name for an unpacked image: an org's own, or (Server) the
// operator's, offered to every org.
type Image struct {
	Name      string
	Digest    string
	Source    string
	SizeBytes int64
	CreatedAt time.Time
	Server    bool
}

var errNoImage = sandbox.Errorf(sandbox.KindNotFound, "no such image")

// PutImage names digest for the org in ctx, replacing the name's digest.
func (s *Store) PutImage(ctx context.Context, im Image) error {
	db, org, err := s.orgDB(ctx)
	if err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, `INSERT OR REPLACE INTO images (org, name, digest, source, size_bytes, created_at) VALUES (?, ?, ?, ?, ?, ?)`,
		org, im.Name, im.Digest, im.Source, im.SizeBytes, millis(im.CreatedAt)); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	return nil
}

// PutServerImage names digest for every org.
func (s *Store) PutServerImage(ctx context.Context, im Image) error {
	if _, err := s.control.ExecContext(ctx, `INSERT OR REPLACE INTO server_images (name, digest, source, size_bytes, created_at) VALUES (?, ?, ?, ?, ?)`,
		im.Name, im.Digest, im.Source, im.SizeBytes, millis(im.CreatedAt)); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	return nil
}

func scanImages(rows *sql.Rows, server bool) ([]Image, error) {
	defer rows.Close()
	var out []Image
	for rows.Next() {
		im := Image{Server: server}
		var created int64
		if err := rows.Scan(&im.Name, &im.Digest, &im.Source, &im.SizeBytes, &created); err != nil {
			return nil, fmt.Errorf("store: %w", err)
		}
		im.CreatedAt = fromMillis(created)
		out = append(out, im)
	}
	return out, rows.Err()
}

// Images lists the org's images, then the server's, each by name. With
// ctx carrying no org, only the server's.
func (s *Store) Images(ctx context.Context) ([]Image, error) {
	var out []Image
	if _, err := sandbox.OrgRequired(ctx); err == nil {
		db, org, err := s.orgDB(ctx)
		if err != nil {
			return nil, err
		}
		rows, err := db.QueryContext(ctx, `SELECT name, digest, source, size_bytes, created_at FROM images WHERE org = ? ORDER BY name`, org)
		if err != nil {
			return nil, fmt.Errorf("store: %w", err)
		}
		if out, err = scanImages(rows, false); err != nil {
			return nil, err
		}
	}
	rows, err := s.control.QueryContext(ctx, `SELECT name, digest, source, size_bytes, created_at FROM server_images ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	server, err := scanImages(rows, true)
	return append(out, server...), err
}

// ResolveImage finds name among the org's images, then the server's.
func (s *Store) ResolveImage(ctx context.Context, name string) (*Image, error) {
	all, err := s.Images(ctx)
	if err != nil {
		return nil, err
	}
	for _, im := range all {
		if im.Name == name {
			return &im, nil
		}
	}
	return nil, errNoImage
}

// DeleteImage drops the org's name (server: the operator's), refusing
// while a live sandbox of the org runs its digest.
func (s *Store) DeleteImage(ctx context.Context, name string, server bool) (*Image, error) {
	if server {
		var im Image
		var created int64
		err := s.control.QueryRowContext(ctx, `SELECT name, digest, source, size_bytes, created_at FROM server_images WHERE name = ?`, name).
			Scan(&im.Name, &im.Digest, &im.Source, &im.SizeBytes, &created)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, errNoImage
		}
		if err != nil {
			return nil, fmt.Errorf("store: %w", err)
		}
		if _, err := s.control.ExecContext(ctx, `DELETE FROM server_images WHERE name = ?`, name); err != nil {
			return nil, fmt.Errorf("store: %w", err)
		}
		im.Server, im.CreatedAt = true, fromMillis(created)
		return &im, nil
	}
	db, org, err := s.orgDB(ctx)
	if err != nil {
		return nil, err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	defer tx.Rollback()
	var im Image
	var created int64
	err = tx.QueryRowContext(ctx, `SELECT name, digest, source, size_bytes, created_at FROM images WHERE org = ? AND name = ?`, org, name).
		Scan(&im.Name, &im.Digest, &im.Source, &im.SizeBytes, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errNoImage
	}
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	var live string
	err = tx.QueryRowContext(ctx, `SELECT id FROM sandboxes WHERE org = ? AND image = ? AND status IN ('pending', 'running', 'sleeping') LIMIT 1`, org, im.Digest).Scan(&live)
	if err == nil {
		return nil, sandbox.Errorf(sandbox.KindConflict, "image %q is in use by %s: end it first", name, live)
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("store: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM images WHERE org = ? AND name = ?`, org, name); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	im.CreatedAt = fromMillis(created)
	return &im, nil
}

// ImageDigests is every digest some name or live sandbox of any org, or
// the server, still refers to: what a collection of unpacked images keeps.
func (s *Store) ImageDigests(ctx context.Context) (map[string]bool, error) {
	keep := map[string]bool{}
	if err := addDigests(ctx, s.control, keep, `SELECT digest FROM server_images`); err != nil {
		return nil, err
	}
	orgs, err := s.Orgs(ctx)
	if err != nil {
		return nil, err
	}
	for _, org := range orgs {
		octx := sandbox.WithPrincipal(ctx, sandbox.Principal{Org: org, Subject: "image-gc"})
		db, _, err := s.orgDB(octx)
		if err != nil {
			return nil, err
		}
		if err := addDigests(ctx, db, keep, `SELECT digest FROM images WHERE org = ? UNION SELECT image FROM sandboxes WHERE org = ?`, org, org); err != nil {
			return nil, err
		}
	}
	return keep, nil
}

// addDigests adds each string the query answers to keep. A row that
// cannot be read is an error: a collection must never miss a digest still
// in use.
func addDigests(ctx context.Context, db interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}, keep map[string]bool, query string, args ...any) error {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var d string
		if err := rows.Scan(&d); err != nil {
			return fmt.Errorf("store: %w", err)
		}
		keep[d] = true
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	return nil
}
