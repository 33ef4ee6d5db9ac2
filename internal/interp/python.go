package interp

// pythonPrelude runs a Python program in the same process that reports on
// it, so a warm run costs one process start, like `python3 -c` itself. It
// imports nothing that `python3 -c` does not already load (json alone would
// cost half a start: it pulls in re). It reads the InlineHeader line and
// the source from stdin, writes the source to
// {d}/main.py, runs it as __main__ the way `python3 main.py` would (argv,
// __file__, tracebacks that name main.py, atexit handlers and non-daemon
// threads waited for), then prints the trailer like cmd/sandbox-runner.
// Two things differ from a plain run, on purpose and in every mode: the
// working directory is on sys.path, so local modules import, and no
// __pycache__ is written into it (the workdir is the caller's data).
const pythonPrelude = `import sys, os
def _sandbox():
    inp = sys.stdin.buffer
    h = [bytes.fromhex(x).decode("utf-8", "surrogateescape") for x in inp.readline().decode("ascii").split()]
    nonce, d, src, args = h[0], h[1], os.path.join(h[1], h[2]), h[3:]
    os.mkdir(d, 0o700)
    code = inp.read()
    with open(src, "wb") as f:
        f.write(code)
    fd = os.open(os.devnull, os.O_RDONLY)
    os.dup2(fd, 0)
    os.close(fd)
    stamp = os.path.join(d, ".start")
    open(stamp, "wb").close()
    since = os.stat(stamp).st_ctime_ns
    cwd = os.getcwd()
    sys.argv = [src] + args
    sys.dont_write_bytecode = True
    main = type(sys)("__main__")
    main.__file__ = src
    main.__builtins__ = __builtins__
    sys.modules["__main__"] = main
    rc = 0
    try:
        exec(compile(code, src, "exec"), main.__dict__)
    except SystemExit as e:
        c = e.code
        if c is None:
            rc = 0
        elif isinstance(c, int):
            rc = c & 0xff
        else:
            try:
                print(c, file=sys.stderr)
            except Exception:
                pass
            rc = 1
    except BaseException as e:
        import traceback
        tb = e.__traceback__
        if tb is not None and tb.tb_frame.f_code.co_filename == "<string>":
            tb = tb.tb_next
        traceback.print_exception(type(e), e, tb)
        rc = 1
    try:
        t = sys.modules.get("threading")
        if t is not None:
            t._shutdown()
        import atexit
        atexit._run_exitfuncs()
    except BaseException:
        pass
    for s in (sys.stdout, sys.stderr):
        try:
            s.flush()
        except Exception:
            pass
    out = [("%s%d\n" % (nonce, rc)).encode()]
    try:
        dev, n = os.stat(cwd).st_dev, 0
        for dp, dns, fns in os.walk(cwd):
            dns[:] = [x for x in dns if os.lstat(os.path.join(dp, x)).st_dev == dev]
            for fn in fns:
                p = os.path.join(dp, fn)
                st = os.lstat(p)
                if n < 1000 and st.st_mode & 0o170000 == 0o100000 and st.st_ctime_ns > since:
                    out.append(b"%d\t%s\0" % (st.st_size, os.fsencode(os.path.relpath(p, cwd))))
                    n += 1
    except OSError:
        pass
    b = b"".join(out)
    while b:
        b = b[os.write(1, b):]
    for p in (src, stamp, d):
        try:
            (os.rmdir if p == d else os.remove)(p)
        except OSError:
            pass
    os._exit(0)
_sandbox()
`
