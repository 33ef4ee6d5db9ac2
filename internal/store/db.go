// Package store keeps the service's rows in SQLite: one file per org at
// {data}/orgs/{slug}/sandbox.db, so that isolation between tenants is
// physical, plus one control database for API keys. Every org-scoped call
// takes the org from the context (sandbox.OrgRequired) and every query also
// filters on the org column, as defence in depth.
package store

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"net/url"
	"sort"
	"strings"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

//go:embed migrations
var migrations embed.FS

// open opens one SQLite file in WAL mode and applies the migrations of set
// (a directory under migrations/), each once, tracked by user_version.
func open(ctx context.Context, path, set string) (*sql.DB, error) {
	q := url.Values{}
	for _, p := range []string{"journal_mode(WAL)", "busy_timeout(10000)", "synchronous(NORMAL)", "foreign_keys(1)"} {
		q.Add("_pragma", p)
	}
	// Writers take the lock at BEGIN so a read-check-then-insert cannot
	// interleave with another writer's.
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, err
	}
	if err := migrate(ctx, db, set); err != nil {
		db.Close()
		return nil, fmt.Errorf("store: migrate %s: %w", path, err)
	}
	return db, nil
}

func migrate(ctx context.Context, db *sql.DB, set string) error {
	dir := "migrations/" + set
	entries, err := fs.ReadDir(migrations, dir)
	if err != nil {
		return err
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".sql") {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var version int
	if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version); err != nil {
		return err
	}
	for i := version; i < len(names); i++ {
		body, err := migrations.ReadFile(dir + "/" + names[i])
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, string(body)); err != nil {
			return fmt.Errorf("%s: %w", names[i], err)
		}
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", len(names))); err != nil {
		return err
	}
	return tx.Commit()
}
