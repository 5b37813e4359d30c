"""The wire: HTTP/1.1 serving (http1), Go-compatible JSON (gojson), SSE, multipart form data, WebSocket
frames, request framing, relays and poll-based waits. Imports nothing else of the mock."""
