package sdk

import (
	"encoding/json"
	"net/http"
	"os/exec"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/sandboxd/sandbox/client"
	"github.com/sandboxd/sandbox/internal/runtime/gvisor"
	"github.com/sandboxd/sandbox/internal/testenv"
)

// method names one operation in each client: the Go client's method, the
// Python SDK's sync and async ones and the TypeScript SDK's. A name is
// "Class.method" (sbx.files.x is "files.x", sbx.commands.x "commands.x")
// or a module function's.
type method struct{ Go, Py, PyAsync, TS string }

// operations is every tenant operation of the OpenAPI document and the
// method each client calls it with. TestEveryOperationHasAMethod fails on
// an operation of the document missing here, and on a name here that a
// client does not have.
var operations = map[string]method{
	"POST /v1/sandbox":                               {"Lease", "Sandbox.create", "AsyncSandbox.create", "Sandbox.create"},
	"GET /v1/sandbox":                                {"List", "Sandbox.list", "AsyncSandbox.list_sandboxes", "Sandbox.list"},
	"GET /v1/sandbox/quota":                          {"Quotas", "quotas", "async_quotas", "quotas"},
	"GET /v1/sandbox/usage":                          {"Usage", "usage", "async_usage", "usage"},
	"GET /v1/sandbox/{id}":                           {"Get", "Sandbox.refresh", "AsyncSandbox.refresh", "Sandbox.refresh"},
	"DELETE /v1/sandbox/{id}":                        {"End", "Sandbox.kill", "AsyncSandbox.kill", "Sandbox.kill"},
	"PUT /v1/sandbox/{id}/network":                   {"SetNetwork", "Sandbox.set_network", "AsyncSandbox.set_network", "Sandbox.setNetwork"},
	"PUT /v1/sandbox/{id}/metadata":                  {"SetMetadata", "Sandbox.set_metadata", "AsyncSandbox.set_metadata", "Sandbox.setMetadata"},
	"POST /v1/sandbox/{id}/renew":                    {"Renew", "Sandbox.set_timeout", "AsyncSandbox.set_timeout", "Sandbox.setTimeout"},
	"POST /v1/sandbox/{id}/exec":                     {"Exec", "commands.run", "AsyncSandbox.run", "commands.run"},
	"GET /v1/sandbox/{id}/stats":                     {"Stats", "Sandbox.stats", "AsyncSandbox.stats", "Sandbox.stats"},
	"POST /v1/sandbox/{id}/stop":                     {"Stop", "Sandbox.stop", "AsyncSandbox.stop", "Sandbox.stop"},
	"POST /v1/sandbox/{id}/sleep":                    {"Sleep", "Sandbox.sleep", "AsyncSandbox.sleep", "Sandbox.sleep"},
	"POST /v1/sandbox/{id}/wake":                     {"Wake", "Sandbox.wake", "AsyncSandbox.wake", "Sandbox.wake"},
	"POST /v1/sandbox/{id}/fork":                     {"Fork", "Sandbox.fork", "AsyncSandbox.fork", "Sandbox.fork"},
	"POST /v1/sandbox/{id}/snapshot":                 {"Snapshot", "Sandbox.snapshot", "AsyncSandbox.snapshot", "Sandbox.snapshot"},
	"GET /v1/sandbox/{id}/fs":                        {"ReadFile", "files.read", "AsyncSandbox.read", "files.read"},
	"POST /v1/sandbox/{id}/fs":                       {"WriteFile", "files.write", "AsyncSandbox.write", "files.write"},
	"GET /v1/sandbox/{id}/fs/archive":                {"Archive", "files.archive", "AsyncSandbox.archive", "files.archive"},
	"POST /v1/sandbox/{id}/fs/archive":               {"Extract", "files.extract", "AsyncSandbox.extract", "files.extract"},
	"GET /v1/sandbox/{id}/fs/watch":                  {"WatchDir", "files.watch_dir", "AsyncSandbox.watch_dir", "files.watchDir"},
	"POST /v1/sandbox/{id}/processes":                {"StartProcess", "Sandbox.start_process", "AsyncSandbox.start_process", "Sandbox.startProcess"},
	"GET /v1/sandbox/{id}/processes":                 {"Processes", "Sandbox.processes", "AsyncSandbox.processes", "Sandbox.processes"},
	"GET /v1/sandbox/{id}/processes/{pid}":           {"Process", "Sandbox.process", "AsyncSandbox.process", "Sandbox.process"},
	"GET /v1/sandbox/{id}/processes/{pid}/output":    {"ProcessOutput", "Sandbox.process_output", "AsyncSandbox.process_output", "Sandbox.processOutput"},
	"POST /v1/sandbox/{id}/processes/{pid}/stdin":    {"ProcessStdin", "Sandbox.send_stdin", "AsyncSandbox.send_stdin", "Sandbox.sendStdin"},
	"POST /v1/sandbox/{id}/processes/{pid}/signal":   {"SignalProcess", "Sandbox.signal", "AsyncSandbox.signal", "Sandbox.signal"},
	"POST /v1/sandbox/{id}/processes/{pid}/resize":   {"ResizeProcess", "Sandbox.resize_process", "AsyncSandbox.resize_process", "Sandbox.resizeProcess"},
	"POST /v1/sandbox/{id}/contexts":                 {"CreateContext", "Sandbox.create_code_context", "AsyncSandbox.create_code_context", "Sandbox.createCodeContext"},
	"GET /v1/sandbox/{id}/contexts":                  {"Contexts", "Sandbox.list_code_contexts", "AsyncSandbox.list_code_contexts", "Sandbox.listCodeContexts"},
	"DELETE /v1/sandbox/{id}/contexts/{ctx}":         {"DeleteContext", "Sandbox.remove_code_context", "AsyncSandbox.remove_code_context", "Sandbox.removeCodeContext"},
	"POST /v1/sandbox/{id}/contexts/{ctx}/interrupt": {"InterruptContext", "Sandbox.interrupt_code_context", "AsyncSandbox.interrupt_code_context", "Sandbox.interruptCodeContext"},
	"POST /v1/sandbox/{id}/contexts/{ctx}/run":       {"RunInContext", "Sandbox.run_code", "AsyncSandbox.run_code", "Sandbox.runCode"},
	"POST /v1/sandbox/{id}/ports/{port}/link":        {"PreviewLink", "Sandbox.get_host", "AsyncSandbox.get_host", "Sandbox.getHost"},
	"POST /v1/sandbox/{id}/terminal/ticket":          {"TerminalTicket", "pty.create", "AsyncSandbox.pty", "pty.create"},
	"POST /v1/sandbox/{id}/screen/ticket":            {"TerminalTicket", "Sandbox.screen_url", "AsyncSandbox.screen_url", "Sandbox.screenUrl"},
	"POST /v1/exec":                                  {"RunCode", "run_code", "async_run_code", "runCode"},
	"GET /v1/exec/{session}/files":                   {"RunFiles", "session_files", "async_session_files", "sessionFiles"},
	"POST /v1/exec/{session}/files":                  {"Upload", "upload_file", "async_upload_file", "uploadFile"},
	"GET /v1/exec/{session}/files/{path}":            {"Download", "download_file", "async_download_file", "downloadFile"},
	"GET /v1/images":                                 {"Images", "images", "async_images", "images"},
	"POST /v1/images":                                {"PullImage", "pull_image", "async_pull_image", "pullImage"},
	"DELETE /v1/images/{name}":                       {"DeleteImage", "delete_image", "async_delete_image", "deleteImage"},
	"GET /v1/volumes":                                {"Volumes", "volumes", "async_volumes", "volumes"},
	"DELETE /v1/volumes/{project}":                   {"DeleteVolume", "delete_volume", "async_delete_volume", "deleteVolume"},
	"POST /v1/sessions/{name}/events":                {"Narrate", "Sandbox.narrate", "AsyncSandbox.narrate", "Sandbox.narrate"},
	"GET /v1/sessions/{name}/events":                 {"Follow", "Sandbox.logs", "AsyncSandbox.logs", "Sandbox.logs"},
	"GET /v1/info":                                   {"Info", "info", "async_info", "info"},
}

