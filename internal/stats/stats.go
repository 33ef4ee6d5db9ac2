// Package stats reads a running sandbox's use now, on the service's seam
// (Get, Use, RunIn): CPU, memory and processes by the runtime's own count
// where the backend has a StatsReader (else absent, with Unavailable
// saying why), and the disk of its workdir and rootfs as df inside sees
// them. A sleeping sandbox has no use to read and is not woken for it.
package stats

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/service"
	"github.com/sandboxd/sandbox/wire"
)

// Stats is a running sandbox's use now (wire.Stats).
type Stats = wire.Stats

// DiskUsed is one filesystem of the sandbox.
type DiskUsed = wire.DiskUsed

// Sandboxes is the service's seam the stats stand on.
type Sandboxes interface {
	// Get is a sandbox of the caller's org, as it is (never woken).
	Get(ctx context.Context, id string) (*sandbox.Sandbox, error)
	// Use opens a piece of work on a running sandbox of the caller's org;
	// done ends it.
	Use(ctx context.Context, id string) (sb *sandbox.Sandbox, work context.Context, done func(), err error)
	// RunIn runs a program in a sandbox in use.
	RunIn(ctx, work context.Context, sb *sandbox.Sandbox, cmd service.Command) (service.Outcome, error)
}

var _ Sandboxes = (*service.Service)(nil)

// Reader reads sandboxes' stats.
type Reader struct {
	sb      Sandboxes
	rt      runtime.StatsReader
	backend string
	now     func() time.Time
}

// New reads the stats of sb's sandboxes. rt is the backend's StatsReader,
// nil where it has none: then CPU, memory and processes are absent and
// Unavailable names backend.
func New(sb Sandboxes, rt runtime.StatsReader, backend string) *Reader {
	return &Reader{sb: sb, rt: rt, backend: backend, now: time.Now}
}

// dfTimeout bounds the df run inside.
const dfTimeout = 30 * time.Second

// Stats reads a running sandbox's use. A sleeping one has none to read and
// is not woken for it (KindConflict, 409); another org's is not found. A
// backend that fails to report is KindBadGateway.
func (r *Reader) Stats(ctx context.Context, id string) (*Stats, error) {
	row, err := r.sb.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if row.Status != sandbox.StatusRunning {
		return nil, sandbox.Errorf(sandbox.KindConflict, "sandbox is %s: stats are of a running sandbox", row.Status)
	}
	sb, work, done, err := r.sb.Use(ctx, id)
	if err != nil {
		return nil, err
	}
	defer done()
	st := &Stats{ID: sb.ID, At: r.now().UTC(), Disk: []DiskUsed{}}
	if r.rt == nil {
		st.Unavailable = "the " + r.backend + " backend does not report CPU, memory and processes"
	} else {
		rs, err := r.rt.Stats(ctx, sb.Name)
		if err != nil {
			return nil, sandbox.Wrap(sandbox.KindBadGateway, err, "reading the sandbox's stats failed")
		}
		st.CPUSeconds, st.MemoryBytes, st.Processes = &rs.CPUSeconds, &rs.MemoryBytes, &rs.Processes
	}
	var out bytes.Buffer
	o, err := r.sb.RunIn(ctx, work, sb, service.Command{ExecRequest: runtime.ExecRequest{
		Argv: []string{"df", "-kP", sb.Workdir, "/", "/tmp"}, Stdin: strings.NewReader(""), Stdout: &out, Stderr: &bytes.Buffer{},
	}, Timeout: dfTimeout})
	if err != nil {
		return nil, err
	}
	if o.Code == 0 {
		st.Disk = parseDF(out.String())
	}
	return st, nil
}

// maxKiB is the most KiB an int64 of bytes holds.
const maxKiB = 1<<53 - 1

// parseDF reads `df -kP` lines (a header, then filesystem, size, used,
// available, capacity and the mount point, sizes in KiB): what the
// sandbox prints, so untrusted; a line it cannot read, or whose sizes are
// negative or past what bytes can count, is skipped.
func parseDF(out string) []DiskUsed {
	disk := []DiskUsed{}
	for _, line := range strings.Split(out, "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 6 {
			continue
		}
		size, err1 := strconv.ParseInt(f[1], 10, 64)
		used, err2 := strconv.ParseInt(f[2], 10, 64)
		if err1 != nil || err2 != nil || size < 0 || used < 0 || size > maxKiB || used > maxKiB {
			continue
		}
		disk = append(disk, DiskUsed{Path: strings.Join(f[5:], " "), UsedBytes: used << 10, SizeBytes: size << 10})
	}
	return disk
}
