"""python -m differential --execd-bin PATH [--case GLOB] [--verbose]"""

from __future__ import annotations

import argparse
import fnmatch
import sys

from differential.corpus import CASES
from differential.runner import report, run_corpus
from differential.targets import IsolationUnavailable


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m differential",
        description="Compare the mock's execd with a real execd binary, route by route. "
        "The binary runs only inside an isolated throw-away sandbox view.",
    )
    ap.add_argument("--execd-bin", required=True, help="path of the real execd binary")
    ap.add_argument("--case", action="append", default=[], help="only cases matching this glob (repeatable)")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    ap.add_argument("--dump", metavar="DIR", help="write every case's normalised observations (real and mock) as JSON")
    ap.add_argument(
        "--write-doc",
        metavar="PATH",
        help="also write the report into this markdown file (the project keeps it in docs/DIFFERENTIAL.md)",
    )
    ap.add_argument("-v", "--verbose", action="store_true", help="one line per case while running")
    args = ap.parse_args(argv)
    cases = [c for c in CASES if not args.case or any(fnmatch.fnmatchcase(c.name, g) for g in args.case)]
    if args.list:
        for c in cases:
            print(f"{c.name}\t{', '.join(c.routes)}")
        return 0

    def progress(res) -> None:
        if args.verbose:
            st = "ERROR" if res.error else ("DIFF" if res.unexplained else "ok")
            print(f"{st:5} {res.case.name} ({res.elapsed:.1f} s)", file=sys.stderr, flush=True)

    try:
        results = run_corpus(args.execd_bin, cases, progress=progress)
    except FileNotFoundError as exc:
        print(f"no execd binary at {exc}", file=sys.stderr)
        return 2
    except IsolationUnavailable as exc:
        print(
            f"the real execd runs only inside an isolated sandbox view, and this host cannot make one: {exc}",
            file=sys.stderr,
        )
        return 2
    if args.dump:
        import json
        import os

        os.makedirs(args.dump, exist_ok=True)
        for r in results:
            with open(os.path.join(args.dump, r.case.name + ".json"), "w", encoding="utf-8") as fh:
                json.dump({"real": r.real_obs, "mock": r.mock_obs, "error": r.error}, fh, indent=1, ensure_ascii=False)
    text = report(results, binary=args.execd_bin)
    print(text, end="")
    if args.write_doc:
        from differential.runner import write_doc

        write_doc(args.write_doc, text)
    return 1 if any(r.unexplained or r.error for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