// notTenant says why an operation of the document is not a client's:
// the first match by prefix (a method and path, or a path) wins.
var notTenant = []struct{ prefix, why string }{
	{"/v1/sandboxes", "the plural routes are aliases of /v1/sandbox's"},
	{"POST /v1/sandbox/{id}/pause", "an alias of /sleep"},
	{"POST /v1/sandbox/{id}/resume", "an alias of /wake"},
	{"/v1/sandbox/{id}/ports/{port}/{path}", "the path-form preview itself, which a browser opens (get_host mints its link)"},
	{"GET /v1/sandbox/{id}/terminal", "the console's page and socket, which a ticket opens"},
	{"GET /v1/sandbox/{id}/screen", "the display's page and socket, which a ticket opens"},
	{"/v1/orgs/", "the operator's and org admins' routes (the Go client and the CLI have them)"},
	{"/mcp", "the MCP door, for MCP clients"},
	{"/oauth/", "the issuer's routes, for OIDC clients"},
	{"/.well-known/", "the issuer's discovery, for OIDC clients"},
	{"/healthz", "for probes"}, {"/readyz", "for probes"}, {"/metrics", "for Prometheus"},
	{"/v1/openapi.json", "the document itself"},
}

// typedOp: POST /v1/sandbox/{op} with no id in the path is a typed op (the
// MCP tools' HTTP door, sbx.ops in the SDKs): each does what a resource
// route above does.
func typedOp(op string) bool {
	m, p, _ := strings.Cut(op, " ")
	rest, ok := strings.CutPrefix(p, "/v1/sandbox/")
	return m == "POST" && ok && !strings.Contains(rest, "/") && !strings.HasPrefix(rest, "{")
}

