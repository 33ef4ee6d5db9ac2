package main

import (
	"os"
	"path/filepath"
	"testing"
)

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestReadStats: each source, in its order.
func TestReadStats(t *testing.T) {
	proc := t.TempDir()
	write(t, filepath.Join(proc, "1", "stat"), "1 (sandbox-runner) S 0 1 1 0 -1 4194560 1 0 0 0 150 50 0 0 20 0 1 0 1 1 1\n")
	write(t, filepath.Join(proc, "7", "stat"), "7 (a) b)) R 1 7 7 0 -1 0 0 0 0 0 100 0 0 0 20 0 1 0 1 1 1\n")
	write(t, filepath.Join(proc, "meminfo"), "MemTotal:        1048576 kB\nMemFree:          524288 kB\nMemAvailable:     786432 kB\n")
	write(t, filepath.Join(proc, "self", "stat"), "x")

	s, err := readStats(filepath.Join(t.TempDir(), "none"), proc)
	if err != nil {
		t.Fatal(err)
	}
	if s.Source != "proc" || s.Processes != 2 || s.CPUSeconds != 3 || s.MemoryBytes != 262144<<10 {
		t.Fatalf("from /proc: %+v", s)
	}

	v1 := t.TempDir()
	write(t, filepath.Join(v1, "cpuacct", "cpuacct.usage"), "2500000000\n")
	write(t, filepath.Join(v1, "memory", "memory.usage_in_bytes"), "4096\n")
	if s, _ = readStats(v1, proc); s.Source != "cgroup1" || s.CPUSeconds != 2.5 || s.MemoryBytes != 4096 || s.Processes != 2 {
		t.Fatalf("from cgroup v1: %+v", s)
	}

	v2 := t.TempDir()
	write(t, filepath.Join(v2, "cpu.stat"), "usage_usec 1500000\nuser_usec 1000000\n")
	write(t, filepath.Join(v2, "memory.current"), "8192\n")
	write(t, filepath.Join(v2, "pids.current"), "5\n")
	if s, _ = readStats(v2, proc); s.Source != "cgroup2" || s.CPUSeconds != 1.5 || s.MemoryBytes != 8192 || s.Processes != 5 {
		t.Fatalf("from cgroup v2: %+v", s)
	}
}

func FuzzStatCPU(f *testing.F) {
	f.Add([]byte("1 (x) S 0 1 1 0 -1 0 0 0 0 0 1 2 0 0\n"))
	f.Add([]byte(")))"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if v := statCPU(b); v < 0 {
			t.Fatal(v)
		}
	})
}
