package service

import (
	"testing"
	"time"

	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/store"
)

func TestCursorRoundTrip(t *testing.T) {
	p := store.Position{CreatedAt: time.UnixMilli(1764495330123).UTC(), ID: sandbox.NewID()}
	got, err := ParseCursor(Cursor(p))
	if err != nil || !got.CreatedAt.Equal(p.CreatedAt) || got.ID != p.ID {
		t.Fatalf("%+v %v, want %+v", got, err, p)
	}
	for _, bad := range []string{"x", "", "bm9wZQ", Cursor(p) + "A", "MTIzLnNiX3g"} {
		if _, err := ParseCursor(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// FuzzParseCursor: a cursor comes from the client; whatever is accepted
// must be exactly what Cursor would have made.
func FuzzParseCursor(f *testing.F) {
	f.Add(Cursor(store.Position{CreatedAt: time.UnixMilli(1), ID: "sb_" + "aaaaaaaaaaaaaaaaaaaaaaaaaa"}))
	f.Add("MDEuc2JfYWFh")
	f.Add("MC5zYl90Y210Y210Y210Y210Y210Y210Y210Y210Y0") // non-canonical base64: once accepted
	f.Fuzz(func(t *testing.T, c string) {
		p, err := ParseCursor(c)
		if err != nil {
			return
		}
		if Cursor(p) != c {
			t.Fatalf("accepted %q, which reads back as %q", c, Cursor(p))
		}
	})
}