// TestEveryOperationHasAMethod enumerates the served OpenAPI document's
// operations: each tenant operation has a method in the Go client, the
// Python SDK (sync and async) and the TypeScript SDK, by name, and each
// named method exists.
func TestEveryOperationHasAMethod(t *testing.T) {
	srv := testenv.ServeWith(t, gvisor.DefaultRunsc(), []string{"acme"}, testenv.Options{})
	res, err := http.Get(srv.URL + "/v1/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.NewDecoder(res.Body).Decode(&d); err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	var ops []string
	for p, ms := range d.Paths {
		for m := range ms {
			ops = append(ops, strings.ToUpper(m)+" "+p)
		}
	}
	sort.Strings(ops)
	seen := map[string]bool{}
	for _, op := range ops {
		_, path, _ := strings.Cut(op, " ")
		excluded := typedOp(op)
		for _, n := range notTenant {
			excluded = excluded || strings.HasPrefix(op, n.prefix) || strings.HasPrefix(path, n.prefix)
		}
		if excluded {
			continue
		}
		if _, ok := operations[op]; !ok {
			t.Errorf("%s has no method in the clients: add it to every client and to operations", op)
		}
		seen[op] = true
	}
	for op := range operations {
		if !seen[op] {
			t.Errorf("%s is in operations but not in the document", op)
		}
	}

	// The Go client.
	ct := reflect.TypeFor[*client.Client]()
	var py, pyAsync, ts []string
	for op, m := range operations {
		if _, ok := ct.MethodByName(m.Go); !ok {
			t.Errorf("%s: the Go client has no %s", op, m.Go)
		}
		if m.Py == "" || m.TS == "" {
			t.Errorf("%s: no Python or TypeScript method named", op)
		}
		py, ts = append(py, m.Py), append(ts, m.TS)
		if m.PyAsync != "" {
			pyAsync = append(pyAsync, m.PyAsync)
		}
	}

	// The Python SDK: names resolved on the package and its sync and
	// async modules (sbx.files is the Files class, and so on).
	pyMissing := run(t, testenv.PythonSDK(t, "./python"), "-c", `
import sys, sandboxd, sandboxd._sync as s, sandboxd._async as a
attrs = {"files": s.Files, "commands": s.Commands, "pty": s.PtyFactory}
for name in sys.argv[1:]:
    owner, _, m = name.rpartition(".")
    o = attrs.get(owner) or getattr(sandboxd, owner, None) or getattr(s, owner, None) or getattr(a, owner, None) if owner else sandboxd
    if o is None or not callable(getattr(o, m, None)):
        print(name)
`, slices.Concat(py, pyAsync))
	for _, n := range pyMissing {
		t.Errorf("the Python SDK has no %s", n)
	}

	// The TypeScript SDK: a Sandbox object made without a server holds
	// every instance method.
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.Missing(t, testenv.GVisor, "node (scripts/deps.sh installs nodejs for the tests)")
	}
	tsMissing := run(t, node, "--input-type=module", "-e", `
import * as sdk from "./js/index.mjs";
const sbx = new sdk.Sandbox({ id: "sb_x" }, null);
for (const name of process.argv.slice(1)) {
  const [owner, m] = name.includes(".") ? name.split(".") : [null, name];
  const o = owner === null ? sdk : owner === "Sandbox" ? sbx : sbx[owner];
  const f = o?.[m] ?? (owner === "Sandbox" ? sdk.Sandbox[m] : undefined);
  if (typeof f !== "function") console.log(name);
}
`, ts)
	for _, n := range tsMissing {
		t.Errorf("the TypeScript SDK has no %s", n)
	}
}

// run runs a checker with names as its arguments and answers the lines it
// printed: the names it did not find.
func run(t *testing.T, prog string, args ...any) []string {
	t.Helper()
	var argv []string
	for _, a := range args {
		switch v := a.(type) {
		case string:
			argv = append(argv, v)
		case []string:
			argv = append(argv, v...)
		}
	}
	out, err := exec.Command(prog, argv...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", prog, err, out)
	}
	var missing []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l != "" {
			missing = append(missing, l)
		}
	}
	return missing
}
