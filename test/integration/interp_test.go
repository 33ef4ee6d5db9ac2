package integration_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/sandboxd/sandbox/internal/server"
)

type codeAnswer struct {
	SandboxID  string `json:"session_id"`
	NewSandbox bool   `json:"newSession"`
	ExitCode   int    `json:"exitCode"`
	Stdout     string `json:"stdout"`
	Stderr     string `json:"stderr"`
	TimedOut   bool   `json:"timedOut"`
	Files      []struct {
		Path string `json:"path"`
		Size int64  `json:"size"`
	} `json:"files"`
}

func (e *env) code(org string, body map[string]any) codeAnswer {
	e.t.Helper()
	r := e.must(http.StatusOK, "POST", "/v1/exec", org, body)
	var a codeAnswer
	if err := json.Unmarshal(r.Body, &a); err != nil {
		e.t.Fatal(err)
	}
	return a
}

// Each program prints "args: <its arguments joined by ,>", writes
// "<lang>.txt" containing "ok" in its working directory, and exits 3.
var programs = map[string]string{
	"py": `import sys
print("args: " + ",".join(sys.argv[1:]))
open("py.txt", "w").write("ok")
sys.exit(3)`,
	"js": `console.log("args: " + process.argv.slice(2).join(","));
require("fs").writeFileSync("js.txt", "ok");
process.exit(3);`,
	"ts": `import * as fs from "fs";
const args: string[] = process.argv.slice(2);
console.log("args: " + args.join(","));
fs.writeFileSync("ts.txt", "ok");
process.exit(3);`,
	"bash": `IFS=,; echo "args: $*"
printf ok > bash.txt
exit 3`,
	"r": `a <- commandArgs(trailingOnly = TRUE)
cat("args: ", paste(a, collapse = ","), "\n", sep = "")
writeLines("ok", "r.txt", sep = "")
quit(status = 3)`,
	"php": `<?php
echo "args: " . implode(",", array_slice($argv, 1)) . "\n";
file_put_contents("php.txt", "ok");
exit(3);`,
	"go": `package main

import (
	"fmt"
	"os"
	"strings"
)

func main() {
	fmt.Println("args: " + strings.Join(os.Args[1:], ","))
	os.WriteFile("go.txt", []byte("ok"), 0o644)
	os.Exit(3)
}`,
	"rs": `use std::io::Write;
fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    println!("args: {}", a.join(","));
    std::fs::File::create("rs.txt").unwrap().write_all(b"ok").unwrap();
    std::process::exit(3);
}`,
	"c": `#include <stdio.h>
int main(int argc, char **argv) {
    printf("args: ");
    for (int i = 1; i < argc; i++) printf("%s%s", i > 1 ? "," : "", argv[i]);
    printf("\n");
    FILE *f = fopen("c.txt", "w"); fputs("ok", f); fclose(f);
    return 3;
}`,
	"cpp": `#include <fstream>
#include <iostream>
int main(int argc, char **argv) {
    std::cout << "args: ";
    for (int i = 1; i < argc; i++) std::cout << (i > 1 ? "," : "") << argv[i];
    std::cout << std::endl;
    std::ofstream("cpp.txt") << "ok";
    return 3;
}`,
	"java": `import java.nio.file.*;
public class Hello {
    public static void main(String[] args) throws Exception {
        System.out.println("args: " + String.join(",", args));
        Files.writeString(Path.of("java.txt"), "ok");
        System.exit(3);
    }
}`,
	"d": `import std.stdio, std.array, std.file, core.stdc.stdlib;
void main(string[] args) {
    writeln("args: ", args[1 .. $].join(","));
    std.file.write("d.txt", "ok");
    exit(3);
}`,
	"f90": `program hello
  implicit none
  integer :: i
  character(len=64) :: a
  write(*, '(a)', advance="no") "args: "
  do i = 1, command_argument_count()
    call get_command_argument(i, a)
    if (i > 1) write(*, '(a)', advance="no") ","
    write(*, '(a)', advance="no") trim(a)
  end do
  write(*, '(a)') ""
  open(unit=10, file="f90.txt", status="replace", access="stream")
  write(10) "ok"
  close(10)
  call exit(3)
end program hello`,
}

// TestInterpreterConformance runs a program in each of the 13 languages
// through POST /v1/exec, all in one session: its stdout, a non-zero exit,
// args reaching the program (one with a space in it), and the file it
// created listed in files. The session keeps every earlier run's file.
// It runs twice: with the in-sandbox runner, and through the shell script a
// server without it uses.
func TestInterpreterConformance(t *testing.T) {
	t.Parallel() // see parallel_test.go
	t.Run("runner", func(t *testing.T) { conformance(t, newEnv(t)) })
	t.Run("sh", func(t *testing.T) { conformance(t, newEnvConfig(t, server.Config{Runner: "none"})) })
	t.Run("kube", func(t *testing.T) { e, _, _ := newKubeRunnerEnv(t); conformance(t, e) })
}

