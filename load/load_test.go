package load

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/internal/runtime/gvisor"
	"github.com/sandboxd/sandbox/internal/testenv"
)

// stall is the server's --stall-timeout here: how long a client may trickle
// its headers or take none of an answer (30 s by default).
var stall = 3 * time.Second

type server struct {
	*testenv.Server
	t    *testing.T
	http *http.Client
}

// start runs this build's server (or SANDBOX_LOAD_BIN's, for the numbers
// before a change) with keys for the two tenants.
func start(t *testing.T) *server {
	testenv.NeedGVisor(t, gvisor.DefaultRunsc(), "exec", "dev")
	bin := os.Getenv("SANDBOX_LOAD_BIN")
	args := []string{"--stall-timeout", stall.String()}
	if report() {
		args = nil // an older build may not have the flag
	}
	if bin == "" {
		bin = testenv.Binaries(t)
	}
	srv := testenv.ServeBin(t, gvisor.DefaultRunsc(), bin, []string{"hostile", "quiet"}, args...)
	return &server{Server: srv, t: t, http: &http.Client{Timeout: 2 * time.Minute}}
}

func (s *server) do(org, method, path string, body io.Reader) (int, []byte) {
	req, _ := http.NewRequest(method, s.URL+path, body)
	req.Header.Set("Authorization", "Bearer "+s.Keys[org])
	res, err := s.http.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b
}

// head is do for a long answer: its first 200 bytes are kept and the rest
// is discarded as it comes (io.ReadAll's growing copies of 40 MB in this
// process would take the CPU B's exec is measured on).
func (s *server) head(org, method, path string) (int, string) {
	req, _ := http.NewRequest(method, s.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+s.Keys[org])
	res, err := s.http.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(res.Body, 200))
	io.Copy(io.Discard, res.Body)
	return res.StatusCode, string(b)
}

func (s *server) lease(org string, body string) string {
	st, b := s.do(org, "POST", "/v1/sandbox", strings.NewReader(body))
	var sb struct{ ID string }
	json.Unmarshal(b, &sb)
	if st != 201 || sb.ID == "" {
		s.t.Fatalf("lease for %s: %d %s", org, st, b)
	}
	return sb.ID
}

// rssMiB is the server's resident memory, from /proc.
func (s *server) rssMiB() float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.Pid()))
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024
		}
	}
	return -1
}

// watch samples, until stop closes: the server's peak RSS, B's exec p50,
// and whether /readyz ever failed.
type watch struct {
	peakRSS  float64
	lat      []time.Duration
	notReady int
	bad      []string
}

func (s *server) watch(quietID string, stop <-chan struct{}) func() watch {
	var w watch
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			w.peakRSS = max(w.peakRSS, s.rssMiB())
			if st, _ := s.do("quiet", "GET", "/readyz", nil); st != 200 {
				w.notReady++
			}
			start := time.Now()
			st, b := s.do("quiet", "POST", "/v1/sandbox/"+quietID+"/exec", strings.NewReader(`{"argv":["true"]}`))
			if st != 200 {
				w.bad = append(w.bad, fmt.Sprintf("%d %s", st, b))
			} else {
				w.lat = append(w.lat, time.Since(start))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	return func() watch { wg.Wait(); return w }
}

// cpu is the CPU time, in seconds, of the server and of every sandbox
// (their parent cgroup's, v1 or v2): where a flood's cost lands.
func (s *server) cpu() (server, sandboxes float64) {
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.Pid())); err == nil {
		// utime and stime, the 14th and 15th fields, in USER_HZ (100).
		if f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:])); len(f) > 12 {
			u, _ := strconv.ParseFloat(f[11], 64)
			k, _ := strconv.ParseFloat(f[12], 64)
			server = (u + k) / 100
		}
	}
	if b, err := os.ReadFile("/sys/fs/cgroup/cpuacct/sandbox/cpuacct.usage"); err == nil {
		ns, _ := strconv.ParseFloat(strings.TrimSpace(string(b)), 64)
		return server, ns / 1e9
	}
	if b, err := os.ReadFile("/sys/fs/cgroup/sandbox/cpu.stat"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "usage_usec "); ok {
				us, _ := strconv.ParseFloat(v, 64)
				sandboxes = us / 1e6
			}
		}
	}
	return server, sandboxes
}

