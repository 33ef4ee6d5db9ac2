package integration_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/creack/pty"

	"github.com/sandboxd/sandbox/internal/runtime/gvisor"
)

// Keystroke echo through the terminal socket, against the same through a
// raw `runsc exec` TTY (the floor):
//
//	go test -run '^$' -bench 'TerminalEcho' -benchtime 200x ./test/integration/
//
// Each iteration types one character into an interactive bash and waits for
// the pty's echo of it.

func BenchmarkTerminalEcho(b *testing.B) {
	e := benchEnv(b)
	id := e.lease("acme", nil)
	tk, _ := e.ticketFor("acme", id, "terminal")
	ctx := context.Background()
	c, _, err := websocket.Dial(ctx, e.wsURL(id, "terminal", tk, ""), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer c.CloseNow()
	readUntil := func(want string) {
		var got strings.Builder
		for !strings.Contains(got.String(), want) {
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, p, err := c.Read(rctx)
			cancel()
			if err != nil {
				b.Fatalf("waiting for %q: %v (%q)", want, err, got.String())
			}
			got.Write(p)
		}
	}
	c.Write(ctx, websocket.MessageBinary, []byte("echo ready-$((1+1))\r"))
	readUntil("ready-2")
	echoes(b, func(p []byte) { c.Write(ctx, websocket.MessageBinary, p) }, readUntil)
}

func BenchmarkTerminalEchoFloor(b *testing.B) {
	e := benchEnv(b)
	e.lease("acme", nil)
	_, flags, name := bundleOf(b, e)
	// The same process the service asks for, with a terminal: runsc then
	// uses its own stdin, a pty here, as the console.
	proc := filepath.Join(b.TempDir(), "process.json")
	raw, _ := json.Marshal(map[string]any{
		"terminal": true, "user": map[string]any{"uid": 1000, "gid": 1000}, "cwd": "/mnt/data",
		"args": []string{"bash", "-l"},
		"env":  []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/home/user", "TERM=xterm-256color"},
	})
	os.WriteFile(proc, raw, 0o600)
	cmd := exec.Command(gvisor.DefaultRunsc(), append(slices.Clone(flags), "exec", "--process", proc, name)...)
	f, err := pty.Start(cmd)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait(); f.Close() }()
	buf := make([]byte, 4096)
	readUntil := func(want string) {
		var got strings.Builder
		for !strings.Contains(got.String(), want) {
			n, err := f.Read(buf)
			if err != nil {
				b.Fatalf("waiting for %q: %v (%q)", want, err, got.String())
			}
			got.Write(buf[:n])
		}
	}
	f.Write([]byte("echo ready-$((1+1))\r"))
	readUntil("ready-2")
	echoes(b, func(p []byte) { f.Write(p) }, readUntil)
}

// echoes times typing one character and reading back its echo.
func echoes(b *testing.B, write func([]byte), readUntil func(string)) {
	i := 0
	measure(b, nil, func() func() {
		ch := string(rune('a' + i%26))
		i++
		write([]byte(ch))
		readUntil(ch)
		return nil
	})
}
