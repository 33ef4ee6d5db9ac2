package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/sandboxd/sandbox/internal/sandbox"
)

// Process is the durable record of one background process of a sandbox.
// A zero EndedAt means the server last knew it running.
type Process struct {
	Sandbox   string
	Boot      string // the init that ran it; a pid is unique within one
	Pid       int
	Argv      []string
	Dir       string
	TTY       bool
	Session   string
	StartedAt time.Time
	EndedAt   time.Time
	ExitCode  *int
	Signal    int
	TimedOut  bool
	Lost      bool // its init is gone and its end unknown
}

// MaxProcessRecords bounds the records kept per sandbox, running ones
// included, so that a sandbox cannot grow its org's store without bound
// by starting processes (or by a hostile init answering made-up ones):
// the oldest ended and lost records go first, and a record that would
// make more running ones than this is refused. It is the most the
// sandbox's init runs at once (cmd/sandbox-runner's maxRunning).
const MaxProcessRecords = 256

// PutProcess writes p's record, replacing the one of the same boot and
// pid, and drops the oldest ended and lost records beyond
// MaxProcessRecords. A new record that would need a running one dropped
// is refused (KindLimit) and nothing is written.
func (s *Store) PutProcess(ctx context.Context, p Process) error {
	db, org, err := s.orgDB(ctx)
	if err != nil {
		return err
	}
	argv, _ := json.Marshal(p.Argv)
	var ended sql.NullInt64
	if !p.EndedAt.IsZero() {
		ended = sql.NullInt64{Int64: millis(p.EndedAt), Valid: true}
	}
	var code sql.NullInt64
	if p.ExitCode != nil {
		code = sql.NullInt64{Int64: int64(*p.ExitCode), Valid: true}
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO processes
		(org, sandbox_id, boot, pid, argv, dir, tty, session, started_at, ended_at, exit_code, signal, timed_out, lost)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		org, p.Sandbox, p.Boot, p.Pid, string(argv), p.Dir, p.TTY, p.Session, millis(p.StartedAt), ended, code, p.Signal, p.TimedOut, p.Lost); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	var total, running int
	if err := tx.QueryRowContext(ctx, `SELECT count(*), coalesce(sum(ended_at IS NULL AND NOT lost), 0)
		FROM processes WHERE org = ? AND sandbox_id = ?`, org, p.Sandbox).Scan(&total, &running); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	if running > MaxProcessRecords {
		return sandbox.Errorf(sandbox.KindLimit, "%d processes of this sandbox are running; that is the most it keeps: end some first", MaxProcessRecords)
	}
	if over := total - MaxProcessRecords; over > 0 {
		if _, err := tx.ExecContext(ctx, `DELETE FROM processes WHERE rowid IN (
			SELECT rowid FROM processes WHERE org = ? AND sandbox_id = ? AND (ended_at IS NOT NULL OR lost)
			ORDER BY started_at, pid LIMIT ?)`, org, p.Sandbox, over); err != nil {
			return fmt.Errorf("store: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	return nil
}

// Processes returns the records of sandbox id, oldest first.
func (s *Store) Processes(ctx context.Context, id string) ([]Process, error) {
	db, org, err := s.orgDB(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := db.QueryContext(ctx, `SELECT boot, pid, argv, dir, tty, session, started_at, ended_at, exit_code, signal, timed_out, lost
		FROM processes WHERE org = ? AND sandbox_id = ? ORDER BY started_at, pid`, org, id)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	defer rows.Close()
	var out []Process
	for rows.Next() {
		p := Process{Sandbox: id}
		var argv string
		var started int64
		var ended, code sql.NullInt64
		if err := rows.Scan(&p.Boot, &p.Pid, &argv, &p.Dir, &p.TTY, &p.Session, &started, &ended, &code, &p.Signal, &p.TimedOut, &p.Lost); err != nil {
			return nil, fmt.Errorf("store: %w", err)
		}
		json.Unmarshal([]byte(argv), &p.Argv)
		p.StartedAt = fromMillis(started)
		if ended.Valid {
			p.EndedAt = fromMillis(ended.Int64)
		}
		if code.Valid {
			c := int(code.Int64)
			p.ExitCode = &c
		}
		out = append(out, p)
	}
	return out, rows.Err()
}