func report() bool { return os.Getenv("SANDBOX_LOAD_REPORT") == "1" }

// TestHostileTenant plays each flood of tenant A beside quiet tenant B.
func TestHostileTenant(t *testing.T) {
	s := start(t)
	quiet := s.lease("quiet", "")
	if st, b := s.do("quiet", "POST", "/v1/sandbox/"+quiet+"/fs?path=keep.txt", strings.NewReader("B's file")); st != 200 {
		t.Fatalf("B's file: %d %s", st, b)
	}
	// B's idle is sampled again right before each flood, with A's sandbox
	// there and what the floods before left, and a flood is held to the p50
	// of all the samples so far: B's p50 beside no flood drifted from 9 to
	// 16 ms over one run (more sandboxes, a warmer server, a cluster's
	// timers in CI) and a window of 15 just after a flood read up to 27 ms,
	// both as far as the 2× bound is from an exec of ~10 ms.
	var idleLat []time.Duration
	idleP50 := func() time.Duration {
		for range 15 {
			start := time.Now()
			s.do("quiet", "POST", "/v1/sandbox/"+quiet+"/exec", strings.NewReader(`{"argv":["true"]}`))
			idleLat = append(idleLat, time.Since(start))
		}
		return testenv.P50(idleLat)
	}
	hostile := s.lease("hostile", "")
	// The operator holds A to 8 concurrent commands (the default is 64)
	// and 5 projects (20).
	if out, err := exec.Command(s.Bin, "quota", "set", "--data", s.Data, "--org", "hostile", "--commands", "8", "--projects", "5").CombinedOutput(); err != nil && !report() {
		t.Fatalf("quota set: %v %s", err, out)
	}
	t.Logf("idle: server RSS %.0f MiB, B's exec p50 %v", s.rssMiB(), idleP50())

	upload := func(path string, size int) (int, string) {
		st, b := s.do("hostile", "POST", path, io.LimitReader(zero{}, int64(size)))
		return st, string(b)
	}
	floods := []struct {
		name    string
		n       int
		run     func(i int) (int, string)
		rssMiB  float64 // bound on the peak
		allowed []int   // statuses a flood request may get
		at      int     // requests at once: 0 is 8, and a flood of 100 or more goes all at once
		// want is how many answers of each status the flood must get: the
		// quota's count, served and refused (429 commands, 403 projects),
		// where it decides them; nil where allowed says all there is.
		want map[int]int
		// slow bounds B's exec p50 during the flood, in B's idle p50s
		// (plus 5 ms): 0 is 2.
		slow float64
	}{
		{"12 uploads of 60 MB to an unknown id", 12, func(int) (int, string) {
			return upload("/v1/sandbox/sb_"+strings.Repeat("z", 26)+"/fs?path=x", 60<<20)
		}, 150, []int{404, 0}, 0, nil, 0},
		{"12 uploads of 60 MB to a real sandbox", 12, func(i int) (int, string) {
			return upload(fmt.Sprintf("/v1/sandbox/%s/fs?path=up%d", hostile, i), 60<<20)
		}, 200, []int{200, 429, 400}, 0, nil, 0},
		// Each holds its slot for 5 s, longer than the 100 take to arrive:
		// 8 run, 92 are refused.
		{"100 execs at once against a quota of 8", 100, func(int) (int, string) {
			st, b := s.do("hostile", "POST", "/v1/sandbox/"+hostile+"/exec", strings.NewReader(`{"command":"sleep 5"}`))
			return st, string(b)
		}, 200, []int{200, 429}, 0, map[int]int{200: 8, 429: 92}, 0},
		{"200 event followers", 200, func(i int) (int, string) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "GET", s.URL+"/v1/sessions/flood/events", nil)
			req.Header.Set("Authorization", "Bearer "+s.Keys["hostile"])
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				return 0, err.Error()
			}
			defer res.Body.Close()
			b, _ := io.ReadAll(io.LimitReader(res.Body, 512))
			return res.StatusCode, string(b)
		}, 200, []int{200, 429}, 0, map[int]int{200: 8, 429: 192}, 0}, // each follows for 3 s
		{"typed reads of a 40 MB file, 8 at once", 24, func(int) (int, string) {
			st, b := s.do("hostile", "POST", "/v1/sandbox/read", strings.NewReader(`{"id":"`+hostile+`","path":"big"}`))
			return st, string(b[:min(len(b), 200)])
		}, 200, []int{413, 429}, 0, map[int]int{413: 24}, 0},
		// A REST read streams the file from the sandbox to the client.
		//
		// It is the one flood that is A's own work served at full speed
		// (~300 MB/s: A's cat at its one-core quota, the server's copy and
		// this process's read take 1.4 of the two cores, measured by the
		// CPU figures logged), so B shares the core that is left and its
		// bound is 3× idle: measured 1.8–2.8× (2.7× in CI).
		{"REST reads of a 40 MB file, 8 at once", 24, func(int) (int, string) {
			return s.head("hostile", "GET", "/v1/sandbox/"+hostile+"/fs?path=big")
		}, 200, []int{200, 429}, 0, nil, 3}, // 8 at once fit the quota, but a reader has the whole body before the server's handler returns and frees its slot, so its next read may meet a full quota (a race, not the quota's decision: seen 200:14 429:10 in CI); every refusal must still name its quota
		// 100 clients ask for the 40 MB file and read none of it: the
		// server cuts each after the stall bound (499 here: the answer
		// ended short), which frees A's command slots.
		{"100 sockets asking for 40 MB and not reading", 100, func(int) (int, string) {
			return s.notReading("/v1/sandbox/" + hostile + "/fs?path=big")
		}, 200, []int{429, 499}, 0, map[int]int{499: 8, 429: 92}, 0},
		// Projects up to the quota, one after another: each lease makes a
		// dev project's volume, kept after the end; the sixth is refused.
		{"8 dev projects against a quota of 5", 8, func(i int) (int, string) {
			st, b := s.do("hostile", "POST", "/v1/sandbox", strings.NewReader(fmt.Sprintf(`{"class":"dev","project":"p%d"}`, i)))
			var sb struct{ ID string }
			if json.Unmarshal(b, &sb); st == 201 {
				if st, b := s.do("hostile", "DELETE", "/v1/sandbox/"+sb.ID, nil); st != 200 {
					return st, string(b)
				}
			}
			return st, string(b)
		}, 200, []int{201, 403}, 1, map[int]int{201: 5, 403: 3}, 0},
		// Slowloris: 200 connections sending a header byte every 500 ms.
		// The server cuts each at the stall bound (408 here).
		{"200 connections trickling their headers", 200, func(int) (int, string) {
			return s.slowHeaders()
		}, 200, []int{408}, 0, map[int]int{408: 200}, 0},
	}
	// The read flood needs a big file.
	s.do("hostile", "POST", "/v1/sandbox/"+hostile+"/exec", strings.NewReader(`{"command":"head -c 40000000 /dev/zero > big"}`))
	for _, f := range floods {
		t.Run(f.name, func(t *testing.T) {
			idle := idleP50()
			srv0, sbs0 := s.cpu()
			stop := make(chan struct{})
			collect := s.watch(quiet, stop)
			var mu sync.Mutex
			statuses := map[int]int{}
			var msgs, unnamed []string
			at := cmp.Or(f.at, 8)
			if f.n >= 100 {
				at = f.n
			}
			sem := make(chan struct{}, at)
			var wg sync.WaitGroup
			for i := range f.n {
				wg.Add(1)
				sem <- struct{}{}
				go func() {
					defer wg.Done()
					defer func() { <-sem }()
					st, msg := f.run(i)
					mu.Lock()
					statuses[st]++
					if st/100 != 2 && len(msgs) < 3 {
						msgs = append(msgs, fmt.Sprintf("%d %.160s", st, msg))
					}
					if st == 429 && !strings.Contains(msg, "quota commands exceeded: limit 8") ||
						st == 403 && !strings.Contains(msg, "quota projects exceeded: limit 5") {
						unnamed = append(unnamed, fmt.Sprintf("%d %.160s", st, msg))
					}
					mu.Unlock()
				}()
			}
			wg.Wait()
			time.Sleep(300 * time.Millisecond)
			close(stop)
			w := collect()
			srv1, sbs1 := s.cpu()
			t.Logf("%s: statuses %v; CPU: server %.2f s, sandboxes %.2f s; B/idle %.1fx; peak RSS %.0f MiB; B's exec p50 %v (idle %v) over %d calls; readyz failed %d; e.g. %q",
				f.name, statuses, srv1-srv0, sbs1-sbs0, float64(testenv.P50(w.lat))/float64(max(1, idle)), w.peakRSS, testenv.P50(w.lat), idle, len(w.lat), w.notReady, msgs)
			if report() {
				return
			}
			for st := range statuses {
				if !slices.Contains(f.allowed, st) {
					t.Errorf("status %d: want one of %v (%q)", st, f.allowed, msgs)
				}
			}
			// The quota decided what it should: no more served, no fewer
			// refused, and every refusal is the quota's.
			if f.want != nil && !maps.Equal(statuses, f.want) {
				t.Errorf("statuses %v, want %v", statuses, f.want)
			}
			if len(unnamed) > 0 {
				t.Errorf("%d refusals that do not name their quota, e.g. %s", len(unnamed), unnamed[0])
			}
			if f.rssMiB > 0 && w.peakRSS > f.rssMiB {
				t.Errorf("peak RSS %.0f MiB, over the bound of %.0f MiB", w.peakRSS, f.rssMiB)
			}
			if w.notReady > 0 || len(w.bad) > 0 {
				t.Errorf("B was refused or /readyz failed: %d, %q", w.notReady, w.bad)
			}
			slow := cmp.Or(f.slow, 2)
			if p := testenv.P50(w.lat); p > time.Duration(slow*float64(idle))+5*time.Millisecond {
				t.Errorf("B's exec p50 %v is over %.0f× its idle %v (measured just before)", p, slow, idle)
			}
		})
	}
	// Nothing A's floods held is still held: its commands run.
	if st, b := s.do("hostile", "POST", "/v1/sandbox/"+hostile+"/exec", strings.NewReader(`{"argv":["true"]}`)); st != 200 {
		t.Errorf("A's exec after the floods: %d %s", st, b)
	}
	// Nothing of B's was lost.
	if st, b := s.do("quiet", "GET", "/v1/sandbox/"+quiet+"/fs?path=keep.txt", nil); st != 200 || !bytes.Equal(b, []byte("B's file")) {
		t.Errorf("B's file after the floods: %d %q", st, b)
	}
}

