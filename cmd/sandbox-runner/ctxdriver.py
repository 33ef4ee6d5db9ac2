# The driver of one code context (cmd/sandbox-runner/contexts.go runs it as
# `python3 -c <this> KERNEL`): it starts a Jupyter kernel through Debian's
# jupyter_client, then turns each request line on stdin ({"code", "timeout"})
# into an execute_request and writes what the kernel says of it as JSON
# lines on stdout (procwire.Event), ending with {"type": "end"}. The kernel
# protocol is jupyter_client's, not ours: this file only maps messages.
#
# The first line it writes is {"ready": true, "kernelPid": N} or
# {"error": "..."}. stdin's end shuts the kernel down.
import json
import os
import queue
import re
import sys
import time

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def say(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main():
    name = sys.argv[1]
    if name == "bash":
        return bash_main()
    try:
        from jupyter_client.manager import KernelManager
    except ImportError:
        say({"error": "this image has no Jupyter client (python3-jupyter-client): code contexts run on the exec image"})
        return 1
    km = KernelManager(kernel_name=name)
    try:
        km.start_kernel(cwd=os.getcwd())
        kc = km.client()
        kc.start_channels()
        kc.wait_for_ready(timeout=120)
    except Exception as e:  # noqa: BLE001 - the reason goes to the caller
        msg = str(e) or type(e).__name__
        if "No such kernel" in msg:
            msg = f"this image has no {name} Jupyter kernel: code contexts run on the exec image"
        say({"error": f"the kernel did not start: {msg}"})
        try:
            km.shutdown_kernel(now=True)
        except Exception:  # noqa: BLE001
            pass
        return 1
    pid = 0
    try:
        pid = km.provisioner.process.pid
    except Exception:  # noqa: BLE001
        pass
    say({"ready": True, "kernelPid": pid})
    for line in sys.stdin:
        try:
            req = json.loads(line)
        except ValueError:
            say({"type": "error", "name": "BadRequest", "value": "not JSON", "traceback": []})
            say({"type": "end"})
            continue
        run(km, kc, req.get("code", ""), req.get("timeout") or 0, name == "ir")
    try:
        km.shutdown_kernel(now=True)
    except Exception:  # noqa: BLE001
        pass
    return 0


def run(km, kc, code, timeout, values_displayed):
    """values_displayed: the kernel shows a top-level value as display_data
    (IRkernel does), which then is the run's main result."""
    msg_id = kc.execute(code, store_history=True, allow_stdin=False, stop_on_error=False)
    start = time.monotonic()
    deadline = start + timeout if timeout > 0 else None
    timed_out = False
    count = 0
    while True:
        try:
            msg = kc.get_iopub_msg(timeout=0.5)
        except queue.Empty:
            if deadline is not None and time.monotonic() > deadline:
                if not timed_out:
                    # The kernel is interrupted, not restarted: the
                    # context's variables stay.
                    timed_out = True
                    km.interrupt_kernel()
                    deadline = time.monotonic() + 10
                else:
                    say({"type": "error", "name": "TimeoutError",
                         "value": "the kernel did not stop after an interrupt; restarting it lost the context's state",
                         "traceback": []})
                    km.restart_kernel(now=True)
                    break
            if not km.is_alive():
                say({"type": "error", "name": "KernelDied", "value": "the kernel died; the context's state is lost", "traceback": []})
                break
            continue
        if msg.get("parent_header", {}).get("msg_id") != msg_id:
            continue
        kind, c = msg["msg_type"], msg["content"]
        if kind == "stream":
            say({"type": "stdout" if c.get("name") == "stdout" else "stderr", "text": c.get("text", "")})
        elif kind in ("execute_result", "display_data"):
            say({"type": "result", "data": c.get("data", {}), "isMainResult": kind == "execute_result" or values_displayed})
        elif kind == "execute_input":
            count = c.get("execution_count") or count
        elif kind == "error":
            if timed_out:
                say({"type": "error", "name": "TimeoutError",
                     "value": f"the run passed its {timeout:g} s timeout and was interrupted; the context's state is kept",
                     "traceback": [ANSI.sub("", t) for t in c.get("traceback", [])]})
            else:
                say({"type": "error", "name": c.get("ename", ""), "value": c.get("evalue", ""),
                     "traceback": [ANSI.sub("", t) for t in c.get("traceback", [])]})
        elif kind == "status" and c.get("execution_state") == "idle":
            break
    # The shell channel's reply is read so replies do not pile up.
    end = time.monotonic() + 1
    while time.monotonic() < end:
        try:
            reply = kc.get_shell_msg(timeout=max(0.01, end - time.monotonic()))
        except queue.Empty:
            break
        if reply.get("parent_header", {}).get("msg_id") == msg_id:
            count = reply["content"].get("execution_count") or count
            break
    say({"type": "end", "executionCount": count, "timedOut": timed_out})


def tty_text(s):
    """What a pty said, as text: CRLF as LF, no bracketed-paste marks."""
    return s.replace("\x1b[?2004h", "").replace("\x1b[?2004l", "").replace("\r\n", "\n").replace("\r", "")


def bash_main():
    """A bash context: one interactive bash kept on a pty (pexpect's
    replwrap, from the image's python3-pexpect), its variables, functions
    and working directory persisting between runs. Its output is the pty's
    (stdout and stderr together); a run whose last command failed is an
    error named by its exit status. SIGINT to the driver interrupts the
    running command (^C on the pty), as it does a Jupyter kernel."""
    import signal
    try:
        import pexpect
        from pexpect import replwrap
        sh = replwrap.bash()
        # Readline's bracketed paste wraps every line in escapes.
        sh.run_command("bind 'set enable-bracketed-paste off' 2>/dev/null; export TERM=dumb", timeout=30)
    except Exception as e:  # noqa: BLE001
        say({"error": f"the kernel did not start: bash: {e}"})
        return 1
    signal.signal(signal.SIGINT, lambda *_: sh.child.sendintr())
    say({"ready": True, "kernelPid": os.getpid()})
    count = 0
    for line in sys.stdin:
        try:
            req = json.loads(line)
        except ValueError:
            continue
        count += 1
        code, timeout = req.get("code", ""), req.get("timeout") or None
        timed_out = False
        try:
            out = sh.run_command(code.rstrip("\n"), timeout=timeout)
        except pexpect.TIMEOUT:
            timed_out = True
            sh.child.sendintr()
            try:
                sh.child.expect_exact(sh.prompt, timeout=10)
            except pexpect.TIMEOUT:
                pass
            out = sh.child.before or ""
        except ValueError as e:  # an incomplete command (an open quote, a missing fi)
            say({"type": "error", "name": "SyntaxError", "value": str(e), "traceback": []})
            say({"type": "end", "executionCount": count})
            continue
        except pexpect.EOF:
            say({"type": "error", "name": "KernelDied", "value": "bash has exited; the context's state is lost", "traceback": []})
            say({"type": "end", "executionCount": count})
            return 0
        out = tty_text(out)
        if out:
            say({"type": "stdout", "text": out})
        if timed_out:
            say({"type": "error", "name": "TimeoutError",
                 "value": f"the run passed its {timeout:g} s timeout and was interrupted; the context's state is kept", "traceback": []})
        else:
            status = tty_text(sh.run_command("echo $?", timeout=10)).strip()
            if status not in ("", "0"):
                say({"type": "error", "name": "ExitStatus", "value": f"the last command exited {status}", "traceback": []})
        say({"type": "end", "executionCount": count, "timedOut": timed_out})
    return 0


if __name__ == "__main__":
    sys.exit(main())
