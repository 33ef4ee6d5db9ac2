package integration_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/server"
	"github.com/sandboxd/sandbox/wire"
)

// run runs code in context ctx of sandbox id and answers the execution.
func (e *env) runIn(id, ctx, code string, timeoutSec int) wire.Execution {
	e.t.Helper()
	body := map[string]any{"code": code}
	if timeoutSec > 0 {
		body["timeoutSec"] = timeoutSec
	}
	var ex wire.Execution
	if err := json.Unmarshal(e.must(http.StatusOK, "POST", "/v1/sandbox/"+id+"/contexts/"+ctx+"/run", "acme", body).Body, &ex); err != nil {
		e.t.Fatal(err)
	}
	return ex
}

func mainText(ex wire.Execution) string {
	for _, r := range ex.Results {
		if r.IsMainResult {
			s, _ := r.Data["text/plain"].(string)
			return s
		}
	}
	return ""
}

// TestCodeContexts: a context is a real Jupyter kernel (ipykernel, IRkernel)
// in the sandbox: variables persist between runs, a figure comes back as a
// PNG and a frame as HTML, an error with its traceback, a timeout
// interrupts without losing the state, contexts are independent, and a
// context survives sleep and is carried by a fork where memory is kept.
func TestCodeContexts(t *testing.T) {
	t.Parallel() // see parallel_test.go
	onBackends(t, server.Config{}, func(t *testing.T, e *env) {
		id := e.lease("acme", nil)
		r := e.must(http.StatusCreated, "POST", "/v1/sandbox/"+id+"/contexts", "acme", map[string]any{"language": "python"})
		var c wire.CodeContext
		json.Unmarshal(r.Body, &c)
		if c.ID == "" || c.Language != "python" || c.Cwd == "" {
			t.Fatalf("the context: %s", r.Body)
		}
		if ex := e.runIn(id, c.ID, "x = 41\nimport os\nos.chdir('/tmp')", 0); ex.Error != nil {
			t.Fatalf("first run: %+v", ex)
		}
		ex := e.runIn(id, c.ID, "print('hi'); x + 1", 0)
		if mainText(ex) != "42" || strings.Join(ex.Logs.Stdout, "") != "hi\n" || ex.ExecutionCount != 2 {
			t.Errorf("x + 1: %+v", ex)
		}
		if ex := e.runIn(id, c.ID, "os.getcwd()", 0); mainText(ex) != "'/tmp'" {
			t.Errorf("the working directory did not persist: %+v", ex)
		}

		// Rich results: a matplotlib figure as PNG, a pandas frame as HTML.
		ex = e.runIn(id, c.ID, "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [3, 1, 2])\nplt.show()", 0)
		png := ""
		for _, r := range ex.Results {
			if s, ok := r.Data["image/png"].(string); ok {
				png = s
			}
		}
		if !strings.HasPrefix(png, "iVBORw0KGgo") {
			t.Errorf("no PNG from a plot: %+v", ex)
		}
		ex = e.runIn(id, c.ID, "import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': [3, 4]})", 0)
		html := ""
		for _, r := range ex.Results {
			if r.IsMainResult {
				html, _ = r.Data["text/html"].(string)
			}
		}
		if !strings.Contains(html, "<table") {
			t.Errorf("no HTML table from a frame: %+v", ex)
		}

		// An error, with its traceback.
		ex = e.runIn(id, c.ID, "1 / 0", 0)
		if ex.Error == nil || ex.Error.Name != "ZeroDivisionError" || len(ex.Error.Traceback) == 0 || strings.Contains(strings.Join(ex.Error.Traceback, ""), "\x1b[") {
			t.Errorf("1/0: %+v", ex)
		}

		// A timeout interrupts the kernel; the state stays.
		ex = e.runIn(id, c.ID, "import time\nx = 7\ntime.sleep(60)", 2)
		if !ex.TimedOut || ex.Error == nil || ex.Error.Name != "TimeoutError" {
			t.Errorf("past its timeout: %+v", ex)
		}
		if ex := e.runIn(id, c.ID, "x", 0); mainText(ex) != "7" {
			t.Errorf("after the timeout: %+v", ex)
		}

		// As a stream: each piece as it comes, then the end.
		req, _ := http.NewRequest("POST", e.http.URL+"/v1/sandbox/"+id+"/contexts/"+c.ID+"/run", strings.NewReader(`{"code": "print('a'); 6 * 7"}`))
		req.Header.Set("Authorization", "Bearer "+e.keys["acme"])
		req.Header.Set("Accept", "application/x-ndjson")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var types []string
		sc := bufio.NewScanner(res.Body)
		for sc.Scan() {
			var ev wire.ContextEvent
			json.Unmarshal(sc.Bytes(), &ev)
			types = append(types, ev.Type)
		}
		res.Body.Close()
		if res.Header.Get("Content-Type") != "application/x-ndjson" || strings.Join(types, ",") != "stdout,result,end" {
			t.Errorf("the stream: %s %v", res.Header.Get("Content-Type"), types)
		}

		// Contexts are independent; a language's name is its default one.
		if ex := e.runIn(id, "python", "x", 0); ex.Error == nil || ex.Error.Name != "NameError" {
			t.Errorf("the default context sees another's variable: %+v", ex)
		}
		var list wire.ContextsBody
		json.Unmarshal(e.must(http.StatusOK, "GET", "/v1/sandbox/"+id+"/contexts", "acme", nil).Body, &list)
		if len(list.Contexts) != 2 || list.Contexts[0].ID != c.ID || list.Contexts[1].ID != "python" || list.Contexts[1].Language != "python" {
			t.Errorf("the contexts: %+v", list)
		}

		// R, on IRkernel.
		if ex := e.runIn(id, "r", "y <- 20\ny * 2 + 2", 0); !strings.Contains(mainText(ex), "42") {
			t.Errorf("R: %+v", ex)
		}

		// JavaScript on node:vm: declarations persist, a promise is awaited,
		// a timeout interrupts without losing the context.
		if ex := e.runIn(id, "javascript", "let n = 40; const add = (a) => a + 2", 0); ex.Error != nil {
			t.Errorf("js: %+v", ex)
		}
		if ex := e.runIn(id, "javascript", "console.log('js'); Promise.resolve(add(n))", 0); mainText(ex) != "42" || strings.Join(ex.Logs.Stdout, "") != "js\n" {
			t.Errorf("js: %+v", ex)
		}
		// Top-level await, as in Node's REPL: the declarations it makes
		// stay for the next run.
		if ex := e.runIn(id, "javascript", "const got = await new Promise((r) => setTimeout(() => r(n), 10));\ngot + 1", 0); mainText(ex) != "41" {
			t.Errorf("js top-level await: %+v", ex)
		}
		if ex := e.runIn(id, "javascript", "got * 2", 0); mainText(ex) != "80" {
			t.Errorf("js after a top-level await: %+v", ex)
		}
		if ex := e.runIn(id, "javascript", "while (true) {}", 1); !ex.TimedOut || ex.Error == nil || ex.Error.Name != "TimeoutError" {
			t.Errorf("js past its timeout: %+v", ex)
		}
		if ex := e.runIn(id, "javascript", "null.x", 0); ex.Error == nil || ex.Error.Name != "TypeError" || len(ex.Error.Traceback) == 0 {
			t.Errorf("js error: %+v", ex)
		}
		if ex := e.runIn(id, "javascript", "n", 0); mainText(ex) != "40" {
			t.Errorf("js after the timeout: %+v", ex)
		}
		// Bash: variables and the working directory persist; a failing
		// last command is the run's error.
		e.runIn(id, "bash", "greeting=hello; cd /tmp", 0)
		if ex := e.runIn(id, "bash", "echo $greeting from $(pwd)", 0); strings.Join(ex.Logs.Stdout, "") != "hello from /tmp\n" || ex.Error != nil {
			t.Errorf("bash: %+v", ex)
		}
		if ex := e.runIn(id, "bash", "false", 0); ex.Error == nil || ex.Error.Value != "the last command exited 1" {
			t.Errorf("bash false: %+v", ex)
		}

		// Refusals: another org, a made-up context or language, a bad body.
		e.must(http.StatusNotFound, "GET", "/v1/sandbox/"+id+"/contexts", "globex", nil)
		e.must(http.StatusNotFound, "POST", "/v1/sandbox/"+id+"/contexts/"+c.ID+"/run", "globex", map[string]any{"code": "x"})
		e.must(http.StatusNotFound, "POST", "/v1/sandbox/"+id+"/contexts/ctx_nope/run", "acme", map[string]any{"code": "x"})
		e.must(http.StatusBadRequest, "POST", "/v1/sandbox/"+id+"/contexts", "acme", map[string]any{"language": "cobol"})
		e.must(http.StatusBadRequest, "POST", "/v1/sandbox/"+id+"/contexts", "acme", map[string]any{"language": "python", "cwd": "../../etc"})

		// Sleep and wake, then a fork: the variables are still there.
		if e.has(runtime.CapCheckpoint) {
			e.must(http.StatusOK, "POST", "/v1/sandbox/"+id+"/sleep", "acme", nil)
			e.must(http.StatusOK, "POST", "/v1/sandbox/"+id+"/wake", "acme", nil)
			if ex := e.runIn(id, c.ID, "x * 6", 0); mainText(ex) != "42" {
				t.Errorf("after sleep and wake: %+v", ex)
			}
			r := e.must(http.StatusCreated, "POST", "/v1/sandbox/"+id+"/fork", "acme", map[string]any{"ttlSec": 120})
			fork, _ := r.JSON(t)["id"].(string)
			if ex := e.runIn(fork, c.ID, "x * 6", 0); mainText(ex) != "42" {
				t.Errorf("in the fork: %+v", ex)
			}
		}

		// Delete: the context and its kernel are gone.
		e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+id+"/contexts/"+c.ID, "acme", nil)
		e.must(http.StatusNotFound, "POST", "/v1/sandbox/"+id+"/contexts/"+c.ID+"/run", "acme", map[string]any{"code": "x"})
		// The default python context's kernel is the one left.
		n := ""
		for i := 0; i < 20 && n != "1"; i++ {
			time.Sleep(500 * time.Millisecond)
			n = strings.TrimSpace(e.sh("acme", id, "ps -eo args | grep -c '[i]pykernel' || true"))
		}
		if n != "1" {
			t.Errorf("kernels running after a delete: %s", n)
		}
	})
}

