package relay_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	goruntime "runtime"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/internal/relay"
)

// pair runs Serve over one end of a pipe and returns a Client on the other.
func pair(t *testing.T, dial func(int) (net.Conn, error)) *relay.Client {
	t.Helper()
	return pairWith(t, relay.Targets{Port: dial})
}

// pairWith is pair with the runner's targets given whole.
func pairWith(t *testing.T, to relay.Targets) *relay.Client {
	t.Helper()
	a, b := net.Pipe()
	go relay.Serve(b, to)
	c, err := relay.NewClient(a)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestConnect: a stream reaches the port it names, both directions flow
// and a half-close passes through (the app sees EOF, then answers); a port
// with nothing listening is ErrNoListener; many streams share the session.
func TestConnect(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				got, _ := io.ReadAll(c) // until the half-close
				c.Write(bytes.ToUpper(got))
			}()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	c := pair(t, func(p int) (net.Conn, error) {
		if p != port {
			return nil, errors.New("refused")
		}
		return net.Dial("tcp", ln.Addr().String())
	})
	for range 20 {
		conn, err := c.Connect(context.Background(), port)
		if err != nil {
			t.Fatal(err)
		}
		conn.Write([]byte("hello"))
		conn.(interface{ CloseWrite() error }).CloseWrite()
		got, err := io.ReadAll(conn)
		if err != nil || string(got) != "HELLO" {
			t.Fatalf("answer %q %v", got, err)
		}
		conn.Close()
	}
	if _, err := c.Connect(context.Background(), port+1); !errors.Is(err, relay.ErrNoListener) {
		t.Errorf("nothing listening: %v", err)
	}
	if _, err := c.Connect(context.Background(), 0); err == nil {
		t.Error("port 0 accepted")
	}
	if _, err := c.Procd(context.Background()); !errors.Is(err, relay.ErrNoDaemon) {
		t.Errorf("a runner with no daemon: %v", err)
	}
}

// TestNoRelay: a runner that predates the relay reads the hello as a bad
// program spec and exits: the client says ErrNoRelay at once.
func TestNoRelay(t *testing.T) {
	a, b := net.Pipe()
	go func() {
		line := make([]byte, 64)
		b.Read(line) // the hello, taken for a spec
		b.Close()    // "bad run spec", exit 2
	}()
	if _, err := relay.NewClient(a); !errors.Is(err, relay.ErrNoRelay) {
		t.Errorf("an old runner: %v", err)
	}
}

// TestConnectWaitsOnlyForCtx: a runner that never answers leaves Connect
// waiting only until ctx ends.
func TestConnectWaitsOnlyForCtx(t *testing.T) {
	hang := make(chan struct{})
	defer close(hang)
	c := pair(t, func(int) (net.Conn, error) { <-hang; return nil, errors.New("late") })
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := c.Connect(ctx, 80); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a runner that never answers: %v", err)
	}
}

type fuzzConn struct {
	r io.Reader
}

func (f fuzzConn) Read(p []byte) (int, error)  { return f.r.Read(p) }
func (f fuzzConn) Write(p []byte) (int, error) { return len(p), nil }
func (f fuzzConn) Close() error                { return nil }

// FuzzClient: whatever the runner's end sends — it runs where hostile
// code runs — Connect returns (an error, or a stream) without a panic and
// without waiting past its context.
func FuzzClient(f *testing.F) {
	hello := "sandbox-relay 1\n"
	f.Add(append([]byte(hello), 0, 1, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0)) // a window update and a byte
	f.Add(append([]byte(hello), 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 1, 4))
	f.Add([]byte(hello))
	f.Add([]byte("sandbox-runner: bad run spec\n")) // a runner before the relay
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := relay.NewClient(fuzzConn{bytes.NewReader(data)})
		if err != nil {
			if !errors.Is(err, relay.ErrNoRelay) {
				t.Errorf("a failed hello: %v, want ErrNoRelay", err)
			}
			return
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		if conn, err := c.Connect(ctx, 8080); err == nil {
			conn.Close()
		}
	})
}

