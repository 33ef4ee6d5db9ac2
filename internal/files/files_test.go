package files_test

import (
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/internal/files"
	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/runtime/fake"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/service"
	"github.com/sandboxd/sandbox/internal/store"
)

var acme = sandbox.WithPrincipal(context.Background(), sandbox.Principal{Org: "acme", Subject: "test"})

// harness is the files on the real service, a real SQLite store and the
// fake runtime, whose exec plays the file protocol's programs.
type harness struct {
	rt    *fake.Runtime
	svc   *service.Service
	files *files.Files
}

func newHarness(t *testing.T, execTimeout time.Duration) *harness {
	t.Helper()
	st, err := store.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	h := &harness{rt: fake.New()}
	h.svc = service.New(service.Config{StartTimeout: 5 * time.Second, ExecTimeout: execTimeout}, service.Deps{Store: st, Runtime: h.rt, Quotas: st})
	h.files = files.New(h.svc, execTimeout, 0)
	return h
}

func (h *harness) lease(ctx context.Context, t *testing.T) *sandbox.Sandbox {
	t.Helper()
	sb, err := h.svc.Lease(ctx, service.LeaseRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return sb
}

func wantKind(t *testing.T, err error, k sandbox.Kind) {
	t.Helper()
	if sandbox.KindOf(err) != k {
		t.Errorf("error %v, want kind %v", err, k)
	}
}

// readFake emulates the file protocol's exit codes for a path.
func readFake(files map[string]string, dirs map[string]string) fake.ExecFunc {
	return func(ctx context.Context, name string, req runtime.ExecRequest) error {
		p, max := req.Argv[len(req.Argv)-2], req.Argv[len(req.Argv)-1]
		if d, ok := dirs[p]; ok {
			io.WriteString(req.Stdout, "D\n"+d)
			return &runtime.ExitError{Code: 10}
		}
		if f, ok := files[p]; ok {
			if m, _ := strconv.Atoi(max); len(f) > m {
				return &runtime.ExitError{Code: 11}
			}
			io.WriteString(req.Stdout, "F "+strconv.Itoa(len(f))+"\n"+f)
			return nil
		}
		return &runtime.ExitError{Code: 4}
	}
}

func TestFiles(t *testing.T) {
	h := newHarness(t, 50*time.Millisecond)
	sb := h.lease(acme, t)
	h.rt.SetExec(readFake(map[string]string{"/mnt/data/a.bin": "\x00\x01raw"}, map[string]string{"/mnt/data": "a.bin\nsrc/\n", "/mnt/data/empty": ""}))
	if r, err := h.files.Read(acme, sb.ID, "a.bin", 0); err != nil || r.Dir || string(r.Data) != "\x00\x01raw" {
		t.Errorf("file: %+v %v", r, err)
	}
	if r, err := h.files.Read(acme, sb.ID, "", 0); err != nil || !r.Dir || strings.Join(r.Entries, ",") != "a.bin,src/" {
		t.Errorf("dir: %+v %v", r, err)
	}
	if r, err := h.files.Read(acme, sb.ID, "empty", 0); err != nil || !r.Dir || len(r.Entries) != 0 {
		t.Errorf("empty dir: %+v %v", r, err)
	}
	_, err := h.files.Read(acme, sb.ID, "nope", 0)
	wantKind(t, err, sandbox.KindNotFound)
	_, err = h.files.Read(acme, sb.ID, "../etc/passwd", 0)
	wantKind(t, err, sandbox.KindInvalid)

	// Past the limit the script refuses before a byte: 413, and the limit
	// it is given is the caller's.
	_, err = h.files.Read(acme, sb.ID, "a.bin", 3)
	wantKind(t, err, sandbox.KindTooLarge)
	if !strings.Contains(sandbox.Message(err), "the most this read answers") {
		t.Errorf("message %q", sandbox.Message(err))
	}
	// A file that grew after its size was read: the head's size is what is
	// sent, and the program is stopped.
	h.rt.SetExec(func(ctx context.Context, name string, req runtime.ExecRequest) error {
		io.WriteString(req.Stdout, "F 4\nabcdefgh")
		<-ctx.Done()
		return ctx.Err()
	})
	if r, err := h.files.Read(acme, sb.ID, "growing", 0); err != nil || string(r.Data) != "abcd" {
		t.Errorf("a growing file: %+v %v", r, err)
	}
	// A file that stopped short, streamed: the answer has started, so the
	// error says the stream broke.
	h.rt.SetExec(func(ctx context.Context, name string, req runtime.ExecRequest) error {
		io.WriteString(req.Stdout, "F 10\nabc")
		return &runtime.ExitError{Code: 1}
	})
	var got strings.Builder
	_, err = h.files.ReadTo(acme, sb.ID, "short", 0, func(h files.FileHead) (io.Writer, error) {
		if h.Size != 10 || h.Path != "/mnt/data/short" {
			t.Errorf("head %+v", h)
		}
		return &got, nil
	})
	if !errors.Is(err, files.ErrStreamBroken) || got.String() != "abc" {
		t.Errorf("a file cut short: %v, sent %q", err, got.String())
	}
	// A read that never ends (a FIFO) is killed at the exec timeout: 504.
	h.rt.SetExec(fake.Block(nil))
	_, err = h.files.Read(acme, sb.ID, "fifo", 0)
	wantKind(t, err, sandbox.KindTimeout)

	// Writes: the bytes go over stdin to a temporary file, which the write
	// (known size) or a second call (unknown size) puts in place; a
	// directory in the way is a 409. The fake keeps the files.
	written := map[string]string{}
	h.rt.SetExec(writeFake(written))
	if w, err := h.files.Write(acme, sb.ID, "src/x.txt", strings.NewReader("hello"), 5); err != nil || w.Bytes != 5 || w.Path != "/mnt/data/src/x.txt" || written["/mnt/data/src/x.txt"] != "hello" {
		t.Errorf("write: %+v %v %q", w, err, written)
	}
	if w, err := h.files.Write(acme, sb.ID, "y.txt", strings.NewReader("streamed"), -1); err != nil || w.Bytes != 8 || written["/mnt/data/y.txt"] != "streamed" {
		t.Errorf("write of unknown size: %+v %v %q", w, err, written)
	}
	_, err = h.files.Write(acme, sb.ID, "dir", strings.NewReader("x"), 1)
	wantKind(t, err, sandbox.KindConflict)
	_, err = h.files.Write(acme, sb.ID, "", strings.NewReader("x"), 1)
	wantKind(t, err, sandbox.KindInvalid)
	// Over the limit: refused before the sandbox when the size says so,
	// cut and removed when it does not.
	calls := len(h.rt.Calls())
	_, err = h.files.Write(acme, sb.ID, "huge", zeros{}, files.MaxFileBytes+1)
	wantKind(t, err, sandbox.KindTooLarge)
	if len(h.rt.Calls()) != calls {
		t.Error("an oversized write reached the sandbox")
	}
	_, err = h.files.Write(acme, sb.ID, "huge", io.LimitReader(zeros{}, files.MaxFileBytes+1), -1)
	wantKind(t, err, sandbox.KindTooLarge)
	// A body cut short (the client went away mid-upload) writes nothing.
	_, err = h.files.Write(acme, sb.ID, "cut", io.MultiReader(strings.NewReader("part"), errReader{}), -1)
	wantKind(t, err, sandbox.KindInvalid)
	_, err = h.files.Write(acme, sb.ID, "short", strings.NewReader("abc"), 10)
	wantKind(t, err, sandbox.KindInvalid)
	for p := range written {
		if p != "/mnt/data/src/x.txt" && p != "/mnt/data/y.txt" {
			t.Errorf("a failed write left %s", p)
		}
	}
	// The id is checked before the body is read.
	unread := &countingReader{}
	_, err = h.files.Write(acme, "sb_"+strings.Repeat("a", 26), "x", unread, -1)
	wantKind(t, err, sandbox.KindNotFound)
	if unread.n != 0 {
		t.Errorf("%d bytes of a write to an unknown id were read", unread.n)
	}
}

// writeFake plays writeScript and commitScript on a map of files.
func writeFake(files map[string]string) fake.ExecFunc {
	var mu sync.Mutex
	return func(ctx context.Context, name string, req runtime.ExecRequest) error {
		a := req.Argv
		full, tmp, arg := a[len(a)-3], a[len(a)-2], a[len(a)-1]
		mu.Lock()
		defer mu.Unlock()
		if full == "/mnt/data/dir" {
			return &runtime.ExitError{Code: 7}
		}
		if req.Stdin == nil { // the commit
			if arg == "mv" {
				files[full] = files[tmp]
			}
			delete(files, tmp)
			return nil
		}
		b, err := io.ReadAll(req.Stdin)
		if err != nil {
			return err
		}
		files[tmp] = string(b)
		if arg == "-" {
			return nil
		}
		if strconv.Itoa(len(b)) != arg {
			delete(files, tmp)
			return &runtime.ExitError{Code: 12}
		}
		files[full] = files[tmp]
		delete(files, tmp)
		return nil
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, io.ErrUnexpectedEOF }

type countingReader struct{ n int }

func (c *countingReader) Read(p []byte) (int, error) { c.n += len(p); return len(p), nil }

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }
