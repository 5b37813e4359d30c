"""The server's Docker service as the mock emulates it: volumes, snapshots, diagnostics, the image
references of a create, and the egress sidecar."""
