"""t1: the workbench dashboard in a real browser (Debian's headless chromium over the DevTools
Protocol, tiers/t1/workbench/cdp.py). The page logs in with the key, goes live over SSE, shows a sandbox created
through the API, journals requests with their status, adds a fault rule from its form and kills a
sandbox with its button, lists a snapshot; with an image store, its Images panel shows the cached image (refs,
size, digest, the sandboxes using it) and a snapshot restored into a sandbox. ``OSB_DASHBOARD_PNG=path`` saves the screenshot (docs/dashboard.png was made so)."""

from __future__ import annotations

import json
import os

import pytest

from mock_opensandbox.runtime import optional
from mock_opensandbox.server import MockOpenSandbox
from tiers.t1.workbench import cdp
from tiers.toolkit import rest
from tiers.toolkit.images import BUSYBOX, BuiltImage, layer, static_busybox, write_oci_layout

pytestmark = [
    pytest.mark.spec_exempt("the dashboard's /__mock__/ routes are mock-only"),
    pytest.mark.skipif(cdp.find_browser() is None, reason="chromium " + optional.why_absent("chromium")),
]

CREATE = {
    "image": {"uri": "local/python:3-slim"},
    "entrypoint": ["tail", "-f", "/dev/null"],
    "timeout": 900,
    "resourceLimits": {"cpu": "500m", "memory": "512Mi"},
    "metadata": {"team": "workbench"},
}


def call(hostport, method, path, body=None, headers=None):
    r = rest.call(hostport, method, path, body, headers)
    return r.status, r.body


def _browser_scratch_in_tmp() -> set:
    import glob
    import tempfile

    return set(glob.glob(os.path.join(tempfile.gettempdir(), "org.chromium.Chromium.*")))


def test_dashboard_in_headless_chromium(tmp_path):
    scratch_before = _browser_scratch_in_tmp()
    try:
        _dashboard_flow(tmp_path)
    finally:
        leaked = _browser_scratch_in_tmp() - scratch_before
    assert not leaked, f"chromium left scratch dirs in the system temp dir: {sorted(leaked)}"


def _dashboard_flow(tmp_path):
    with MockOpenSandbox(execd_close_delay=0.0) as osb:
        hp = osb.base_url.split("://", 1)[1]
        key = {"OPEN-SANDBOX-API-KEY": osb.api_key}
        with cdp.Browser(str(tmp_path / "profile")) as b:
            b.navigate(f"{osb.base_url}/__mock__/?key={osb.api_key}")
            b.wait_for("document.querySelector('#live.on') !== null")  # SSE connected
            assert b.eval("location.pathname + location.search") == "/__mock__/"  # the key left the URL
            assert b.eval("document.querySelector('#sandboxes .empty') !== null")
            # a sandbox created through the API appears
            st, body = call(hp, "POST", "/v1/sandboxes", CREATE, key)
            assert st == 202
            sid = json.loads(body)["id"]
            row = f"#sandbox-table tr[data-sandbox='{sid}']"
            b.wait_for(f'document.querySelector("{row}") !== null')
            assert b.eval(f'document.querySelector("{row} .badge").textContent') == "Running"
            assert b.eval(f'document.querySelector("{row}").textContent').count("local/python:3-slim") == 1
            # the journal shows it, with the status coloured
            b.wait_for(
                "[...document.querySelectorAll('#request-table td.path')].some(td => td.textContent === '/v1/sandboxes')"
            )
            assert b.eval("document.querySelector('#request-table .c2') !== null")
            # a fault rule added with the form applies to the mock
            b.eval("""(() => { const f = document.getElementById('fault-form');
                       f.kind.value = 'status'; f.status.value = '503'; f.path.value = '^/v1/sandboxes$';
                       f.method.value = 'GET'; f.id.value = 'from-the-form'; f.count.value = '1';
                       f.requestSubmit(); return true; })()""")
            b.wait_for("document.querySelector(\"#fault-table tr[data-rule='from-the-form']\") !== null")
            assert osb.faults.get("from-the-form") is not None
            assert call(hp, "GET", "/v1/sandboxes", headers=key)[0] == 503
            b.wait_for("document.querySelector('#request-table .c5') !== null")  # the 503 in red, with its fault
            assert b.eval("document.querySelector('#request-table .fault').textContent").strip() == "status"
            vol = {"name": "data", "pvc": {"claimName": "dash-vol"}, "mountPath": "/data", "readOnly": True}
            second = json.loads(call(hp, "POST", "/v1/sandboxes", dict(CREATE, volumes=[vol]), key)[1])["id"]
            b.wait_for("document.querySelectorAll('#sandbox-table tbody tr').length === 2")
            # its named volume: in the Volumes table with who mounts it, and in the sandbox's row
            b.wait_for("document.querySelector(\"#volume-table tr[data-volume='dash-vol']\") !== null")
            assert second[:8] in b.eval(
                "document.querySelector(\"#volume-table tr[data-volume='dash-vol']\").textContent"
            )
            assert "dash-vol → /data (ro)" in b.eval(
                f"document.querySelector(\"#sandbox-table tr[data-sandbox='{second}']\").textContent"
            )
            # a little traffic on an execd, a paused sandbox and a standing rule, for the screenshot
            ep = json.loads(call(hp, "GET", f"/v1/sandboxes/{sid}/endpoints/44772", headers=key)[1])["endpoint"]
            ex = ep.partition("/")[0]
            call(ex, "POST", "/proxy/44772/command", {"command": "echo hello; sleep 0.2"})
            call(ex, "GET", "/proxy/44772/files/info?path=/nope")
            osb.faults.add(kind="delay", delay=0.3, listener="execd", path="^/files/info$", id="slow-stat")
            call(ex, "GET", "/proxy/44772/files/info?path=/tmp")
            assert call(hp, "POST", f"/v1/sandboxes/{second}/pause", headers=key)[0] == 202
            b.wait_for(
                f"document.querySelector(\"#sandbox-table tr[data-sandbox='{second}'] .badge\").textContent"
                " === 'Paused'"
            )
            # a snapshot of the first (host-tools view: no image store, the panel says so)
            st, body = call(hp, "POST", f"/v1/sandboxes/{sid}/snapshots", {"name": "dash-snap"}, key)
            assert st == 202
            snap = json.loads(body)["id"]
            b.wait_for(
                f"document.querySelector(\"#snapshot-table tr[data-snapshot='{snap}'] .badge\")?.textContent"
                " === 'Ready'"
            )
            assert sid[:8] in b.eval(
                f"document.querySelector(\"#snapshot-table tr[data-snapshot='{snap}']\").textContent"
            )
            assert "--image-dir" in b.eval("document.querySelector('#images .empty').textContent")
            b.wait_for("document.querySelectorAll('#request-table tbody tr').length >= 8")
            png = b.screenshot()
            assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20000
            if os.environ.get("OSB_DASHBOARD_PNG"):
                with open(os.environ["OSB_DASHBOARD_PNG"], "wb") as f:
                    f.write(png)
            # the kill button deletes the sandbox in the mock
            b.eval(f'document.querySelector("{row} button.kill").click()')
            b.wait_for(f'document.querySelector("{row}") === null')
            assert sid not in osb.sandboxes and second in osb.sandboxes


