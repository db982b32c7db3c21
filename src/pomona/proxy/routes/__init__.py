"""The proxy's routes, one router per domain; app.py mounts them and says who may reach which.

- `model_calls`: what harness SDKs call (the three dialects, token counts, the model list), on the
  proxy's own URL and again under `/e/{key}`, where the episode key is the credential;
- `episodes`: opening, reading and closing episodes;
- `policy`: the held calls of a "policy" episode, for a policy driving it over HTTP;
- `probes`: the open root and health routes.
"""
