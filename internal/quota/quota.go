// Package quota is what one org may hold of what every org shares: live
// sandboxes per class, the CPU and memory its live sandboxes reserve, the
// disk its project volumes and checkpoints reserve, its projects, and its
// concurrent commands. One Policy type holds the limits; the server sets
// the defaults (flags), the operator overrides them per org; Check is the
// arithmetic, a pure function of the policy, the org's use and what is
// asked, so it is table-tested without a sandbox.
//
// Reservations are counted at their bounds, not their current use: a live
// dev sandbox reserves its class's CPU and memory whether or not it uses
// them, a project volume its full size, a checkpoint its sandbox's memory
// limit. That is what the org can take from the others at any moment.
package quota

import (
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"

	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/wire"
)

// Policy is an org's limits, the wire's with the server's methods. In a
// per-org override a nil field means the server's value; in the server's
// policy every field is set.
type Policy wire.Policy

// Defaults of the server's policy.
var (
	DefaultLive      = map[string]int{sandbox.ClassExec: 16, sandbox.ClassDev: 8, sandbox.ClassDesktop: 4, sandbox.ClassAndroid: 2}
	DefaultCPUs      = 32.0
	DefaultMemoryMiB = int64(64 << 10)  // 64 GiB
	DefaultDiskMiB   = int64(200 << 10) // 200 GiB: twenty dev projects
	DefaultProjects  = 20
	DefaultCommands  = 64
)

// Default is the server's policy with every default.
func Default() Policy {
	p := Policy{Live: map[string]int{}}
	for k, v := range DefaultLive {
		p.Live[k] = v
	}
	p.CPUs, p.MemoryMiB, p.DiskMiB = ptr(DefaultCPUs), ptr(DefaultMemoryMiB), ptr(DefaultDiskMiB)
	p.Projects, p.Commands = ptr(DefaultProjects), ptr(DefaultCommands)
	return p
}

func ptr[T any](v T) *T { return &v }

// RegisterFlags defines the server-wide quota flags on fs, writing into p
// (which should start as Default()).
func (p *Policy) RegisterFlags(fs *flag.FlagSet) {
	d := Default()
	if p.Live == nil {
		*p = d
	}
	fs.Var(liveFlag(p.Live), "quota-live", "live sandboxes per org and class, CLASS=N[,CLASS=N] (default "+liveFlag(d.Live).String()+")")
	fs.Float64Var(p.CPUs, "quota-cpus", *d.CPUs, "CPUs an org's pending and running sandboxes may reserve (class limits, summed)")
	fs.Int64Var(p.MemoryMiB, "quota-memory-mib", *d.MemoryMiB, "memory (MiB) an org's pending and running sandboxes may reserve")
	fs.Int64Var(p.DiskMiB, "quota-disk-mib", *d.DiskMiB, "disk (MiB) an org's project volumes (at their size) and checkpoints (at the memory limit) may reserve")
	fs.IntVar(p.Projects, "quota-projects", *d.Projects, "projects whose volume an org may keep")
	fs.IntVar(p.Commands, "quota-commands", *d.Commands, "concurrent commands per org: exec, file operations, interpreter runs, terminals, screens, event followers")
}

type liveFlag map[string]int

func (f liveFlag) String() string {
	var parts []string
	for _, c := range sandbox.ClassNames() {
		if n, ok := f[c]; ok {
			parts = append(parts, fmt.Sprintf("%s=%d", c, n))
		}
	}
	return strings.Join(parts, ",")
}

func (f liveFlag) Set(v string) error {
	for _, kv := range strings.Split(v, ",") {
		c, n, ok := strings.Cut(strings.TrimSpace(kv), "=")
		var x int
		if _, err := fmt.Sscan(n, &x); !ok || err != nil || x < 0 {
			return fmt.Errorf("want CLASS=N with N >= 0, not %q", kv)
		}
		if _, err := sandbox.LookupClass(c); err != nil || c == "" {
			return fmt.Errorf("unknown class %q (known: %s)", c, strings.Join(sandbox.ClassNames(), ", "))
		}
		f[c] = x
	}
	return nil
}

// Validate refuses negative limits and unknown classes.
func (p Policy) Validate() error {
	var errs []error
	for c, n := range p.Live {
		if _, err := sandbox.LookupClass(c); err != nil || c == "" {
			errs = append(errs, fmt.Errorf("quota: unknown class %q", c))
		}
		if n < 0 {
			errs = append(errs, fmt.Errorf("quota: live %s must not be negative", c))
		}
	}
	neg := func(name string, bad bool) {
		if bad {
			errs = append(errs, fmt.Errorf("quota: %s must not be negative", name))
		}
	}
	neg("cpus", p.CPUs != nil && *p.CPUs < 0)
	neg("memoryMiB", p.MemoryMiB != nil && *p.MemoryMiB < 0)
	neg("diskMiB", p.DiskMiB != nil && *p.DiskMiB < 0)
	neg("projects", p.Projects != nil && *p.Projects < 0)
	neg("commands", p.Commands != nil && *p.Commands < 0)
	return errors.Join(errs...)
}

// Over returns p with every field set in o replacing p's: the effective
// policy of an org whose override is o.
func (p Policy) Over(o Policy) Policy {
	out := Policy{Live: map[string]int{}, CPUs: p.CPUs, MemoryMiB: p.MemoryMiB, DiskMiB: p.DiskMiB, Projects: p.Projects, Commands: p.Commands}
	for k, v := range p.Live {
		out.Live[k] = v
	}
	for k, v := range o.Live {
		out.Live[k] = v
	}
	if o.CPUs != nil {
		out.CPUs = o.CPUs
	}
	if o.MemoryMiB != nil {
		out.MemoryMiB = o.MemoryMiB
	}
	if o.DiskMiB != nil {
		out.DiskMiB = o.DiskMiB
	}
	if o.Projects != nil {
		out.Projects = o.Projects
	}
	if o.Commands != nil {
		out.Commands = o.Commands
	}
	return out
}

