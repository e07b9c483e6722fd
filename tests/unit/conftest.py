"""The unit tests render role files with Ansible's own templar: it finds the collection's filters (such as
gpuhost.inference.typed, the one typing path of the role variables) through Ansible's collection loader,
installed here once, before any test module is collected.

ansible-test runs the module tests with only ansible.module_utils importable: there is no templar to serve
then, and nothing is installed."""
from __future__ import annotations

import os

try:
    from ansible.plugins.loader import init_plugin_loader
except ImportError:  # ansible-test's module unit tests: ansible.plugins is not there (nor needed)
    init_plugin_loader = None

if init_plugin_loader is not None:
    # tests/unit -> the collection root -> ansible_collections/gpuhost/inference -> the collections path.
    init_plugin_loader([os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..", ".."))])