func conformance(t *testing.T, e *env) {
	langs := []string{"py", "js", "ts", "bash", "r", "php", "go", "rs", "c", "cpp", "java", "d", "f90"}
	session := ""
	for _, lang := range langs {
		// The budget is the test's, not a target: ts (tsc) takes ~7 s
		// alone here, and a loaded CI machine made it 17 times that.
		a := e.code("acme", map[string]any{
			"language": lang, "code": programs[lang], "session_id": session,
			"args": []string{"one", "two words"}, "timeoutSec": 300,
		})
		if session == "" {
			if !a.NewSandbox || a.SandboxID == "" {
				t.Fatalf("%s: the first run has no new session: %+v", lang, a)
			}
			session = a.SandboxID
		} else if a.SandboxID != session || a.NewSandbox {
			t.Fatalf("%s: session %q changed to %q", lang, session, a.SandboxID)
		}
		if a.Stdout != "args: one,two words\n" || a.ExitCode != 3 {
			t.Errorf("%s: exit %d, stdout %q, stderr %q", lang, a.ExitCode, a.Stdout, a.Stderr)
		}
		if len(a.Files) != 1 || a.Files[0].Path != lang+".txt" || a.Files[0].Size != 2 {
			t.Errorf("%s: files %+v, want only %s.txt of 2 bytes", lang, a.Files, lang)
		}
	}
	// Every run's file is still there, and readable through the session.
	r := e.must(http.StatusOK, "GET", "/v1/exec/"+session+"/files", "acme", nil)
	var list struct {
		Files []struct{ Path string } `json:"files"`
	}
	json.Unmarshal(r.Body, &list)
	if len(list.Files) != len(langs) {
		t.Errorf("session lists %d files, want %d: %s", len(list.Files), len(langs), r.Body)
	}
	if r := e.must(http.StatusOK, "GET", "/v1/exec/"+session+"/files/rs.txt", "acme", nil); string(r.Body) != "ok" {
		t.Errorf("download rs.txt: %q", r.Body)
	}
}

func TestInterpreterRefusals(t *testing.T) {
	e := newEnv(t)
	r := e.must(http.StatusBadRequest, "POST", "/v1/exec", "acme", map[string]any{"language": "cobol", "code": "x"})
	for _, l := range []string{"py", "js", "ts", "bash", "r", "php", "go", "rs", "c", "cpp", "java", "d", "f90"} {
		if !strings.Contains(string(r.Body), l) {
			t.Errorf("unknown-language answer does not list %s: %s", l, r.Body)
		}
	}
	e.must(http.StatusBadRequest, "POST", "/v1/exec", "acme", map[string]any{"language": "py", "code": "  "})
	e.must(http.StatusBadRequest, "POST", "/v1/exec", "acme", map[string]any{"language": "py", "code": "print(1)", "org": "globex"})
	e.must(http.StatusUnauthorized, "POST", "/v1/exec", "", map[string]any{"language": "py", "code": "print(1)"})
	// The query never steers a run.
	r = e.must(http.StatusOK, "POST", "/v1/exec?language=bash&code=echo+no&session_id=x", "acme",
		map[string]any{"language": "py", "code": "print('body wins')"})
	if a := r.JSON(t); a["stdout"] != "body wins\n" {
		t.Errorf("query steered the run: %s", r.Body)
	}
}