// notReading asks for path and takes none of the answer for twice the
// stall bound, then reads what is left: 499 if the server cut the answer
// short, else the answer's status.
func (s *server) notReading(path string) (int, string) {
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.URL, "http://"))
	if err != nil {
		return 0, err.Error()
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", path, s.Keys["hostile"])
	time.Sleep(2 * stall)
	conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 499, "cut before the head: " + err.Error()
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	n, err := io.Copy(io.Discard, res.Body)
	if res.StatusCode == 200 && n < res.ContentLength {
		return 499, fmt.Sprintf("cut after %d of %d bytes: %v", n, res.ContentLength, err)
	}
	return res.StatusCode, fmt.Sprintf("all %d bytes came after all", n)
}

// slowHeaders trickles a request's headers a byte every 500 ms until the
// server hangs up: 408 if it did so within the stall bound (and a second),
// else 0 and how long it held on.
func (s *server) slowHeaders() (int, string) {
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.URL, "http://"))
	if err != nil {
		return 0, err.Error()
	}
	defer conn.Close()
	start := time.Now()
	gone := make(chan struct{})
	go func() { io.Copy(io.Discard, conn); close(gone) }()
	conn.Write([]byte("GET /readyz HTTP/1.1\r\nHost: x\r\nX-Slow: "))
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for time.Since(start) < 5*stall {
		select {
		case <-gone:
			if d := time.Since(start); d <= stall+time.Second {
				return 408, "cut after " + d.Round(time.Millisecond).String()
			}
			return 0, "held for " + time.Since(start).Round(time.Millisecond).String()
		case <-tick.C:
			conn.Write([]byte("a"))
		}
	}
	return 0, "still open after " + time.Since(start).Round(time.Millisecond).String()
}

type zero struct{}

func (zero) Read(p []byte) (int, error) { clear(p); return len(p), nil }
