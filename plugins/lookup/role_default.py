# Copyright: gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""role_default: the default of another role's variable, read from that role's defaults/main.yml."""
from __future__ import annotations

DOCUMENTATION = r"""
name: role_default
author: gpuhost.inference contributors (@gpuhost)
version_added: 1.1.0
short_description: The default of one of this collection's role variables, from its owner role
description:
  - Each path, unit name and port has one owner role; its value is written once, in that role's
    C(defaults/main.yml). Other roles and playbooks that need it when the owner role has not run in
    the same play read it with this lookup instead of restating the literal.
  - The owner role is the collection role whose name prefixes the variable (C(vllm_service_env_file)
    belongs to C(vllm_service)). A default that is itself a template is rendered with the current
    variables, so chains (C(vllm_service_state_dir) from C(vllm_install_state_dir)) resolve too.
options:
  _terms:
    description: Variable names, each prefixed by the name of one of this collection's roles.
    type: list
    elements: str
    required: true
"""

EXAMPLES = r"""
- name: The env file of the vLLM unit, whether or not vllm_service ran in this play
  ansible.builtin.debug:
    msg: "{{ vllm_service_env_file | default(lookup('gpuhost.inference.role_default', 'vllm_service_env_file')) }}"
"""

RETURN = r"""
_raw:
  description: The default of each variable, in the order given.
  type: list
  elements: raw
"""

import os

import yaml

from ansible.errors import AnsibleLookupError
from ansible.module_utils.common.text.converters import to_native
from ansible.plugins.lookup import LookupBase

from ansible_collections.gpuhost.inference.plugins.module_utils.gpuhost_values import read_role_yaml

try:
    from ansible.template import trust_as_template
except ImportError:  # ansible-core < 2.19: every string is a template already
    def trust_as_template(value):
        return value

ROLES_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "roles")


def owner_role(name, roles):
    """The role that owns variable `name`: the longest role name that prefixes it with '_'."""
    owners = [role for role in roles if name.startswith(role + "_")]
    if not owners:
        raise AnsibleLookupError(
            f"role_default: {name!r} is not a variable of a gpuhost.inference role (one of {', '.join(sorted(roles))})")
    return max(owners, key=len)


def read_defaults(name, roles_dir=ROLES_DIR):
    """All raw defaults of `name`'s owner role (a string may be a template), and the role."""
    roles = [entry for entry in os.listdir(roles_dir) if os.path.isdir(os.path.join(roles_dir, entry))]
    role = owner_role(name, roles)
    path = os.path.join(roles_dir, role, "defaults", "main.yml")
    try:
        defaults = read_role_yaml(path)
    except (OSError, yaml.YAMLError) as exc:
        raise AnsibleLookupError(f"role_default: cannot read {role}'s defaults: {to_native(exc)}") from exc
    if name not in defaults:
        raise AnsibleLookupError(f"role_default: {role} has no default for {name!r}")
    return defaults


def _trusted(value):
    return trust_as_template(value) if isinstance(value, str) and "{{" in value else value


class LookupModule(LookupBase):

    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        values = []
        for term in terms:
            defaults = read_defaults(str(term))
            value = defaults[str(term)]
            if isinstance(value, str) and "{{" in value:
                # The owner's other defaults sit under the play's variables, as when the role runs.
                context = {key: _trusted(default) for key, default in defaults.items()}
                context.update(variables or {})
                value = self._templar.copy_with_new_env(available_variables=context).template(_trusted(value))
            values.append(value)
        return values
