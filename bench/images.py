"""python -m bench.images [--mb 30] [--repeat 3]: the image store's costs (QUIRKS.md, Image store), on a test image this
script builds (busybox-static + a slice of the host's Python standard library, as an OCI layout, a docker-save
tarball, and, when Debian's docker-registry is installed, pushed to a local registry).

Measures: the first resolve (read + digest checks + unpack), the flattened rootfs (once per image), a cache
hit in the same store, a cache hit in a new store on the same cache (a mock restarted), and the registry pull.
Then create -> ready (``POST /v1/sandboxes`` until the sandbox's execd answers ``GET /ping``, bench/
sandbox_costs.py's Server) of a sandbox in the busybox image from the cache (a mock with ``image_dir``) next to
today's create in the host-tools view (a mock without one), both mocks of this tree in their own processes,
interleaved A B A B; the ratio of the medians against the target of at most 1.5x.
Prints a Markdown table; a measurement, not a test."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from mock_opensandbox.images import ImageStore
from tiers.toolkit.images import BuiltImage, layer, push, write_docker_save, write_oci_layout


def host_slice(limit: int) -> list[tuple]:
    """Entries of /usr/lib/python3.X up to limit bytes (a real tree: many small files, dirs, a few links)."""
    src = os.path.dirname(os.__file__)
    entries: list[tuple] = [("dir", "usr"), ("dir", "usr/lib")]
    total = 0
    for dp, dn, fn in os.walk(src):
        dn[:] = sorted(d for d in dn if d not in ("__pycache__", "test", "site-packages", "dist-packages"))
        rel = "usr/lib/" + os.path.relpath(dp, os.path.dirname(src))
        entries.append(("dir", rel))
        for n in sorted(fn):
            p = os.path.join(dp, n)
            if os.path.islink(p) or not os.path.isfile(p):
                continue
            data = open(p, "rb").read()
            if len(data) > (1 << 20):
                continue  # many small files, like an image's /usr
            if total + len(data) > limit:
                return entries
            entries.append(("file", rel + "/" + n, data, 0o644))
            total += len(data)
    return entries


def busybox_layer() -> list[tuple]:
    bb = shutil.which("busybox") or "/bin/busybox"
    data = open(bb, "rb").read()
    out: list[tuple] = [
        ("dir", "bin"),
        ("file", "bin/busybox", data, 0o755),
        ("dir", "etc"),
        ("file", "etc/os-release", 'PRETTY_NAME="bench"\n'),
        ("dir", "tmp", 0o1777),
    ]
    for applet in ("sh", "ls", "cat", "echo", "ps", "id", "tail"):
        out.append(("hardlink", "bin/" + applet, "bin/busybox"))
    return out


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1000


def create_ready(images: str, cache: str, n: int, warm: int) -> list[tuple[str, str]]:
    """Create -> execd /ping of a sandbox in ``local/bench-bb:1`` (images/bench-bb, from the cache after the
    first create) vs one in the host-tools view, interleaved; medians and their ratio."""
    from bench.sandbox_costs import Server, _call

    tree = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sides = [
        Server("host-tools view", tree),
        Server(
            "image (cached)", tree, mock_kwargs={"image_dir": images, "image_cache": cache}, image="local/bench-bb:1"
        ),
    ]
    times: dict[str, list[float]] = {s.label: [] for s in sides}
    first, views = None, {}
    try:
        for i in range(warm + n):
            for s in sides:
                t0 = time.perf_counter()
                sid = s.create()
                s.wait_ready(sid)
                dt = (time.perf_counter() - t0) * 1000
                if i == 0:  # which view it got (the mock's own sandbox document), and the first create's pull
                    st, data = _call(s.base_url, "GET", "/__mock__/sandboxes/" + sid, s.headers)
                    v = json.loads(data).get("view") or {} if st == 200 else {}
                    views[s.label] = "%s%s" % (v.get("kind", "?"), (", " + v["rootfs"]) if v.get("rootfs") else "")
                    if s.image:
                        first = dt
                s.delete(sid)
                if i >= warm:
                    times[s.label].append(dt)
    finally:
        for s in sides:
            s.stop()
    if views.get("image (cached)", "").split(",")[0] != "image":
        raise SystemExit(
            "the image mock gave its sandbox the view %r, not the image: no image sandboxes here"
            % views.get("image (cached)")
        )
    med = {k: statistics.median(v) for k, v in times.items()}
    a, b = med["host-tools view"], med["image (cached)"]
    return [
        ("create -> ready, first create in the image (pull + unpack + flatten + start)", "%.0f ms" % first),
        (
            "create -> ready, host-tools view, median (today's create; view: %s)" % views["host-tools view"],
            "%.0f ms" % a,
        ),
        ("create -> ready, busybox image from the cache, median (view: %s)" % views["image (cached)"], "%.0f ms" % b),
        (
            "ratio image / host-tools view (target <= 1.5x), %d interleaved pairs" % n,
            "%.2fx %s" % (b / a, "ok" if b / a <= 1.5 else "OVER"),
        ),
        ("load average (1 min) after the run", "%.1f on %d cores" % (os.getloadavg()[0], os.cpu_count() or 0)),
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=30)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--creates", type=int, default=15, help="create -> ready pairs (0: skip that part)")
    ap.add_argument("--warmup", type=int, default=2, help="create pairs not counted (the first one pulls)")
    args = ap.parse_args(argv)
    work = tempfile.mkdtemp(prefix="bench-images-")
    rows: list[tuple[str, str]] = []
    try:
        base = layer(busybox_layer())
        big = layer(host_slice(args.mb << 20))
        img = BuiltImage([base, big])
        size = sum(len(t) for _, t in img.layers)
        blob = sum(len(b) for b, _ in img.layers)
        images = os.path.join(work, "images")
        write_oci_layout(os.path.join(images, "bench"), {"local/bench:1": img})
        write_docker_save(os.path.join(images, "bench-save.tar"), "local/bench-save:1", img)
        files = sum(1 for e in busybox_layer() + host_slice(args.mb << 20) if e[0] == "file")
        rows.append(
            ("image", "%.1f MB uncompressed (%.1f MB gzip), 2 layers, %d files" % (size / 1e6, blob / 1e6, files))
        )
        for ref, label in (("local/bench:1", "OCI layout (gzip)"), ("local/bench-save:1", "docker-save tar")):
            first, flat, hit, restart = [], [], [], []
            for i in range(args.repeat):
                cache = os.path.join(work, "cache-%s-%d" % (label[:3], i))
                s = ImageStore(cache, images, local_daemon=False, registry=False)
                t = time.perf_counter()
                got = s.resolve(ref)
                first.append((time.perf_counter() - t) * 1000)
                flat.append(timed(got.rootfs))
                hit.append(timed(lambda s=s, ref=ref: s.resolve(ref).rootfs()))
                s2 = ImageStore(cache, images, local_daemon=False, registry=False)
                restart.append(timed(lambda s2=s2, ref=ref: s2.resolve(ref).rootfs()))
                shutil.rmtree(cache)
            rows.append(("%s: first resolve + unpack" % label, "%.0f ms" % statistics.median(first)))
            rows.append(("%s: flatten to one rootfs (first time)" % label, "%.0f ms" % statistics.median(flat)))
            rows.append(("%s: cache hit (same store)" % label, "%.2f ms" % statistics.median(hit)))
            rows.append(("%s: cache hit (new store, same cache)" % label, "%.2f ms" % statistics.median(restart)))
        from tiers.toolkit import registry as reg

        if reg.BINARY:
            r = reg.Registry("token", {"u": "p"})
            try:
                push(r.base, "bench/img", "1", img, authz=r.push_authz("u", "bench/img"))
                pulls = []
                for i in range(args.repeat):
                    s = ImageStore(os.path.join(work, "rcache-%d" % i), local_daemon=False)
                    pulls.append(
                        timed(lambda s=s: s.resolve(r.host + "/bench/img:1", auth={"username": "u", "password": "p"}))
                    )
                rows.append(
                    ("registry (127.0.0.1, token auth): first pull + unpack", "%.0f ms" % statistics.median(pulls))
                )
            finally:
                r.close()
        if args.creates > 0:
            write_oci_layout(os.path.join(images, "bench-bb"), {"local/bench-bb:1": BuiltImage([base])})
            rows += create_ready(images, os.path.join(work, "ccache"), args.creates, max(1, args.warmup))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("| case | median of %d |\n|---|---|" % args.repeat)
    for k, v in rows:
        print("| %s | %s |" % (k, v))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
