package quota

import (
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	p := Default().Over(Policy{Live: map[string]int{"dev": 2}, CPUs: ptr(5.0), MemoryMiB: ptr(int64(9000)), DiskMiB: ptr(int64(25000)), Projects: ptr(3), Commands: ptr(2)})
	empty := Use{Live: map[string]int{}}
	for _, tc := range []struct {
		name  string
		use   Use
		ask   Ask
		quota string // "" admits
	}{
		{"first dev", empty, Ask{Class: "dev", Start: true, NewSandbox: true, NewProject: true}, ""},
		{"live dev cap", Use{Live: map[string]int{"dev": 2}}, Ask{Class: "dev", NewSandbox: true}, NameLive},
		{"exec keeps its 16", Use{Live: map[string]int{"exec": 16}}, Ask{Class: "exec", NewSandbox: true}, NameLive},
		{"exec under its 16", Use{Live: map[string]int{"exec": 15}}, Ask{Class: "exec", NewSandbox: true, Start: true}, ""},
		{"projects", Use{Projects: 3}, Ask{Class: "dev", NewProject: true}, NameProjects},
		{"an old project is no new one", Use{Projects: 3, DiskMiB: 25000}, Ask{Class: "dev", Start: true, NewSandbox: true}, ""},
		{"disk: a third 10 GiB volume fits 25000 MiB? no", Use{Projects: 2, DiskMiB: 20480}, Ask{Class: "dev", NewProject: true}, NameDiskMiB},
		{"disk: an exec project (512 MiB) fits", Use{Projects: 2, DiskMiB: 20480}, Ask{Class: "exec", NewProject: true}, ""},
		{"cpu: 2+2+2 > 5", Use{CPUs: 4}, Ask{Class: "dev", Start: true}, NameCPUs},
		{"cpu: exactly at the limit", Use{CPUs: 4}, Ask{Class: "exec", Start: true}, ""},
		{"memory", Use{MemoryMiB: 8192}, Ask{Class: "exec", Start: true}, NameMemoryMiB},
		{"commands", Use{Commands: 2}, Ask{Command: true}, NameCommands},
		{"a command under the limit", Use{Commands: 1}, Ask{Command: true}, ""},
		{"live before disk", Use{Live: map[string]int{"dev": 2}, DiskMiB: 1 << 30}, Ask{Class: "dev", NewSandbox: true, NewProject: true}, NameLive},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.use.Live == nil {
				tc.use.Live = map[string]int{}
			}
			err := Check(p, tc.use, tc.ask)
			var ex *Exceeded
			switch {
			case tc.quota == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.quota != "" && (!errors.As(err, &ex) || ex.Quota != tc.quota):
				t.Errorf("got %v, want the %s quota", err, tc.quota)
			}
		})
	}
}

func TestExceededSays(t *testing.T) {
	e := &Exceeded{Quota: NameDiskMiB, Limit: 25000, Used: 20480, Ask: 10240}
	if msg := e.Error(); !strings.Contains(msg, "quota diskMiB exceeded: limit 25000, in use 20480, this needs 10240 more") || e.Waits() {
		t.Errorf("%q waits=%v", msg, e.Waits())
	}
	c := &Exceeded{Quota: NameCPUs, Limit: 5, Used: 4.5, Ask: 1}
	if !c.Waits() || !strings.Contains(c.Error(), "in use 4.50") {
		t.Errorf("%q", c.Error())
	}
}

func TestOverAndValidate(t *testing.T) {
	d := Default()
	o := d.Over(Policy{Live: map[string]int{"dev": 1}, Projects: ptr(0)})
	if o.Live["dev"] != 1 || o.Live["exec"] != 16 || *o.Projects != 0 || *o.CPUs != DefaultCPUs {
		t.Errorf("%+v", o)
	}
	if d.Live["dev"] != DefaultLive["dev"] {
		t.Error("Over changed its receiver")
	}
	for _, bad := range []Policy{{Live: map[string]int{"gpu": 1}}, {Live: map[string]int{"dev": -1}}, {CPUs: ptr(-1.0)}, {Commands: ptr(-1)}} {
		if bad.Validate() == nil {
			t.Errorf("%+v validated", bad)
		}
	}
}

func TestFlags(t *testing.T) {
	var p Policy
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	p.RegisterFlags(fs)
	if err := fs.Parse([]string{"--quota-live", "dev=3,exec=4", "--quota-projects", "7"}); err != nil {
		t.Fatal(err)
	}
	if p.Live["dev"] != 3 || p.Live["exec"] != 4 || p.Live["desktop"] != DefaultLive["desktop"] || *p.Projects != 7 || *p.Commands != DefaultCommands {
		t.Errorf("%+v", p)
	}
	for _, bad := range []string{"gpu=1", "dev", "dev=-1", "dev=x"} {
		if err := fs.Parse([]string{"--quota-live", bad}); err == nil {
			t.Errorf("--quota-live %s accepted", bad)
		}
	}
}

func TestLines(t *testing.T) {
	l := Lines(Default(), Use{Live: map[string]int{"exec": 3}, Commands: 2})
	if len(l) != len(DefaultLive)+5 || l[0].Class != "android" || l[len(l)-1].Name != NameCommands || l[len(l)-1].Used != 2 {
		t.Errorf("%+v", l)
	}
}
