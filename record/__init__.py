"""Fixture tooling: record scenarios from a live OpenSandbox, convert raw recordings, replay fixtures.

    python -m record convert --from ../shared/live/exchanges --out fixtures
    python -m record --base-url http://127.0.0.1:8080 --api-key KEY [--mode all|new] [--check]
    python -m record replay --base-url URL --api-key KEY [--fixtures fixtures] [--scenario NAME]

Test-only tooling: uses httpx (a pinned test dependency); never imported by plugin/ or the mock.
"""
