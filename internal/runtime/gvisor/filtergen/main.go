// Command filtergen compiles, ahead of time, the seccomp programs runsc
// installs on its sentry and its gofer at every boot, and writes them as Go
// source into a writable copy of gVisor's module, in place of its filter
// packages' empty ones.
//
// Why: gVisor's own (Bazel) build generates these programs into runsc; a
// runsc built from the Go module proxy has none
// (PrecompilationDisabledAtBuildTime), so each sandbox's sentry compiled its
// filter from the rules at boot — 20–40 ms of CPU on the start of every
// lease, wake and fork on this project's 2-core machines (measured), the
// programs being the same every time. The programs here are runsc's own: its filter config
// packages' PrecompiledPrograms, for the option sets gVisor itself
// precompiles, and the sentry looks them up by the same key it would compile
// (an option set not among them is compiled at boot, as before). Of the
// sentry's, only those a runsc of this project can run with are kept: the
// platforms its --platform allows, and no device proxy (GPU, TPU, RDMA: it
// passes no device in); the rest would be ~19 MB of Go source to compile
// for programs never looked up.
//
//	cp -r "$(go list -m -f '{{.Dir}}' gvisor.dev/gvisor)" DIR && chmod -R u+w DIR
//	go run ./internal/runtime/gvisor/filtergen -gvisor DIR
//	go build -modfile M gvisor.dev/gvisor/runsc   # M: go.mod plus "replace gvisor.dev/gvisor => DIR"
//
// (A copy, not `go build -overlay`: the go command refuses to overlay files
// in its module cache.) The generated file replaces filter_precompiled.go
// of runsc/boot/filter and runsc/fsgofer/filter, keeping its API
// (GetPrecompiled, ListPrecompiled, PrecompilationDisabledAtBuildTime).
// This must be run by a build of the same gVisor version as DIR's: the
// programs are this binary's packages' rules (scripts/deps.sh builds both
// from this module's go.mod).
//
// Each program is built only when looked up, in a switch, as gVisor's own
// generated file does: it found that allocating every program at boot
// dominated a sandbox's start.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"go/format"
	"log"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gvisor.dev/gvisor/pkg/seccomp/precompiledseccomp"
	bootconfig "gvisor.dev/gvisor/runsc/boot/filter/config"
	goferconfig "gvisor.dev/gvisor/runsc/fsgofer/filter/config"

	"github.com/sandboxd/sandbox/internal/runtime/gvisor"
)

// The file each filter package's programs replace.
const replaced = "filter_precompiled.go"

func main() {
	dir := flag.String("gvisor", "", "a writable copy of the gvisor.dev/gvisor module to write the programs into (required)")
	flag.Parse()
	if *dir == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: filtergen -gvisor DIR")
		os.Exit(2)
	}
	log.SetFlags(0)
	if err := run(*dir); err != nil {
		log.Fatalf("filtergen: %v", err)
	}
}

func run(dir string) error {
	for _, p := range []struct {
		pkg      string
		programs func() ([]precompiledseccomp.Program, error)
		keep     func(name string) bool
	}{
		{"runsc/boot/filter", bootconfig.PrecompiledPrograms, sentryKept},
		{"runsc/fsgofer/filter", goferconfig.PrecompiledPrograms, func(string) bool { return true }},
	} {
		file := filepath.Join(dir, p.pkg, replaced)
		if _, err := os.Stat(file); err != nil {
			return fmt.Errorf("%s has no %s to replace (not a copy of gVisor's module, or a version with another layout): %w", p.pkg, replaced, err)
		}
		all, err := p.programs()
		if err != nil {
			return fmt.Errorf("%s: %w", p.pkg, err)
		}
		programs := slices.DeleteFunc(all, func(prog precompiledseccomp.Program) bool { return !p.keep(prog.Name) })
		if len(programs) == 0 {
			return fmt.Errorf("%s: none of its %d programs kept (their names, runsc's option keys, changed?)", p.pkg, len(all))
		}
		src, err := source(programs)
		if err != nil {
			return fmt.Errorf("%s: %w", p.pkg, err)
		}
		if err := os.WriteFile(file, src, 0o644); err != nil {
			return err
		}
		log.Printf("filtergen: %d seccomp programs for gvisor.dev/gvisor/%s written to %s (%d bytes)", len(programs), p.pkg, file, len(src))
	}
	return nil
}

// Options of the sentry's programs: their names are runsc's option keys,
// space-separated Key=value pairs (config.Options.ConfigKey).
var sentryNeeds = map[string][]string{
	// The platforms of the gVisor runtime's --platform, quoted as the
	// keys quote them.
	"Platform":  quoted(gvisor.Platforms),
	"NVProxy":   {"false"},
	"TPUProxy":  {"false"},
	"RDMAProxy": {"false"},
}

func quoted(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = strconv.Quote(s)
	}
	return out
}

// sentryKept reports whether a sentry program's options are ones this
// project's runsc can boot with.
func sentryKept(name string) bool {
	fields := map[string]string{}
	for _, kv := range strings.Fields(name) {
		if k, v, ok := strings.Cut(kv, "="); ok {
			fields[k] = v
		}
	}
	for k, allowed := range sentryNeeds {
		v, ok := fields[k]
		if !ok || !slices.Contains(allowed, v) {
			return false
		}
	}
	return true
}

// source is the Go file of a filter package with programs precompiled.
func source(programs []precompiledseccomp.Program) ([]byte, error) {
	slices.SortFunc(programs, func(a, b precompiledseccomp.Program) int { return strings.Compare(a.Name, b.Name) })
	var b bytes.Buffer
	b.WriteString(`// Code generated by github.com/sandboxd/sandbox/internal/runtime/gvisor/filtergen. DO NOT EDIT.

package filter

import "gvisor.dev/gvisor/pkg/seccomp/precompiledseccomp"

// PrecompilationDisabledAtBuildTime is false: the programs below were
// compiled when this runsc was built.
const PrecompilationDisabledAtBuildTime = false

// precompiledProgramNames is the sorted list of the precompiled programs.
var precompiledProgramNames = []string{
`)
	for i, p := range programs {
		if i > 0 && programs[i-1].Name == p.Name {
			return nil, fmt.Errorf("two programs named %q", p.Name)
		}
		fmt.Fprintf(&b, "\t%q,\n", p.Name)
	}
	b.WriteString(`}

// ListPrecompiled returns the names of all precompiled programs.
func ListPrecompiled() []string {
	return append([]string(nil), precompiledProgramNames...)
}

// GetPrecompiled returns the precompiled program of the given name, and
// whether there is one. Each is built only when asked for.
func GetPrecompiled(programName string) (precompiledseccomp.Program, bool) {
	switch programName {
`)
	for _, p := range programs {
		fmt.Fprintf(&b, "\tcase %q:\n\t\treturn %s, true\n", p.Name, p.Expr("\t\t", "precompiledseccomp"))
	}
	b.WriteString("\t}\n\treturn precompiledseccomp.Program{}, false\n}\n")
	return format.Source(b.Bytes())
}