// Use is what an org holds now.
type Use struct {
	Live      map[string]int // live sandboxes by class
	CPUs      float64        // reserved by pending and running sandboxes
	MemoryMiB int64
	DiskMiB   int64 // project volumes at their size, checkpoints at their memory limit
	Projects  int
	Commands  int
}

// Ask is what a lease, a wake or a command would add.
type Ask struct {
	Class string
	// Start: a container starts (a lease or a wake) and reserves the
	// class's CPU and memory.
	Start bool
	// NewSandbox: a lease adds a live sandbox of Class.
	NewSandbox bool
	// NewProject: the lease creates a project (and its volume).
	NewProject bool
	// Command: a command starts.
	Command bool
}

// Names of the quotas, as refusals and the usage answer name them.
const (
	NameLive      = "live"
	NameCPUs      = "cpus"
	NameMemoryMiB = "memoryMiB"
	NameDiskMiB   = "diskMiB"
	NameProjects  = "projects"
	NameCommands  = "commands"
)

// Exceeded is a refusal: the quota, its limit, the org's use and what was
// asked. Waiting helps (429) for quotas that free themselves as work ends
// (commands, live sandboxes, CPU, memory); it does not for disk and
// projects, which only a delete frees (403, error kind quota_exceeded).
type Exceeded struct {
	Quota string
	Limit float64
	Used  float64
	Ask   float64
	Class string // for live
}

func (e *Exceeded) Error() string {
	what := e.Quota
	if e.Quota == NameLive {
		what = "live " + e.Class + " sandboxes"
	}
	hint := "end one or wait"
	switch e.Quota {
	case NameCommands:
		hint = "wait for one to finish"
	case NameDiskMiB, NameProjects:
		hint = "delete a project volume (DELETE /v1/volumes/{project}) or ask the operator to raise it"
	}
	return fmt.Sprintf("quota %s exceeded: limit %s, in use %s, this needs %s more: %s", what, num(e.Limit), num(e.Used), num(e.Ask), hint)
}

// Waits says whether waiting can free what the refusal needs.
func (e *Exceeded) Waits() bool { return e.Quota != NameDiskMiB && e.Quota != NameProjects }

func num(f float64) string {
	if f == float64(int64(f)) {
		return fmt.Sprintf("%d", int64(f))
	}
	return fmt.Sprintf("%.2f", f)
}

// Check refuses ask when it would take u past p (a *Exceeded), in a fixed
// order: live, projects, disk, CPU, memory, commands. p must be a full
// policy (Default().Over(...)).
func Check(p Policy, u Use, ask Ask) error {
	var class sandbox.Class
	if ask.Class != "" {
		c, err := sandbox.LookupClass(ask.Class)
		if err != nil {
			return err
		}
		class = c
	}
	if ask.NewSandbox {
		if limit, ok := p.Live[class.Name]; ok && u.Live[class.Name]+1 > limit {
			return &Exceeded{Quota: NameLive, Class: class.Name, Limit: float64(limit), Used: float64(u.Live[class.Name]), Ask: 1}
		}
	}
	if ask.NewProject {
		if u.Projects+1 > *p.Projects {
			return &Exceeded{Quota: NameProjects, Limit: float64(*p.Projects), Used: float64(u.Projects), Ask: 1}
		}
		if need := class.Limits.VolumeMiB; u.DiskMiB+need > *p.DiskMiB {
			return &Exceeded{Quota: NameDiskMiB, Limit: float64(*p.DiskMiB), Used: float64(u.DiskMiB), Ask: float64(need)}
		}
	}
	if ask.Start {
		if need := class.Limits.CPUs; u.CPUs+need > *p.CPUs+1e-9 {
			return &Exceeded{Quota: NameCPUs, Limit: *p.CPUs, Used: u.CPUs, Ask: need}
		}
		if need := class.Limits.MemoryMiB; u.MemoryMiB+need > *p.MemoryMiB {
			return &Exceeded{Quota: NameMemoryMiB, Limit: float64(*p.MemoryMiB), Used: float64(u.MemoryMiB), Ask: float64(need)}
		}
	}
	if ask.Command && u.Commands+1 > *p.Commands {
		return &Exceeded{Quota: NameCommands, Limit: float64(*p.Commands), Used: float64(u.Commands), Ask: 1}
	}
	return nil
}

// Line is one quota with its use, as GET /v1/sandbox/quota shows it.
type Line = wire.Quota

// Lines lists every quota of p with its use in u.
func Lines(p Policy, u Use) []Line {
	var out []Line
	classes := make([]string, 0, len(p.Live))
	for c := range p.Live {
		classes = append(classes, c)
	}
	slices.Sort(classes)
	for _, c := range classes {
		out = append(out, Line{Name: NameLive, Class: c, Limit: float64(p.Live[c]), Used: float64(u.Live[c]), Unit: "sandboxes"})
	}
	return append(out,
		Line{Name: NameCPUs, Limit: *p.CPUs, Used: u.CPUs, Unit: "cores"},
		Line{Name: NameMemoryMiB, Limit: float64(*p.MemoryMiB), Used: float64(u.MemoryMiB), Unit: "MiB"},
		Line{Name: NameDiskMiB, Limit: float64(*p.DiskMiB), Used: float64(u.DiskMiB), Unit: "MiB"},
		Line{Name: NameProjects, Limit: float64(*p.Projects), Used: float64(u.Projects), Unit: "projects"},
		Line{Name: NameCommands, Limit: float64(*p.Commands), Used: float64(u.Commands), Unit: "commands"},
	)
}
