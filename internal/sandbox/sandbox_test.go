package sandbox

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestExpiryFor(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	exec, dev := MustClass(ClassExec), MustClass(ClassDev)
	day := 24 * time.Hour
	for _, tc := range []struct {
		name    string
		class   Class
		ttl     int64
		now     time.Time
		created time.Time
		want    time.Time
	}{
		{"default exec", exec, 0, now, now, now.Add(900 * time.Second)},
		{"negative means default", exec, -5, now, now, now.Add(900 * time.Second)},
		{"default dev", dev, 0, now, now, now.Add(4 * time.Hour)},
		{"asked", exec, 60, now, now, now.Add(time.Minute)},
		{"clamped at creation+ceiling", exec, 2 * 86400, now, now, now.Add(day)},
		{"renewal near the ceiling", exec, 3600, now.Add(23*time.Hour + 30*time.Minute), now, now.Add(day)},
		{"huge ttl does not overflow", exec, 1 << 62, now, now, now.Add(day)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ExpiryFor(tc.class, tc.ttl, tc.now, tc.created, day); !got.Equal(tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestDecideRuntime(t *testing.T) {
	offered := []string{RuntimeGVisor}
	for _, tc := range []struct {
		asked  string
		volume bool
		want   string
		errHas string
	}{
		{"", false, "gvisor", ""},
		{"gvisor", true, "gvisor", ""},
		{"runc", false, "", "never granted"},
		{"kata-fc", true, "", "volume"},
		{"kata-fc", false, "", "not offered"},
		{"kata-clh", false, "", "not offered"},
		{"docker", false, "", "unknown runtime"},
	} {
		got, err := DecideRuntime(tc.asked, RuntimeGVisor, offered, tc.volume)
		if got != tc.want || (tc.errHas == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.errHas)) {
			t.Errorf("DecideRuntime(%q, volume=%v) = %q, %v", tc.asked, tc.volume, got, err)
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("error kind: %v", err)
		}
	}
	// runc is refused even where the operator offers it.
	if _, err := DecideRuntime("runc", RuntimeGVisor, []string{RuntimeGVisor, RuntimeRunc}, false); err == nil {
		t.Error("runc granted to a tenant")
	}
}

func TestLookupClass(t *testing.T) {
	if c, err := LookupClass(""); err != nil || c.Name != ClassExec {
		t.Errorf("empty class: %v %v", c, err)
	}
	_, err := LookupClass("gpu")
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "android, desktop, dev, exec") {
		t.Errorf("unknown class: %v", err)
	}
	for _, n := range ClassNames() {
		c := MustClass(n)
		if c.DefaultTTL <= 0 || c.Workdir == "" || c.Image == "" || (n != ClassExec) != c.NeedsProject {
			t.Errorf("class %s is half-defined: %+v", n, c)
		}
	}
}

func TestSlugNeverCollides(t *testing.T) {
	a, b := Slug("Acme"), Slug("acme")
	if a == b {
		t.Errorf("Acme and acme share %q", a)
	}
	if !strings.HasPrefix(a, "acme-") {
		t.Errorf("slug %q is not readable", a)
	}
	for _, raw := range []string{"", "../../etc", "a/b", "ÄÖÜ", strings.Repeat("x", 500)} {
		s := Slug(raw)
		if strings.ContainsAny(s, "/.\x00") || len(s) > 50 || s == "" {
			t.Errorf("Slug(%q) = %q is not path-safe", raw, s)
		}
	}
}

func TestIDs(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 1000; i++ {
		id, name := NewID(), NewName()
		if !ValidID(id) || seen[id] || seen[name] || len(name) != len(NewName()) {
			t.Fatalf("bad id %q or name %q", id, name)
		}
		seen[id], seen[name] = true, true
	}
	for _, bad := range []string{"", "sb_", "sb_AAAAAAAAAAAAAAAAAAAAAAAAAA", "sbx-aaaa", "sb_aaaaaaaaaaaaaaaaaaaaaaaaaa/x"} {
		if ValidID(bad) {
			t.Errorf("ValidID(%q)", bad)
		}
	}
}

func TestErrorsKeepInternalTextPrivate(t *testing.T) {
	err := Wrap(KindUnavailable, errors.New("runsc: /var/lib/secret/path failed"), "could not start")
	if Message(err) != "could not start" || KindOf(err) != KindUnavailable {
		t.Errorf("Message %q kind %v", Message(err), KindOf(err))
	}
	if Message(errors.New("disk /x exploded")) != "internal error" {
		t.Error("internal error text reached the message")
	}
	if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrNotFound) {
		t.Error("errors.Is by kind")
	}
}

func TestCheckMetadata(t *testing.T) {
	long := strings.Repeat("v", MaxMetadataValue+1)
	many := map[string]string{}
	for i := range MaxMetadataKeys + 1 {
		many[fmt.Sprintf("k%d", i)] = "v"
	}
	big := map[string]string{}
	for i := range 20 {
		big[fmt.Sprintf("k%d", i)] = strings.Repeat("v", MaxMetadataValue)
	}
	for _, c := range []struct {
		m  map[string]string
		ok bool
	}{
		{nil, true},
		{map[string]string{"team": "a", "run.id": "1", "x_y-z": ""}, true},
		{map[string]string{`a"b`: "v"}, false},    // would break out of the JSON path
		{map[string]string{"a.b\\c": "v"}, false}, // likewise
		{map[string]string{"": "v"}, false},
		{map[string]string{"-lead": "v"}, false},
		{map[string]string{"k": long}, false},
		{map[string]string{"k": "nul\x00"}, false},
		{many, false},
		{big, false}, // 10 KiB in all
	} {
		if err := CheckMetadata(c.m); (err == nil) != c.ok {
			t.Errorf("CheckMetadata(%.60v) = %v, want ok=%v", c.m, err, c.ok)
		}
	}
}

// TestLeaseEnd: a live sandbox's lease ends at its expiry; one that is
// not live, or whose lease has expired, is not found (its credential is
// revoked with it).
func TestLeaseEnd(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		status  Status
		expires time.Time
		live    bool
	}{
		{StatusPending, now.Add(time.Minute), true},
		{StatusRunning, now.Add(time.Minute), true},
		{StatusSleeping, now.Add(time.Minute), true},
		{StatusRunning, now, false},
		{StatusRunning, now.Add(-time.Second), false},
		{StatusError, now.Add(time.Minute), false},
		{StatusEnded, now.Add(time.Minute), false},
	} {
		end, err := (&Sandbox{Status: tc.status, ExpiresAt: tc.expires}).LeaseEnd(now)
		switch {
		case tc.live && (err != nil || !end.Equal(tc.expires)):
			t.Errorf("%s until %v: %v %v", tc.status, tc.expires, end, err)
		case !tc.live && KindOf(err) != KindNotFound:
			t.Errorf("%s until %v: %v, want not found", tc.status, tc.expires, err)
		}
	}
}

// TestLabel: a label is a DNS label that names its id back; anything else
// is read as it is.
func TestLabel(t *testing.T) {
	id := NewID()
	l := Label(id)
	if strings.Contains(l, "_") || FromLabel(l) != id || FromLabel(id) != id || Label("x_y") != "x_y" {
		t.Errorf("id %s, label %s, back %s", id, l, FromLabel(l))
	}
}
