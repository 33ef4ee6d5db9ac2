package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// statsMain is `sandbox-runner stats`: the sandbox's own use, read from
// inside, as one JSON line {"cpuSeconds", "memoryBytes", "processes"}.
// It is the Kubernetes backend's view: the node's counters are the
// kubelet's, not the API's, while the runner reads the same counters the
// sandbox's kernel keeps for it (gVisor's, in a pod under runsc).
//
// The source is the first that answers: the cgroup v2 files at
// /sys/fs/cgroup, then cgroup v1's, then /proc (the processes alive now:
// the CPU of those that ended is lost, so the total can fall).
func statsMain() int {
	s, err := readStats("/sys/fs/cgroup", "/proc")
	if err != nil {
		fmt.Fprintln(os.Stderr, "sandbox-runner stats:", err)
		return 1
	}
	b, _ := json.Marshal(s)
	os.Stdout.Write(append(b, '\n'))
	return 0
}

type stats struct {
	CPUSeconds  float64 `json:"cpuSeconds"`
	MemoryBytes int64   `json:"memoryBytes"`
	Processes   int     `json:"processes"`
	Source      string  `json:"source"`
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times: 100 on
// every Linux ABI Go builds for (and gVisor's).
const clockTicks = 100

func readStats(cgroup, proc string) (stats, error) {
	var s stats
	procs, cpu, err := walkProc(proc)
	if err != nil {
		return s, err
	}
	s.Processes = procs
	if usec, ok := keyed(filepath.Join(cgroup, "cpu.stat"), "usage_usec"); ok {
		s.CPUSeconds, s.Source = float64(usec)/1e6, "cgroup2"
		s.MemoryBytes, _ = number(filepath.Join(cgroup, "memory.current"))
		if n, ok := number(filepath.Join(cgroup, "pids.current")); ok && n > 0 {
			s.Processes = int(n)
		}
		return s, nil
	}
	if ns, ok := number(filepath.Join(cgroup, "cpuacct", "cpuacct.usage")); ok {
		s.CPUSeconds, s.Source = float64(ns)/1e9, "cgroup1"
		s.MemoryBytes, _ = number(filepath.Join(cgroup, "memory", "memory.usage_in_bytes"))
		return s, nil
	}
	s.CPUSeconds, s.Source = cpu, "proc"
	if total, ok := keyed(filepath.Join(proc, "meminfo"), "MemTotal:"); ok {
		avail, _ := keyed(filepath.Join(proc, "meminfo"), "MemAvailable:")
		s.MemoryBytes = (total - avail) << 10
	}
	return s, nil
}

// walkProc counts the processes under proc and sums their CPU seconds.
func walkProc(proc string) (n int, cpu float64, err error) {
	ents, err := os.ReadDir(proc)
	if err != nil {
		return 0, 0, err
	}
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(proc, e.Name(), "stat"))
		if err != nil {
			continue // it ended meanwhile
		}
		n++
		cpu += statCPU(b)
	}
	return n, cpu, nil
}

// statCPU is utime+stime of a /proc/PID/stat line, in seconds. The command
// name (field 2) may hold spaces and parentheses: fields are counted from
// the last ')'.
func statCPU(b []byte) float64 {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	// After ")": state is field 3, utime 14 and stime 15.
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseUint(f[11], 10, 64)
	s, _ := strconv.ParseUint(f[12], 10, 64)
	return float64(u+s) / clockTicks
}

// number reads a file holding one integer.
func number(path string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n, err == nil
}

// keyed reads the integer after key in a "key value" file.
func keyed(path, key string) (int64, bool) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if !ok || k != key {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		return n, err == nil
	}
	return 0, false
}