// TestInterpreterSessions: a session keeps its files between runs, input
// files arrive before the run, a compile error is an exit code with the
// diagnostics on stderr, an ended session (or another org's) yields a new
// one, and upload/download/list work on the session.
func TestInterpreterSessions(t *testing.T) {
	t.Parallel() // see parallel_test.go
	onBackends(t, server.Config{}, func(t *testing.T, e *env) {
		a := e.code("acme", map[string]any{"language": "py", "code": "open('keep.txt','w').write('kept')",
			"files": []map[string]any{{"path": "in/data.csv", "data": "a,b\n"}, {"path": "raw.bin", "dataBase64": "AA3/"}}})
		s := a.SandboxID
		b := e.code("acme", map[string]any{"language": "bash", "session_id": s,
			"code": "cat keep.txt; echo; cat in/data.csv; od -An -tx1 raw.bin"})
		if b.SandboxID != s || b.Stdout != "kept\na,b\n 00 0d ff\n" {
			t.Fatalf("second run: %+v", b)
		}
		if len(b.Files) != 0 {
			t.Errorf("a run that changed nothing lists %+v", b.Files)
		}
		c := e.code("acme", map[string]any{"language": "c", "session_id": s, "code": "int main( { return 0; }"})
		if c.ExitCode == 0 || !strings.Contains(c.Stderr, "error") || c.Stdout != "" {
			t.Errorf("compile error: %+v", c)
		}
		// Another org presenting the id gets a session of its own, not this one.
		g := e.code("globex", map[string]any{"language": "bash", "session_id": s, "code": "ls"})
		if g.SandboxID == s || !g.NewSandbox || strings.Contains(g.Stdout, "keep.txt") {
			t.Errorf("another org reused the session: %+v", g)
		}
		e.must(http.StatusNotFound, "GET", "/v1/exec/"+s+"/files", "globex", nil)
		e.must(http.StatusNotFound, "GET", "/v1/exec/"+s+"/files/keep.txt", "globex", nil)

		// Upload (multipart), then the program sees it.
		body := "--XB\r\nContent-Disposition: form-data; name=\"file\"; filename=\"../up.txt\"\r\n\r\nuploaded\r\n--XB--\r\n"
		req, _ := http.NewRequest("POST", e.http.URL+"/v1/exec/"+s+"/files", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+e.keys["acme"])
		req.Header.Set("Content-Type", "multipart/form-data; boundary=XB")
		res, err := http.DefaultClient.Do(req)
		if err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("upload: %v %v", err, res.Status)
		}
		res.Body.Close()
		if u := e.code("acme", map[string]any{"language": "bash", "session_id": s, "code": "cat up.txt"}); u.Stdout != "uploaded" {
			t.Errorf("uploaded file (its name reduced to the base name): %+v", u)
		}

		// Ended: the next run gets a new session.
		e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+s, "acme", nil)
		d := e.code("acme", map[string]any{"language": "bash", "session_id": s, "code": "ls"})
		if d.SandboxID == s || !d.NewSandbox || d.Stdout != "" {
			t.Errorf("ended session: %+v", d)
		}
	})
}

// TestInterpreterPython: Python runs in the process that reports on it;
// it must still behave as `python3 main.py` does.
func TestInterpreterPython(t *testing.T) {
	e := newEnv(t)
	a := e.code("acme", map[string]any{"language": "py", "files": []map[string]any{{"path": "helper.py", "data": "X = 41\n"}},
		"code": `import atexit, sys, threading, time
import helper
assert __name__ == "__main__" and __file__.endswith("main.py"), (__name__, __file__)
atexit.register(lambda: print("atexit ran"))
def late():
    time.sleep(0.2)
    open("late.txt", "w").write("x")
    print("thread done")
threading.Thread(target=late).start()
print(helper.X + 1, sys.argv[1:], sys.stdin.read() == "")
`, "args": []string{"a b", "-c"}})
	if a.ExitCode != 0 || a.Stdout != "42 ['a b', '-c'] True\nthread done\natexit ran\n" {
		t.Fatalf("python run: %+v", a)
	}
	if len(a.Files) != 1 || a.Files[0].Path != "late.txt" {
		t.Errorf("files written by a thread before exit: %+v", a.Files)
	}
	s := a.SandboxID
	b := e.code("acme", map[string]any{"language": "py", "session_id": s, "code": "def f():\n    raise ValueError('boom')\nf()\n"})
	if b.ExitCode != 1 || !strings.Contains(b.Stderr, `main.py", line 3, in <module>`) || !strings.Contains(b.Stderr, "ValueError: boom") ||
		strings.Contains(b.Stderr, "_sandbox") {
		t.Errorf("uncaught exception: %+v", b)
	}
	c := e.code("acme", map[string]any{"language": "py", "session_id": s, "code": "import sys\nsys.exit('bad input')"})
	if c.ExitCode != 1 || c.Stderr != "bad input\n" {
		t.Errorf("sys.exit(str): %+v", c)
	}
	d := e.code("acme", map[string]any{"language": "py", "session_id": s, "code": "print(1 +"})
	if d.ExitCode != 1 || !strings.Contains(d.Stderr, "SyntaxError") {
		t.Errorf("syntax error: %+v", d)
	}
	// Killed mid-run: the answer still lists what it wrote.
	// 5 s: Python's start alone passed 1 s on CI's busy host, before the
	// file was written.
	k := e.code("acme", map[string]any{"language": "py", "session_id": s, "timeoutSec": 5,
		"code": "open('partial.txt','w').write('p')\nimport time\ntime.sleep(30)"})
	if !k.TimedOut || k.ExitCode != 124 || len(k.Files) != 1 || k.Files[0].Path != "partial.txt" {
		t.Errorf("timed out run: %+v", k)
	}
}
