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

// AppendEvents writes events of the org in ctx in one transaction and trims
// each session they touch to its newest KeepEvents.
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
	for _, e := range events {
		if _, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO session_events (org, session, seq, kind, data, at) VALUES (?, ?, ?, ?, ?, ?)`,
			org, e.Session, e.Seq, e.Kind, e.Data, millis(e.At)); err != nil {
			return fmt.Errorf("store: events: %w", err)
		}
		last[e.Session] = max(last[e.Session], e.Seq)
	}
	for session := range last {
		if _, err := tx.ExecContext(ctx, `DELETE FROM session_events WHERE org = ? AND session = ? AND seq <
			(SELECT seq FROM session_events WHERE org = ? AND session = ? ORDER BY seq DESC LIMIT 1 OFFSET ?)`,
			org, session, org, session, KeepEvents-1); err != nil {
			return fmt.Errorf("store: trimming events: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("store: events: %w", err)
	}
	return nil
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