// TestInward: asked, the runner listens; each connection made inside is a
// stream the server accepts, both ways flow; when the server stops asking
// the listener closes. A runner with nowhere to listen says so.
func TestInward(t *testing.T) {
	var ln net.Listener
	listening := make(chan net.Listener, 1)
	a, b := net.Pipe()
	go relay.Serve(b, relay.Targets{Inward: func() (net.Listener, error) {
		var err error
		ln, err = net.Listen("tcp", "127.0.0.1:0")
		listening <- ln
		return ln, err
	}})
	c, err := relay.NewClient(a)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	stop, err := c.Inward(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	inside := <-listening
	go func() {
		for {
			conn, err := c.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				got, _ := io.ReadAll(conn)
				conn.Write(bytes.ToUpper(got))
			}()
		}
	}()
	for range 5 {
		conn, err := net.Dial("tcp", inside.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conn.Write([]byte("from inside"))
		conn.(*net.TCPConn).CloseWrite()
		got, err := io.ReadAll(conn)
		conn.Close()
		if err != nil || string(got) != "FROM INSIDE" {
			t.Fatalf("answer %q %v", got, err)
		}
	}
	stop()
	deadline := time.Now().Add(5 * time.Second)
	for {
		conn, err := net.Dial("tcp", inside.Addr().String())
		if err != nil {
			break
		}
		conn.Close()
		if time.Now().After(deadline) {
			t.Fatal("the listener inside outlived the server's asking")
		}
		time.Sleep(10 * time.Millisecond)
	}

	// Nowhere to listen, and a runner with no API socket at all.
	for _, listen := range []func() (net.Listener, error){nil, func() (net.Listener, error) { return nil, errors.New("no /run/sandbox") }} {
		c := pairWith(t, relay.Targets{Inward: listen})
		if _, err := c.Inward(context.Background()); !errors.Is(err, relay.ErrNoInward) {
			t.Errorf("no listener: %v", err)
		}
	}
}

// TestCredential: a credential reaches the runner's writer whole (an empty
// one too: a removal), the writer's failure and a runner with no writer
// are ErrNoCredential, and one over the bound is refused before it is sent.
func TestCredential(t *testing.T) {
	var mu sync.Mutex
	var got [][]byte
	fail := false
	c := pairWith(t, relay.Targets{Credential: func(token []byte) error {
		mu.Lock()
		defer mu.Unlock()
		if fail {
			return errors.New("read-only")
		}
		got = append(got, token)
		return nil
	}})
	ctx := t.Context()
	big := bytes.Repeat([]byte("x"), relay.MaxCredential)
	for _, tok := range [][]byte{[]byte("eyJ.a.b"), nil, big} {
		if err := c.Credential(ctx, tok); err != nil {
			t.Fatalf("credential of %d bytes: %v", len(tok), err)
		}
	}
	mu.Lock()
	if len(got) != 3 || string(got[0]) != "eyJ.a.b" || len(got[1]) != 0 || !bytes.Equal(got[2], big) {
		t.Errorf("written: %d tokens", len(got))
	}
	fail = true
	mu.Unlock()
	if err := c.Credential(ctx, []byte("t")); !errors.Is(err, relay.ErrNoCredential) {
		t.Errorf("a failing writer: %v", err)
	}
	if err := c.Credential(ctx, append(big, 'x')); err == nil {
		t.Error("a credential over the bound was sent")
	}
	none := pairWith(t, relay.Targets{})
	if err := none.Credential(ctx, []byte("t")); !errors.Is(err, relay.ErrNoCredential) {
		t.Errorf("no writer: %v", err)
	}
}

// hostileRunner answers the hello, then writes frames, reading what the
// server writes only if reads: code in a sandbox that stopped the relay
// and writes to its pipe.
func hostileRunner(t *testing.T, reads bool, frame func(i int) []byte) *relay.Client {
	t.Helper()
	a, b := net.Pipe()
	go func() {
		io.ReadFull(b, make([]byte, len("sandbox-relay 1\n")))
		b.Write([]byte("sandbox-relay 1\n"))
		if reads {
			go io.Copy(io.Discard, b)
		}
		for i := 0; ; i++ {
			if _, err := b.Write(frame(i)); err != nil {
				return
			}
		}
	}()
	c, err := relay.NewClient(a)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); b.Close() })
	return c
}

func yamuxHeader(typ byte, flags uint16, stream, length uint32) []byte {
	h := make([]byte, 12)
	h[1] = typ
	binary.BigEndian.PutUint16(h[2:], flags)
	binary.BigEndian.PutUint32(h[4:], stream)
	binary.BigEndian.PutUint32(h[8:], length)
	return h
}

// TestFloodEndsSession: a runner that floods the server's end with pings
// while it reads nothing (the library answers each from a goroutine of its
// own, which waits up to 10 s), or that opens streams and never closes
// them (each kept, with what was sent on it, until both ends close it), has
// its session ended, and the server's goroutines stay bounded.
func TestFloodEndsSession(t *testing.T) {
	for name, flood := range map[string]struct {
		reads bool
		frame func(int) []byte
	}{
		"pings":   {false, func(i int) []byte { return yamuxHeader(2, 1, 0, uint32(i)) }},
		"streams": {true, func(i int) []byte { return yamuxHeader(1, 1, uint32(2*i+2), 0) }},
	} {
		t.Run(name, func(t *testing.T) {
			before := goruntime.NumGoroutine()
			c := hostileRunner(t, flood.reads, flood.frame)
			go func() { // the server accepts and closes each stream at once
				for {
					conn, err := c.Accept()
					if err != nil {
						return
					}
					conn.Close()
				}
			}()
			select {
			case <-c.Done():
			case <-time.After(10 * time.Second):
				t.Fatalf("the session still runs; %d goroutines (%d before)", goruntime.NumGoroutine(), before)
			}
			if n := goruntime.NumGoroutine(); n > before+100 {
				t.Errorf("%d goroutines after the flood, %d before", n, before)
			}
		})
	}
}
