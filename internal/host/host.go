// Package host reads the machine's headroom for admission: the memory the
// kernel says is available (MemAvailable, which counts reclaimable cache)
// and the free space of the data directory's filesystem.
package host

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Host reads /proc/meminfo and statfs(2) of a directory.
type Host struct {
	dir     string
	meminfo string
}

// New returns the headroom of this machine, with dir's filesystem as the
// data disk.
func New(dir string) *Host { return &Host{dir: dir, meminfo: "/proc/meminfo"} }

// Headroom answers the available memory and the free disk space, in MiB.
func (h *Host) Headroom(ctx context.Context) (memoryMiB, diskMiB int64, err error) {
	memoryMiB, err = memAvailable(h.meminfo)
	if err != nil {
		return 0, 0, err
	}
	var st unix.Statfs_t
	if err := unix.Statfs(h.dir, &st); err != nil {
		return 0, 0, fmt.Errorf("host: statfs %s: %w", h.dir, err)
	}
	return memoryMiB, int64(st.Bavail) * int64(st.Bsize) >> 20, nil
}

// memAvailable parses the MemAvailable line of a meminfo file (kB).
func memAvailable(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("host: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemAvailable:")
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("host: MemAvailable: %w", err)
		}
		return kb >> 10, nil
	}
	return 0, fmt.Errorf("host: no MemAvailable in %s", path)
}
