package sandbox

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestObjectMemoryKept: memoryKept is said, true or false, of a sleeping or
// a just-woken sandbox only — a backend that kept no memory says false.
func TestObjectMemoryKept(t *testing.T) {
	for _, c := range []struct {
		sb   Sandbox
		want string
	}{
		{Sandbox{Status: StatusRunning}, ""},
		{Sandbox{Status: StatusSleeping, MemoryKept: true}, `"memoryKept":true`},
		{Sandbox{Status: StatusSleeping}, `"memoryKept":false`},
		{Sandbox{Status: StatusRunning, Woken: true}, `"memoryKept":false`},
		{Sandbox{Status: StatusRunning, Woken: true, MemoryKept: true}, `"memoryKept":true`},
	} {
		b, _ := json.Marshal(c.sb.Object())
		got := ""
		if i := strings.Index(string(b), `"memoryKept"`); i >= 0 {
			got = string(b[i:])
			got = got[:strings.IndexAny(got, ",}")]
		}
		if got != c.want {
			t.Errorf("%+v: %s, want %q", c.sb, b, c.want)
		}
	}
}
