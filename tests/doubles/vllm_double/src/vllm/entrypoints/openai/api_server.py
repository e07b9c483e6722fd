"""Entry point of the vLLM test double (filled in by the simulator module)."""
from __future__ import annotations

from vllm._double.server import main

if __name__ == "__main__":
    raise SystemExit(main())
