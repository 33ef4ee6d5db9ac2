package host

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

func TestHeadroom(t *testing.T) {
	mem, disk, err := New(t.TempDir()).Headroom(context.Background())
	if err != nil || mem <= 0 || disk <= 0 {
		t.Fatalf("this machine: %d MiB memory, %d MiB disk, %v", mem, disk, err)
	}
	p := filepath.Join(t.TempDir(), "meminfo")
	os.WriteFile(p, []byte("MemTotal:       24000000 kB\nMemFree:  1 kB\nMemAvailable:    2097152 kB\n"), 0o600)
	if n, err := memAvailable(p); err != nil || n != 2048 {
		t.Errorf("parsed %d %v", n, err)
	}
	os.WriteFile(p, []byte("MemTotal: 1 kB\n"), 0o600)
	if _, err := memAvailable(p); err == nil {
		t.Error("no MemAvailable line, no error")
	}
}