// TestExecInContext: /v1/exec (and so the MCP tool run_code) with a context
// keeps variables between runs of a session, with rich results beside.
func TestExecInContext(t *testing.T) {
	t.Parallel() // see parallel_test.go
	onBackends(t, server.Config{}, func(t *testing.T, e *env) {
		var first wire.RunCodeResult
		json.Unmarshal(e.must(http.StatusOK, "POST", "/v1/exec", "acme", map[string]any{"language": "py", "code": "z = 5\nprint('set')", "context": "default"}).Body, &first)
		if first.SandboxID == "" || first.ExitCode != 0 || first.Stdout != "set\n" {
			t.Fatalf("first run: %+v", first)
		}
		var second wire.RunCodeResult
		json.Unmarshal(e.must(http.StatusOK, "POST", "/v1/exec", "acme", map[string]any{"language": "py", "code": "z * 2", "context": "default", "session_id": first.SandboxID}).Body, &second)
		if second.Stdout != "10\n" || second.ExitCode != 0 || len(second.Results) != 1 || !second.Results[0].IsMainResult {
			t.Errorf("second run: %+v", second)
		}
		var failed wire.RunCodeResult
		json.Unmarshal(e.must(http.StatusOK, "POST", "/v1/exec", "acme", map[string]any{"language": "py", "code": "undefined_name", "context": "default", "session_id": first.SandboxID}).Body, &failed)
		if failed.ExitCode != 1 || !strings.Contains(failed.Stderr, "NameError") {
			t.Errorf("a failing run: %+v", failed)
		}
		e.must(http.StatusBadRequest, "POST", "/v1/exec", "acme", map[string]any{"language": "go", "code": "package main", "context": "default", "session_id": first.SandboxID})
	})
}
