// Compiled by tsc, never run (sdk/sdk_test.go's TestTypeScriptTypes): every
// call of the SDK as a TypeScript user writes it, so the declarations in
// index.d.ts are checked by the compiler, not written beside the code
// unchecked. A method added to index.mjs gets its line here.
import {
  Sandbox, SandboxError, runCode, pullImage, images, deleteImage, quotas, usage, volumes, deleteVolume, info,
  sessionFiles, uploadFile, downloadFile,
  type CodeContext, type Execution, type Result, type FilesystemEvent, type ProcessEvent, type SandboxInfo,
} from "@sandboxd/sdk";

export async function everything(): Promise<void> {
  const sbx: Sandbox = await Sandbox.create({ timeoutSec: 60, network: { allow: ["pypi.org"] } });
  const again: Sandbox = await Sandbox.connect(sbx.id, { apiUrl: "http://127.0.0.1:8080", apiKey: "k" });
  const all: SandboxInfo[] = await Sandbox.list({ metadata: { a: "b" } });
  const info1: SandboxInfo = await sbx.refresh();
  await sbx.setTimeout(120);
  await sbx.setNetwork({ allow: ["internet"], deny: ["10.0.0.0/8"], ports: [443] });
  const url: string = await sbx.getHost(8000, { timeoutSec: 60 });
  const screen: string = await sbx.screenUrl();
  await sbx.setMetadata({ k: "v" });
  await sbx.sleep();
  await sbx.wake();
  const stopped: number = await sbx.stop();
  const st = await sbx.stats();
  const cpu: number | undefined = st.cpuSeconds;

  const r = await sbx.commands.run("echo hi", { timeoutSec: 5 });
  const code: number = r.exitCode;
  await sbx.commands.stream(["ls"], { onStdout: (b: Uint8Array) => void b });
  await sbx.files.write("a.txt", "x");
  const bytes: Uint8Array = await sbx.files.read("a.txt");
  const names: string[] = await sbx.files.list("");
  const tar: Uint8Array = await sbx.files.archive("", { gzip: true });
  await sbx.files.extract("d", tar);
  const pty = await sbx.pty.create({ session: "s" });
  pty.onData((b: Uint8Array) => void b);
  pty.send("ls\r");
  pty.resize(80, 24);
  pty.close();
  const w = await sbx.files.watchDir("d", (e: FilesystemEvent) => void e.name, { recursive: true });
  w.stop();

  const ctx: CodeContext = await sbx.createCodeContext({ language: "python", cwd: "/mnt/data" });
  const ctxs: CodeContext[] = await sbx.listCodeContexts();
  const ex: Execution = await sbx.runCode("1+1", { context: ctx, timeoutSec: 10, onResult: (res: Result) => void res.data["image/png"] });
  const main: string | undefined = ex.results.find((x) => x.isMainResult)?.data["text/plain"];
  const tb: string[] | undefined = ex.error?.traceback;
  await sbx.runCode("x", { language: "r" });
  await sbx.interruptCodeContext(ctx);
  await sbx.removeCodeContext(ctx.id);

  const p = await sbx.startProcess(["sleep", "9"], { cwd: "/tmp" });
  await sbx.processes();
  await sbx.process(p.pid);
  for await (const e of sbx.processOutput(p.pid, { from: 0 })) {
    const ev: ProcessEvent = e;
    void ev;
  }
  await sbx.sendStdin(p.pid, "x", { eof: true });
  await sbx.signal(p.pid, "TERM");
  await sbx.resizeProcess(p.pid, 80, 24);
  await sbx.narrate("s", "note");
  for await (const e of sbx.logs("s", { after: 0 })) void e.text;

  const child: Sandbox = await sbx.fork({});
  await sbx.snapshot("img", { workdir: true });
  await child.kill({ purge: true });

  const run = await runCode("py", "print(1)", { timeoutSec: 5 });
  await sessionFiles(run.session_id);
  await uploadFile(run.session_id, "f.csv", "a,b");
  const dl: Uint8Array = await downloadFile(run.session_id, "f.csv");
  await pullImage("n", "registry/x:1");
  await images();
  await deleteImage("n");
  const q = await quotas();
  const u = await usage();
  const v = await volumes();
  await deleteVolume("p");
  const i = await info();
  const caps: string[] = i.capabilities;
  try {
    await sbx.kill();
  } catch (e) {
    if (e instanceof SandboxError) void e.status;
  }
  void [again, all, info1, url, screen, stopped, cpu, code, bytes, names, ctxs, main, tb, dl, q, u, v, caps];
}
