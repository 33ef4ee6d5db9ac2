package service

import (
	"bytes"
	"context"
	"github.com/sandboxd/sandbox/wire"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/sandbox"
)

// Stats is a running sandbox's use now: CPU, memory and processes by its
// runtime's own count (absent, with Unavailable saying why, where the
// backend cannot tell), and the disk of its workdir and rootfs as df
// inside sees them.
type Stats = wire.Stats

// DiskUsed is one filesystem of the sandbox.
type DiskUsed = wire.DiskUsed

// Stats reads a running sandbox's use. A sleeping one has none to read and
// is not woken for it (409).
func (s *Service) Stats(ctx context.Context, id string) (*Stats, error) {
	row, err := s.d.Store.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if row.Status != sandbox.StatusRunning {
		return nil, sandbox.Errorf(sandbox.KindConflict, "sandbox is %s: stats are of a running sandbox", row.Status)
	}
	sb, work, done, err := s.use(ctx, id, true)
	if err != nil {
		return nil, err
	}
	defer done()
	st := &Stats{ID: sb.ID, At: s.now().UTC(), Disk: []DiskUsed{}}
	var rs runtime.Stats
	if s.caps.Stats != nil {
		rs, err = s.caps.Stats.Stats(ctx, sb.Name)
	}
	switch {
	case s.caps.Stats == nil:
		st.Unavailable = "the " + s.d.RuntimeName + " backend does not report CPU, memory and processes"
	case err != nil:
		return nil, sandbox.Wrap(sandbox.KindBadGateway, err, "reading the sandbox's stats failed")
	default:
		st.CPUSeconds, st.MemoryBytes, st.Processes = &rs.CPUSeconds, &rs.MemoryBytes, &rs.Processes
	}
	var out bytes.Buffer
	o, err := s.run(ctx, work, sb, Command{ExecRequest: runtime.ExecRequest{
		Argv: []string{"df", "-kP", sb.Workdir, "/", "/tmp"}, Stdin: strings.NewReader(""), Stdout: &out, Stderr: &bytes.Buffer{},
	}, Timeout: 30 * time.Second})
	if err != nil {
		return nil, err
	}
	if o.Code == 0 {
		st.Disk = parseDF(out.String())
	}
	return st, nil
}

// parseDF reads `df -kP` lines: size, used (KiB) and the mount point.
func parseDF(out string) []DiskUsed {
	disk := []DiskUsed{}
	for _, line := range strings.Split(out, "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 6 {
			continue
		}
		size, err1 := strconv.ParseInt(f[1], 10, 64)
		used, err2 := strconv.ParseInt(f[2], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		disk = append(disk, DiskUsed{Path: strings.Join(f[5:], " "), UsedBytes: used << 10, SizeBytes: size << 10})
	}
	return disk
}
