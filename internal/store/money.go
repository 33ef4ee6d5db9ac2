package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"github.com/sandboxd/sandbox/wire"
	"time"
)

// Debit takes cents from org's balance if it covers them, atomically.
func (s *Store) Debit(ctx context.Context, org string, cents int64) (bool, int64, error) {
	res, err := s.control.ExecContext(ctx, `UPDATE credits SET cents = cents - ? WHERE org = ? AND cents >= ?`, cents, org, cents)
	if err != nil {
		return false, 0, fmt.Errorf("store: debit: %w", err)
	}
	n, _ := res.RowsAffected()
	bal, err := s.balance(ctx, org)
	return n == 1, bal, err
}

// Credit adds cents (which may be negative, to correct) to org's balance.
func (s *Store) Credit(ctx context.Context, org string, cents int64) (int64, error) {
	_, err := s.control.ExecContext(ctx, `INSERT INTO credits (org, cents) VALUES (?, ?)
		ON CONFLICT (org) DO UPDATE SET cents = cents + excluded.cents`, org, cents)
	if err != nil {
		return 0, fmt.Errorf("store: credit: %w", err)
	}
	return s.balance(ctx, org)
}

func (s *Store) balance(ctx context.Context, org string) (int64, error) {
	var c int64
	err := s.control.QueryRowContext(ctx, `SELECT cents FROM credits WHERE org = ?`, org).Scan(&c)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("store: balance: %w", err)
	}
	return c, nil
}

// Usage is one class's lease count and lease time for an org.
type Usage = wire.Usage

// AddUsage records leases and lease time of class for the org in ctx.
func (s *Store) AddUsage(ctx context.Context, class string, leases int64, d time.Duration) error {
	db, org, err := s.orgDB(ctx)
	if err != nil {
		return err
	}
	_, err = db.ExecContext(ctx, `INSERT INTO usage (org, class, leases, lease_ms) VALUES (?, ?, ?, ?)
		ON CONFLICT (org, class) DO UPDATE SET leases = leases + excluded.leases, lease_ms = lease_ms + excluded.lease_ms`,
		org, class, leases, d.Milliseconds())
	if err != nil {
		return fmt.Errorf("store: usage: %w", err)
	}
	return nil
}

// Usage returns the recorded usage of the org in ctx, by class.
func (s *Store) Usage(ctx context.Context) ([]Usage, error) {
	db, org, err := s.orgDB(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := db.QueryContext(ctx, `SELECT class, leases, lease_ms FROM usage WHERE org = ? ORDER BY class`, org)
	if err != nil {
		return nil, fmt.Errorf("store: usage: %w", err)
	}
	defer rows.Close()
	out := []Usage{}
	for rows.Next() {
		var u Usage
		var ms int64
		if err := rows.Scan(&u.Class, &u.Leases, &ms); err != nil {
			return nil, fmt.Errorf("store: usage: %w", err)
		}
		u.LeaseSeconds = float64(ms) / 1000
		out = append(out, u)
	}
	return out, rows.Err()
}
