"""The SDK: `SandboxClient` / `AsyncSandboxClient` over an in-process service or the REST API."""