def _image_sandboxes() -> bool:
    """A static busybox to build the image with, and a PID namespace per sandbox (else: host-tools view)."""
    from mock_opensandbox.runtime.probe import probe_result

    ok, _, _, pid_mode = probe_result()
    return static_busybox() and ok and pid_mode is not None


@pytest.mark.skipif(not _image_sandboxes(), reason="no static /bin/busybox or no PID namespace per sandbox")
def test_dashboard_images_panel(tmp_path):
    with open(BUSYBOX, "rb") as f:
        entries = [("dir", "bin"), ("file", "bin/busybox", f.read(), 0o755), ("dir", "tmp", 0o1777)]
    entries += [("hardlink", "bin/" + a, "bin/busybox") for a in ("sh", "tail", "echo")]
    img = BuiltImage([layer(entries)], config_extra={"config": {}})
    write_oci_layout(str(tmp_path / "dir" / "dash"), {"local/dash-busybox:1": img})
    with (
        MockOpenSandbox(
            image_dir=str(tmp_path / "dir"), image_cache=str(tmp_path / "cache"), execd_close_delay=0.0
        ) as osb,
        cdp.Browser(str(tmp_path / "profile")) as b,
    ):
        hp = osb.base_url.split("://", 1)[1]
        key = {"OPEN-SANDBOX-API-KEY": osb.api_key}
        b.navigate(f"{osb.base_url}/__mock__/?key={osb.api_key}")
        b.wait_for("document.querySelector('#live.on') !== null")
        assert "No cached images yet" in b.eval("document.querySelector('#images .empty').textContent")
        st, body = call(hp, "POST", "/v1/sandboxes", dict(CREATE, image={"uri": "local/dash-busybox:1"}), key)
        assert st == 202, body
        sid = json.loads(body)["id"]
        (cached,) = json.loads(call(hp, "GET", "/__mock__/images", headers=key)[1])["images"]
        row = f"#image-table tr[data-image='{cached['id']}']"
        b.wait_for(f"document.querySelector(\"{row}\")?.textContent.includes('{sid[:8]}')")
        cells = b.eval(f'[...document.querySelectorAll("{row} td")].map(td => td.textContent)')
        assert cells[0] == "local/dash-busybox:1" and cells[2] == img.digest[:19] and cells[3] == "image-dir"
        assert cells[1].endswith("MiB") and float(cells[1].split()[0]) > 0.5  # busybox itself: over 1 MiB
        assert b.eval("document.getElementById('img-count').textContent") == "1"
        # a snapshot of it, restored into a second sandbox: the snapshot's row names that sandbox
        snap = json.loads(call(hp, "POST", f"/v1/sandboxes/{sid}/snapshots", None, key)[1])["id"]
        osb.snapshots.wait(30)
        body = {"snapshotId": snap, "timeout": 600, "resourceLimits": CREATE["resourceLimits"]}
        st, out = call(hp, "POST", "/v1/sandboxes", body, key)
        assert st == 202, out
        restored = json.loads(out)["id"]
        srow = f"#snapshot-table tr[data-snapshot='{snap}']"
        b.wait_for(f"document.querySelector(\"{srow}\")?.textContent.includes('{restored[:8]}')")
        assert "opensandbox-snapshots:" + snap in b.eval(f'document.querySelector("{srow}").textContent')
        assert b.eval("document.getElementById('snap-count').textContent") == "1"
        # the kill button: the image no longer lists the sandbox
        b.eval(f"document.querySelector(\"#sandbox-table tr[data-sandbox='{sid}'] button.kill\").click()")
        b.wait_for(f"!document.querySelector(\"{row}\").textContent.includes('{sid[:8]}')")
