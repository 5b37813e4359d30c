// The official JS SDK's volume models (@alibaba-group/opensandbox 0.1.11, unchanged): a named volume shared by two
// sandboxes, read-only and subPath, and a typed refusal. Run by tiers/t2/test_official_sdk_volumes.py:
// node js_volumes.mjs <domain> <apiKey> <image> <claimName>, OSB_JS_DIR = the SDK's cache dir. One JSON line per step.
import { createRequire } from "node:module";
import path from "node:path";

const [domain, apiKey, image, claim] = process.argv.slice(2);
const require = createRequire(path.join(process.env.OSB_JS_DIR, "package.json"));
const { ConnectionConfig, Sandbox, SandboxException } = await import(require.resolve("@alibaba-group/opensandbox"));

const steps = [];
async function step(name, fn) {
  try {
    const ok = await fn();
    steps.push({ name, ok: ok === true, detail: ok === true ? "" : JSON.stringify(ok).slice(0, 800) });
  } catch (e) {
    const code = e instanceof SandboxException ? `[${e.error?.code}] ${e.error?.message ?? ""}` : "";
    steps.push({ name, ok: false, detail: `${e?.name}: ${e?.message} ${code}`.slice(0, 800) });
  }
}
const text = (m) => [...m.logs.stdout, ...m.logs.stderr].map((x) => (x.text.endsWith("\n") ? x.text : x.text + "\n")).join("");
const config = new ConnectionConfig({ domain, apiKey, protocol: "http", requestTimeoutSeconds: 60 });
const create = (volumes) => Sandbox.create({ connectionConfig: config, image, timeoutSeconds: 600,
                                             entrypoint: ["tail", "-f", "/dev/null"], volumes,
                                             resource: { cpu: "500m", memory: "512Mi" } });
const made = [];
try {
  await step("write through a named volume", async () => {
    const a = await create([{ name: "work", pvc: { claimName: claim }, mountPath: "/work" }]);
    made.push(a);
    const out = text(await a.commands.run("mkdir -p /work/d && echo from-js > /work/d/f && echo ok"));
    return out === "ok\n" || out;
  });
  await step("read it read-only and through subPath in another sandbox", async () => {
    const b = await create([{ name: "ro", pvc: { claimName: claim }, mountPath: "/ro", readOnly: true },
                            { name: "sub", pvc: { claimName: claim }, mountPath: "/sub", subPath: "d" }]);
    made.push(b);
    const read = text(await b.commands.run("cat /ro/d/f /sub/f"));
    const write = await b.commands.run("echo x > /ro/x");
    return (read === "from-js\nfrom-js\n" && write.exitCode !== 0 && text(write).includes("Read-only file system"))
      || { read, write: text(write) };
  });
  await step("a missing volume with createIfNotExists false is VOLUME::PVC_NOT_FOUND", async () => {
    try {
      made.push(await create([{ name: "w", pvc: { claimName: claim + "-absent", createIfNotExists: false },
                                mountPath: "/w" }]));
      return "created";
    } catch (e) {
      return e?.error?.code === "VOLUME::PVC_NOT_FOUND" || `${e?.error?.code} ${e?.message}`;
    }
  });
} finally {
  for (const sb of made) {
    try { await sb.kill(); } catch { /* already gone */ }
  }
}
for (const s of steps) console.log(JSON.stringify(s));
