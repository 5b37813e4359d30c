"""A faithful, offline OpenSandbox server (lifecycle + execd) for tests. Standard library only."""
