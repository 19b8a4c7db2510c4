"""The trainer service: a FastAPI app whose routers are thin and whose logic lives in
`services/`. It owns all state and never imports torch."""
