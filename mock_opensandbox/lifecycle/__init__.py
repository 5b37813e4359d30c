"""The lifecycle API of the mock server (OpenSandbox server 1.1.1): request models and validation, the
recorded quirks, the routes (snapshot routes included) and the server's reverse proxy."""
