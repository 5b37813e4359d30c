// The official JS SDK (@alibaba-group/opensandbox 0.1.11, unchanged) through lifecycle, commands, files,
// endpoints, metrics, egress (no sidecar on Docker) and the manager API. Run by tiers/t2/test_official_js.py
// (mock) and tiers/t4/test_live_clients.py (live): node js_flow.mjs <domain> <apiKey> <image>, with
// NODE_PATH-free resolution through the cache dir given as OSB_JS_DIR. One JSON line per step on stdout.
import { createRequire } from "node:module";
import path from "node:path";

const [domain, apiKey, image] = process.argv.slice(2);
const require = createRequire(path.join(process.env.OSB_JS_DIR, "package.json"));
const sdkPath = require.resolve("@alibaba-group/opensandbox");
const { ConnectionConfig, Sandbox, SandboxManager, SandboxException } = await import(sdkPath);

const steps = [];
async function step(name, fn) {
  try {
    const ok = await fn();
    steps.push({ name, ok: ok !== false, detail: ok === false ? "check failed" : "" });
  } catch (e) {
    const code = e instanceof SandboxException ? `[${e.error?.code}] ${e.error?.message ?? ""}` : "";
    steps.push({ name, ok: false, detail: `${e?.name}: ${e?.message} ${code}`.slice(0, 800) });
  }
}
async function fails(name, fn, want) {
  try {
    await fn();
    steps.push({ name, ok: false, detail: "no error" });
  } catch (e) {
    const text = `${e?.message ?? ""} ${e?.error?.code ?? ""} ${e?.statusCode ?? ""}`;
    steps.push({ name, ok: want.test(text), detail: want.test(text) ? "" : text.slice(0, 800) });
  }
}
const out = (m) => m.logs.stdout.map((x) => x.text).join("");

const config = new ConnectionConfig({ domain, apiKey, protocol: "http", requestTimeoutSeconds: 60 });
let sb;
await step("Sandbox.create", async () => {
  sb = await Sandbox.create({ connectionConfig: config, image, timeoutSeconds: 600,
                              entrypoint: ["tail", "-f", "/dev/null"], env: { GREETING: "hi-js" },
                              metadata: { via: "js" }, resource: { cpu: "500m", memory: "512Mi" } });
  return !!sb.id;
});
if (sb) {
  try {
    await step("getInfo", async () => {
      const info = await sb.getInfo();
      return info.status.state === "Running" && info.metadata?.via === "js";
    });
    await step("isHealthy", async () => (await sb.isHealthy()) === true);
    await step("commands.run", async () => out(await sb.commands.run("echo $GREETING")).trim() === "hi-js");
    await step("commands.run exit code", async () => {
      const ex = await sb.commands.run("echo err >&2; exit 3");
      return ex.exitCode === 3 && ex.logs.stderr.map((x) => x.text).join("").trim() === "err";
    });
    await step("commands.run workingDirectory", async () =>
      out(await sb.commands.run("pwd", { workingDirectory: "/tmp" })).trim() === "/tmp");
    await step("background + status + logs", async () => {
      const ex = await sb.commands.run("echo bg-line; sleep 0.3", { background: true });
      const deadline = Date.now() + 15000;
      let st = await sb.commands.getCommandStatus(ex.id);
      while (st.running && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 100));
        st = await sb.commands.getCommandStatus(ex.id);
      }
      const logs = await sb.commands.getBackgroundCommandLogs(ex.id);
      return st.running === false && st.exitCode === 0 && logs.content.includes("bg-line");
    });
    await step("files write/read", async () => {
      await sb.files.createDirectories([{ path: "/tmp/js", mode: 755 }]);
      await sb.files.writeFiles([{ path: "/tmp/js/a.txt", data: "hello js", mode: 644 }]);
      return (await sb.files.readFile("/tmp/js/a.txt")) === "hello js";
    });
    await step("files search", async () => {
      const found = await sb.files.search({ path: "/tmp/js", pattern: "*.txt" });
      return found.map((f) => f.path).join(",") === "/tmp/js/a.txt";
    });
    await step("files info/move/delete", async () => {
      const info = await sb.files.getFileInfo(["/tmp/js/a.txt"]);
      await sb.files.moveFiles([{ src: "/tmp/js/a.txt", dest: "/tmp/js/b.txt" }]);
      await sb.files.deleteFiles(["/tmp/js/b.txt"]);
      await sb.files.deleteDirectories(["/tmp/js"]);
      return info["/tmp/js/a.txt"]?.size === 8;
    });
    await step("getEndpoint", async () => (await sb.getEndpoint(44772)).endpoint.endsWith("/proxy/44772"));
    await step("getMetrics", async () => (await sb.getMetrics()).cpuCount > 0);
    await step("renew", async () => !!(await sb.renew(1200)).expiresAt);
    await step("patchMetadata", async () => (await sb.patchMetadata({ extra: "1" })).metadata?.extra === "1");
    await fails("getEgressPolicy (no sidecar)", () => sb.getEgressPolicy(), /502|Bad Gateway/);
    await step("pause + resume", async () => {
      await sb.pause();
      const paused = (await sb.getInfo()).status.state === "Paused";
      sb = await sb.resume();
      return paused && out(await sb.commands.run("echo back")).trim() === "back";
    });
    await step("SandboxManager.listSandboxInfos", async () => {
      const m = SandboxManager.create({ connectionConfig: config });
      try {
        const list = await m.listSandboxInfos({ states: ["Running"], pageSize: 50 });
        return list.items.some((s) => s.id === sb.id);
      } finally {
        await m.close();
      }
    });
  } finally {
    const id = sb.id;
    await step("kill", async () => { await sb.kill(); return true; });
    const m = SandboxManager.create({ connectionConfig: config });
    await fails("getSandboxInfo after kill", () => m.getSandboxInfo(id), /SANDBOX_NOT_FOUND|not found/i);
    await m.close();
    await sb.close();
  }
}
for (const s of steps) process.stdout.write(JSON.stringify(s) + "\n");
