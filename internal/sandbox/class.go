package sandbox

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Class names. The table below is the ONE place a class is defined: a class
// half-added elsewhere (missing a TTL, say) would be reaped before its caller
// read the reply.
const (
	ClassExec    = "exec"
	ClassDev     = "dev"
	ClassDesktop = "desktop"
	ClassAndroid = "android"
)

// Limits are the resources a class gets. Zero means the runtime default.
type Limits struct {
	CPUs      float64 // CPU quota in cores
	MemoryMiB int64   // memory limit
	Pids      int64   // processes inside (RLIMIT_NPROC)
	RootfsMiB int64   // writable overlay over the image
	FileMiB   int64   // largest single file (RLIMIT_FSIZE)
	VolumeMiB int64   // the workdir: a scratch tmpfs (memory) or a project filesystem (disk)
}

// Class is one row of the closed class table.
type Class struct {
	Name         string
	Workdir      string        // where the volume is mounted inside
	DefaultTTL   time.Duration // lease when ttlSec <= 0
	NeedsProject bool          // every class but exec needs a project volume
	Image        string        // the image built for it (see internal/image)
	Display      bool          // runs a desktop: a screen can be opened
	Limits       Limits
}

var classes = map[string]Class{
	ClassExec: {
		Name: ClassExec, Workdir: "/mnt/data", DefaultTTL: 900 * time.Second,
		Image:  "exec",
		Limits: Limits{CPUs: 1, MemoryMiB: 1024, Pids: 256, RootfsMiB: 512, FileMiB: 256, VolumeMiB: 512},
	},
	ClassDev: {
		Name: ClassDev, Workdir: "/work", DefaultTTL: 4 * time.Hour, NeedsProject: true,
		Image:  "dev",
		Limits: Limits{CPUs: 2, MemoryMiB: 4096, Pids: 1024, RootfsMiB: 2048, FileMiB: 2048, VolumeMiB: 10240},
	},
	ClassDesktop: {
		Name: ClassDesktop, Workdir: "/work", DefaultTTL: 4 * time.Hour, NeedsProject: true,
		Image: "desktop", Display: true,
		Limits: Limits{CPUs: 2, MemoryMiB: 4096, Pids: 1024, RootfsMiB: 2048, FileMiB: 2048, VolumeMiB: 10240},
	},
	ClassAndroid: {
		Name: ClassAndroid, Workdir: "/work", DefaultTTL: 4 * time.Hour, NeedsProject: true,
		Image: "android", Display: true,
		Limits: Limits{CPUs: 2, MemoryMiB: 6144, Pids: 2048, RootfsMiB: 4096, FileMiB: 4096, VolumeMiB: 20480},
	},
}

// ClassNames lists the classes, sorted, for error messages and help text.
func ClassNames() []string {
	names := make([]string, 0, len(classes))
	for n := range classes {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// LookupClass resolves a class name; empty means exec. An unknown name is
// KindInvalid with a message that lists the known classes.
func LookupClass(name string) (Class, error) {
	if name == "" {
		name = ClassExec
	}
	c, ok := classes[name]
	if !ok {
		return Class{}, Errorf(KindInvalid, "unknown class %q: known classes are %s", name, strings.Join(ClassNames(), ", "))
	}
	return c, nil
}

// MustClass returns a class known to exist; it panics on a typo in code.
func MustClass(name string) Class {
	c, err := LookupClass(name)
	if err != nil {
		panic(fmt.Sprint(err))
	}
	return c
}
