package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"

	"github.com/sandboxd/sandbox/client"
)

// benchCmd is `sandbox bench`: the public time-to-interactive benchmark's
// definition, against any server, so a user can compare on their own
// hardware. One sample is a lease and the first command in it (`node -v`
// by default), timed from the lease's request to the command's answer;
// the sandbox is ended after, untimed. Sequential: N samples one after
// the other. Burst: M samples started at once; its wall time is from the
// first request to the last answer, and every sample must succeed.
func benchCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var seq, burst int
	var class, command string
	cf, _, err := verb("bench", "[--sequential N] [--burst M] [--class C] [--command CMD]", args, stderr, func(fs *flag.FlagSet) {
		fs.IntVar(&seq, "sequential", 100, "samples one after the other (0: none)")
		fs.IntVar(&burst, "burst", 0, "samples started at once (0: none); the org's quotas must allow that many live sandboxes, their CPUs and memory (a refusal fails its sample)")
		fs.StringVar(&class, "class", "exec", "the class leased")
		fs.StringVar(&command, "command", "node -v", "the first command, run by sh")
	}, 0, 0)
	if err != nil {
		return err
	}
	if seq < 0 || burst < 0 || seq+burst == 0 {
		return fmt.Errorf("sandbox bench: --sequential and --burst are counts, and one must be above 0")
	}
	// A refusal is a failed sample with the server's reason: the client's
	// wait on a Retry-After (30 s for a quota) would be timed as the
	// lease's, and hide why.
	c := *cf.c
	c.Retries = 0
	// A failed sample is counted and the run goes on (a run of 100 keeps
	// its 99 numbers); the first failure's reason is said after the table.
	var results []benchResult
	if seq > 0 {
		r := benchResult{Mode: "sequential", Samples: seq}
		start := time.Now()
		for i := range seq {
			d, err := benchSample(ctx, &c, class, command)
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				r.fail(fmt.Sprintf("sample %d: %v", i+1, err))
			} else {
				r.add(d)
			}
			progress(stderr, "sequential", i+1, seq)
		}
		r.finish(time.Since(start))
		results = append(results, r)
	}
	if burst > 0 {
		r := benchResult{Mode: "burst", Samples: burst}
		var mu sync.Mutex
		var wg sync.WaitGroup
		start := time.Now()
		for range burst {
			wg.Go(func() {
				d, err := benchSample(ctx, &c, class, command)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					r.fail(err.Error())
					return
				}
				r.add(d)
				progress(stderr, "burst", len(r.lat), burst)
			})
		}
		wg.Wait()
		r.finish(time.Since(start))
		results = append(results, r)
	}
	rows := make([][]string, 0, len(results))
	for _, r := range results {
		rows = append(rows, []string{r.Mode, fmt.Sprint(r.Samples), fmt.Sprint(r.Failed), ms(r.P50), ms(r.P95), ms(r.Min), ms(r.Max), ms(r.Wall)})
	}
	if err := show(stdout, cf.output, results, []string{"MODE", "SAMPLES", "FAILED", "P50_MS", "P95_MS", "MIN_MS", "MAX_MS", "WALL_MS"}, rows); err != nil {
		return err
	}
	var failed error
	for _, r := range results {
		if r.Failed > 0 {
			fmt.Fprintf(stderr, "sandbox bench: %d of the %s samples failed; the first: %s\n", r.Failed, r.Mode, r.firstFailure)
			failed = exitError{code: 1}
		}
	}
	return failed
}

// benchSample leases one sandbox and runs command in it: the time to its
// answer. The sandbox is ended after, untimed.
func benchSample(ctx context.Context, c *client.Client, class, command string) (_ time.Duration, err error) {
	start := time.Now()
	sb, err := c.Lease(ctx, client.LeaseRequest{Class: class, TTLSec: 300})
	if err != nil {
		return 0, err
	}
	defer func() {
		if _, eerr := c.End(context.WithoutCancel(ctx), sb.ID, false); eerr != nil && err == nil {
			err = fmt.Errorf("ending %s: %w", sb.ID, eerr)
		}
	}()
	r, err := c.Exec(ctx, sb.ID, client.ExecRequest{Command: command})
	d := time.Since(start)
	if err != nil {
		return 0, err
	}
	if r.ExitCode != 0 {
		return 0, fmt.Errorf("%q exited %d: %s", command, r.ExitCode, strings.TrimSpace(r.Stderr))
	}
	return d, nil
}

// progress keeps one line of a terminal's stderr up to date (elsewhere:
// nothing, so a log gets no carriage returns).
func progress(w io.Writer, mode string, done, of int) {
	if f, ok := w.(*os.File); !ok || !term.IsTerminal(int(f.Fd())) {
		return
	}
	fmt.Fprintf(w, "\r%s: %d/%d", mode, done, of)
	if done == of {
		fmt.Fprintln(w)
	}
}

// benchResult is one mode's numbers, in milliseconds.
type benchResult struct {
	Mode    string  `json:"mode"`
	Samples int     `json:"samples"`
	Failed  int     `json:"failed"`
	P50     float64 `json:"p50Ms"`
	P95     float64 `json:"p95Ms"`
	Min     float64 `json:"minMs"`
	Max     float64 `json:"maxMs"`
	Wall    float64 `json:"wallMs"`

	lat          []time.Duration
	firstFailure string // the first failed sample's reason
}

func (r *benchResult) add(d time.Duration) { r.lat = append(r.lat, d) }

// fail counts a failed sample, keeping the first one's reason.
func (r *benchResult) fail(reason string) {
	if r.Failed == 0 {
		r.firstFailure = reason
	}
	r.Failed++
}

func (r *benchResult) finish(wall time.Duration) {
	r.Wall = msOf(wall)
	if len(r.lat) == 0 {
		return
	}
	slices.Sort(r.lat)
	at := func(q float64) float64 { return msOf(r.lat[int(q*float64(len(r.lat)-1)+0.5)]) }
	r.P50, r.P95, r.Min, r.Max = at(0.5), at(0.95), msOf(r.lat[0]), msOf(r.lat[len(r.lat)-1])
}

func msOf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func ms(v float64) string { return fmt.Sprintf("%.1f", v) }
