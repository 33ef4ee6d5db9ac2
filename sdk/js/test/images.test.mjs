// The images against a real server: snapshot, images, deleteImage, runCode
// on an image, and pullImage from the registry sdk/sdk_test.go pushed to
// (SANDBOX_TEST_IMAGE_REF: busybox with /etc/greeting; unset where the
// machine has no registry).
import { test } from "node:test";
import assert from "node:assert/strict";
import { Sandbox, SandboxError, deleteImage, images, pullImage, runCode } from "../index.mjs";

const status = (n) => (e) => e instanceof SandboxError && e.status === n;

// What the server's backend does, by GET /v1/info: cases skip by capability.
const info = await (
  await fetch(process.env.SANDBOX_URL.replace(/\/$/, "") + "/v1/info", { headers: { Authorization: `Bearer ${process.env.SANDBOX_KEY}` } })
).json();
// On kube a snapshot starts from a pulled image only: the class images these
// cases lease are on the nodes, in no registry (501 by design).
const snapshotsOfClassImages = info.capabilities.includes("rootfs-diff") && info.backend !== "kube";

test("snapshot, images, deleteImage", async (t) => {
  if (!snapshotsOfClassImages) {
    t.skip(`no snapshot of a class-image sandbox on the ${info.backend} backend`);
    return;
  }
  const sbx = await Sandbox.create();
  let tpl, code;
  try {
    await sbx.commands.run("mkdir -p ~/.config && echo 41 > ~/.config/n && echo kept > notes.txt");
    tpl = await sbx.snapshot("js-tpl", { workdir: true });
    assert.equal(tpl.name, "js-tpl");
    assert.equal(tpl.scope, "org");
    assert.equal(tpl.source, `snapshot of ${sbx.id}`);
    assert.match(tpl.digest, /^sha256:/);
    assert.ok(tpl.sizeBytes > 0 && tpl.createdAt > 0);
    await sbx.commands.run("echo more > more.txt"); // another digest: a live sandbox on one holds every name of it
    code = await sbx.snapshot("js-code", { workdir: true });
    assert.notEqual(code.digest, tpl.digest);
    await assert.rejects(sbx.snapshot("bad name"), status(400));
  } finally {
    await sbx.kill();
  }
  await assert.rejects(sbx.snapshot("gone"), status(404));
  const list = await images();
  assert.equal(list.find((i) => i.name === "js-tpl")?.digest, tpl.digest);
  assert.equal(list.find((i) => i.name === "js-code")?.digest, code.digest);
  // The class images come too, each saying what it holds.
  const execImage = list.find((i) => i.scope === "class" && i.name === "exec");
  assert.equal(execImage?.class, "exec");
  assert.match(execImage?.holds ?? "", /pandas/);

  const r = await runCode("py", "import os\nprint(int(open(os.path.expanduser('~/.config/n')).read()) + 1, open('notes.txt').read().strip())", { image: "js-code" });
  assert.equal(r.stdout, "42 kept\n");
  const again = await Sandbox.create({ image: "js-tpl" });
  try {
    assert.equal(again.info.image, tpl.digest);
    assert.equal(await again.files.readText("notes.txt"), "kept\n");
    await assert.rejects(deleteImage("js-tpl"), status(409));
  } finally {
    await again.kill();
  }
  assert.equal((await deleteImage("js-tpl")).digest, tpl.digest);
  await assert.rejects(deleteImage("js-tpl"), status(404));
});

test("pullImage", async (t) => {
  await assert.rejects(pullImage("x", "127.0.0.2:1/x:1"), status(403));
  const ref = process.env.SANDBOX_TEST_IMAGE_REF;
  if (!ref) {
    t.skip("no registry: SANDBOX_TEST_IMAGE_REF is unset");
    return;
  }
  const im = await pullImage("js-tool", ref);
  assert.equal(im.name, "js-tool");
  assert.equal(im.scope, "org");
  assert.equal(im.source, ref);
  const sbx = await Sandbox.create({ image: "js-tool" });
  try {
    assert.equal((await sbx.commands.run("cat /etc/greeting")).stdout, "hi from the image\n");
  } finally {
    await sbx.kill();
  }
  assert.equal((await deleteImage("js-tool")).digest, im.digest);
});
