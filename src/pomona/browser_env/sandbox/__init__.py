"""Programs that run inside a browser's sandbox (uploaded there, never imported here)."""
