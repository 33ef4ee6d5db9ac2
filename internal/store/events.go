package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// Event is one entry of a session's log.
type Event struct {
	Session string
	Seq     int64
	Kind    string
	Data    []byte
	At      time.Time
}

// KeepEvents is how many of the newest events a session's log keeps.
const KeepEvents = 10000

// MaxOrgEventBytes bounds what one org's session logs hold on disk, over
// all its sessions (a session is named by the caller, so their number is
// not bounded): past it, the org's oldest events go first.
var MaxOrgEventBytes int64 = 64 << 20

// eventSize is what an event counts against MaxOrgEventBytes.
const eventSize = `length(data) + length(session) + length(kind)`

// AppendEvents writes events of the org in ctx in one transaction, trims
// each session they touch to its newest KeepEvents, then the org's logs to
// MaxOrgEventBytes.
func (s *Store) AppendEvents(ctx context.Context, events []Event) error {
	db, org, err := s.orgDB(ctx)
	if err != nil {
		return err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("store: events: %w", err)
	}
	defer tx.Rollback()
	last := map[string]int64{}
	var added int64
	for _, e := range events {
		res, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO session_events (org, session, seq, kind, data, at) VALUES (?, ?, ?, ?, ?, ?)`,
			org, e.Session, e.Seq, e.Kind, e.Data, millis(e.At))
		if err != nil {
			return fmt.Errorf("store: events: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 1 {
			added += int64(len(e.Data) + len(e.Session) + len(e.Kind))
		}
		last[e.Session] = max(last[e.Session], e.Seq)
	}
	var removed int64
	for session := range last {
		n, err := deletedBytes(ctx, tx, `DELETE FROM session_events WHERE org = ? AND session = ? AND seq <
			(SELECT seq FROM session_events WHERE org = ? AND session = ? ORDER BY seq DESC LIMIT 1 OFFSET ?)
			RETURNING `+eventSize, org, session, org, session, KeepEvents-1)
		if err != nil {
			return fmt.Errorf("store: trimming events: %w", err)
		}
		removed += n
	}
	var total int64
	if err := tx.QueryRowContext(ctx, `INSERT INTO event_bytes (org, bytes) VALUES (?, ?)
		ON CONFLICT (org) DO UPDATE SET bytes = bytes + excluded.bytes RETURNING bytes`, org, added-removed).Scan(&total); err != nil {
		return fmt.Errorf("store: events: %w", err)
	}
	// Over the org's bound: its oldest events go, a page at a time.
	for over := total - MaxOrgEventBytes; over > 0; {
		n, err := deletedBytes(ctx, tx, `DELETE FROM session_events WHERE rowid IN
			(SELECT rowid FROM session_events WHERE org = ? ORDER BY seq LIMIT 256) RETURNING `+eventSize, org)
		if err != nil {
			return fmt.Errorf("store: trimming events: %w", err)
		}
		if n == 0 {
			break
		}
		if _, err := tx.ExecContext(ctx, `UPDATE event_bytes SET bytes = bytes - ? WHERE org = ?`, n, org); err != nil {
			return fmt.Errorf("store: events: %w", err)
		}
		over -= n
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("store: events: %w", err)
	}
	return nil
}

// deletedBytes runs a DELETE … RETURNING size and sums the sizes.
func deletedBytes(ctx context.Context, tx *sql.Tx, query string, args ...any) (int64, error) {
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var sum int64
	for rows.Next() {
		var n int64
		if err := rows.Scan(&n); err != nil {
			return 0, err
		}
		sum += n
	}
	return sum, rows.Err()
}

// EventBytes is what the session logs of the org in ctx hold.
func (s *Store) EventBytes(ctx context.Context) (int64, error) {
	db, org, err := s.orgDB(ctx)
	if err != nil {
		return 0, err
	}
	var n sql.NullInt64
	if err := db.QueryRowContext(ctx, `SELECT bytes FROM event_bytes WHERE org = ?`, org).Scan(&n); err != nil && err != sql.ErrNoRows {
		return 0, fmt.Errorf("store: events: %w", err)
	}
	return n.Int64, nil
}

// Events returns the events of a session of the org in ctx after seq, oldest
// first, at most limit.
func (s *Store) Events(ctx context.Context, session string, after int64, limit int) ([]Event, error) {
	db, org, err := s.orgDB(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := db.QueryContext(ctx, `SELECT seq, kind, data, at FROM session_events
		WHERE org = ? AND session = ? AND seq > ? ORDER BY seq LIMIT ?`, org, session, after, limit)
	if err != nil {
		return nil, fmt.Errorf("store: events: %w", err)
	}
	defer rows.Close()
	var out []Event
	for rows.Next() {
		e := Event{Session: session}
		var at int64
		if err := rows.Scan(&e.Seq, &e.Kind, &e.Data, &at); err != nil {
			return nil, fmt.Errorf("store: events: %w", err)
		}
		e.At = fromMillis(at)
		out = append(out, e)
	}
	return out, rows.Err()
}

// MaxEventSeq is the highest sequence number stored for the org in ctx (0
// when none).
func (s *Store) MaxEventSeq(ctx context.Context) (int64, error) {
	db, org, err := s.orgDB(ctx)
	if err != nil {
		return 0, err
	}
	var seq sql.NullInt64
	if err := db.QueryRowContext(ctx, `SELECT MAX(seq) FROM session_events WHERE org = ?`, org).Scan(&seq); err != nil {
		return 0, fmt.Errorf("store: events: %w", err)
	}
	return seq.Int64, nil
}
