"""The bad-input matrix: each case fails in the site playbook's preflight with a message naming
the variable and the allowed values, and afterwards nothing on the host has changed.

All cases run in ONE ansible-playbook run: each inventory host points at the same lab box (lab-faults),
with the bad values of its cases in its host vars: a case of its own, or the cases that the same assert of play 1
refuses (SHARED_HOSTS), each case's strings looked for in its host's message.
"""
from __future__ import annotations

import json
import re

import pytest
import yaml

from faults_lib import BOX, REPO, host_snapshot, run_playbook

# The default scenario's verifier runs these beside tests/integration/ (other boxes): only the faults box.
testinfra_hosts = [BOX]

# (case id, host vars, strings the failure message must contain: the variable and the allowed values)
CASES = [
    ("limit_above_max", {"nvidia_power_limit_w": 400}, ["nvidia_power_limit_w", "100-350"]),
    ("limit_below_min", {"nvidia_power_limit_w": 50}, ["nvidia_power_limit_w", "100-350"]),
    ("limit_not_a_number", {"nvidia_power_limit_w": "lots"}, ["nvidia_power_limit_w", "int"]),
    ("gpu_limit_above_max", {"nvidia_power_gpu_limits_w": {1: 351}}, ["nvidia_power_gpu_limits_w[1]", "100-350"]),
    ("gpu_index_absent", {"nvidia_power_gpu_limits_w": {5: 250}}, ["nvidia_power_gpu_limits_w[5]", "0, 1"]),
    ("gpus_index_absent", {"nvidia_power_gpus": [3]}, ["nvidia_power_gpus", "0, 1"]),
    ("persistence_bad", {"nvidia_power_persistence_mode": "yes"}, ["nvidia_power_persistence_mode", "on, off, leave"]),
    ("unknown_profile", {"vllm_service_profile": "turbo"}, ["vllm_service_profile", "turbo", "single_gpu"]),
    ("unknown_vllm_key", {"vllm_service_settings": {"max_num_seq": 8}}, ["max_num_seq", "max_num_seqs"]),
    ("max_num_seqs_zero", {"vllm_service_settings": {"max_num_seqs": 0}}, ["max_num_seqs", "> 0"]),
    ("gpu_mem_util_1_5", {"vllm_service_settings": {"gpu_memory_utilization": 1.5}}, ["gpu_memory_utilization", "(0, 1]"]),
    ("spec_config_string", {"vllm_service_settings": {"speculative_config": "mtp"}}, ["speculative_config", "mapping"]),
    ("tp_larger_than_gpus", {"vllm_service_tensor_parallel_size": 4}, ["tensor_parallel_size", "2"]),
    ("port_out_of_range", {"vllm_service_port": 70000}, ["vllm_service_port", "65535"]),
    ("empty_model", {"vllm_service_model": ""}, ["vllm_service_model"]),
    ("unsupported_variant", {"vllm_install_variant": "rocm"}, ["vllm_install_variant", "cuda, cpu"]),
    ("bad_version_pin", {"vllm_install_version": "latest"}, ["vllm_install_version"]),
    ("bad_installer", {"vllm_install_installer": "conda"}, ["vllm_install_installer", "uv, pip"]),
    ("api_key_file_missing", {"vllm_service_api_key_file": "/nonexistent/vllm-api-key"}, ["vllm_service_api_key_file"]),
    ("verify_concurrency_zero", {"vllm_verify_concurrency": [0, 2]}, ["vllm_verify_concurrency"]),
    # The monitoring on the box (role node_metrics): the collector's interval, a flag written into node exporter's ARGS.
    ("metrics_interval_too_short", {"node_metrics_interval": 2}, ["node_metrics_interval", "5-300"]),
    # A watchdog threshold of 0 (a verdict at the first failed forced tool call canary): its least value is named.
    ("watchdog_tool_canary_failures_zero", {"vllm_service_watchdog_tool_canary_failures": 0},
     ["vllm_service_watchdog_tool_canary_failures", ">= 1"]),
    ("metrics_extra_arg_bad", {"node_metrics_extra_args": ["--web.config.file=/tmp/x y"]},
     ["node_metrics_extra_args", "--flag or --flag=value"]),
    # Values written into unit files and the launcher (the unit_value_errors filter; its unit tests,
    # tests/unit/plugins/filter/test_gpuhost_checks.py, check that these messages hold these strings).
    ("path_percent_specifier", {"vllm_service_venv": "/opt/vllm/%i/venv"},
     ["vllm_service_venv", "absolute path", "% specifiers", "/opt/vllm/%i/venv"]),
    ("path_quote", {"vllm_service_state_dir": '/var/lib/vllm" ExecStartPre=/bin/sh'},
     ["vllm_service_state_dir", "absolute path", "quotes"]),
    ("download_dir_space", {"vllm_service_download_dir": "/srv/my models"},
     ["vllm_service_download_dir", "absolute path", "/srv/my models"]),
    ("nvidia_smi_path_bad", {"nvidia_power_nvidia_smi_path": "/usr/bin/nvidia-smi;id"},
     ["nvidia_power_nvidia_smi_path", "absolute path", "/usr/bin/nvidia-smi;id"]),
    # nvidia_power_before_units defaults to vllm_service_unit_name: set it, so that this case
    # reaches vllm_service's preflight (nvidia_power's runs first and would refuse the same value).
    ("unit_name_bad", {"vllm_service_unit_name": "vllm%i.service", "nvidia_power_before_units": ["vllm.service"]},
     ["vllm_service_unit_name", "systemd unit name", "ending in .service", "vllm%i.service"]),
    ("power_unit_name_bad", {"nvidia_power_unit_name": "gpu power.service"},
     ["nvidia_power_unit_name", "systemd unit name", "ending in .service", "gpu power.service"]),
    ("before_unit_bad", {"nvidia_power_before_units": ["vllm.service", "sshd.service\nExecStartPre=/bin/sh"]},
     ["nvidia_power_before_units[1]", "systemd unit name"]),
    ("user_name_bad", {"vllm_service_user": "Vllm;root"},
     ["vllm_service_user", "user or group name as useradd takes it", "Vllm;root"]),
    ("unit_extra_setting_cr", {"vllm_service_unit_extra_settings": {"Nice": "5\rUser=root"}},
     ["vllm_service_unit_extra_settings", "Nice", "single-line value"]),
    ("description_line_separator",
     {"vllm_service_extra_profiles": {"evil": {"description": "lab\u2028api-key: x", "settings": {}}}},
     ["profile 'evil'", "description", "vllm_service_extra_profiles", "single line", "U+2028"]),
    # What operators type (issue 21): each class refused in play 1 (the filters' unit tests tie these messages).
    ("type_not_an_int", {"vllm_service_port": "80x"}, ["vllm_service_port", "int", "80x"]),
    ("gpus_scalar_absent", {"nvidia_power_gpus": "10"}, ["nvidia_power_gpus", "GPU 10", "0, 1"]),
    ("secret_in_environment", {"vllm_service_environment": {"HF_TOKEN": "hf_x"}},
     ["HF_TOKEN", "vllm_service_hf_token", "root-only secrets file"]),
    ("secret_in_profile_settings", {"vllm_service_extra_profiles": {"lab": {"settings": {"hf-token": "hf_x"}}}},
     ["profile 'lab'", "hf-token", "vllm_service_hf_token"]),
    ("open_api_no_key", {"vllm_service_host": "0.0.0.0", "vllm_service_api_key": ""},
     ["vllm_service_host", "no API key", "vllm_service_allow_open_api"]),
    # Issue 33.5 (role front_door, a run-stopping preflight: its only case here, as one refusal stops the others): vLLM
    # beyond loopback with its key but no router in front and no front door.
    ("bind_without_front_door", {"vllm_service_host": "0.0.0.0"},
     ["vllm_service_host=0.0.0.0 listens beyond loopback without the front door", "/add_worker", "front_door_trusted_network"]),
    ("service_user_root", {"vllm_service_user": "root"}, ["vllm_service_user must not be root"]),
    ("port_privileged", {"vllm_service_port": 80}, ["port 80 is below 1024", "CAP_NET_BIND_SERVICE"]),
    ("unit_template", {"vllm_service_unit_name": "vllm@.service", "nvidia_power_before_units": ["vllm.service"]},
     ["vllm_service_unit_name", "is a template"]),
    ("power_unit_like_model_unit", {"nvidia_power_unit_name": "vllm.service"},
     ["nvidia_power_unit_name must differ", "vllm_service_unit_name"]),
    ("model_line_break", {"vllm_service_served_model_name": "lab\nx"}, ["vllm_service_served_model_name", "single line"]),
    # Every string of every role is a single line (filter line_errors over the variables each preflight takes by
    # prefix, issue 30): a CR in a profile's setting, an LF ending a unit name (both passed play 1 before).
    ("profile_setting_cr", {"vllm_service_extra_profiles": {"lab": {"description": "CR in a setting.",
                                                                    "settings": {"served_model_name": "x\ry"}}}},
     ["vllm_service_extra_profiles.lab.settings.served_model_name", "single line", "CR"]),
    ("verify_unit_name_lf", {"vllm_verify_unit_name": "vllm.service\n"}, ["vllm_verify_unit_name", "single line", "LF"]),
    ("verify_base_url_ipv6_unbracketed", {"vllm_verify_base_url": "http://::1:8000"}, ["vllm_verify_base_url", "brackets"]),
    ("verify_concurrency_absurd", {"vllm_verify_concurrency": [100000]}, ["vllm_verify_concurrency", "1-1024"]),
    # The CUDA build on a box whose driver or cards cannot run it (issue 22): the mocked nvidia-smi of these
    # cases reports driver 570 (CUDA 12.8) or compute capability 6.1 (see MOCKED_CARDS).
    ("cuda_driver_570", {"vllm_install_variant": "cuda", "nvidia_power_nvidia_smi_path": "/usr/local/bin/nvidia-smi-driver570"},
     ["vllm_install_variant=cuda", "driver >= 580", "570.172.08", "CUDA 13.0", "vllm_install_version"]),
    ("cuda_compute_cap_6_1", {"vllm_install_variant": "cuda", "nvidia_power_nvidia_smi_path": "/usr/local/bin/nvidia-smi-cc61"},
     ["vllm_install_variant=cuda", "compute capability >= 7.5", "6.1"]),
    # Issue 42, one case per class and role it applies to, all refused in play 1 (the host invariants of site.yml's
    # play 1, playbooks/tasks/site_invariants.yml, then the typing and each role's preflight).
    # 42.1 owned paths: never a system directory or file (FHS 3.0, file-hierarchy(7)), nor a package's (dpkg-query -S).
    ("owned_door_config_dir_etc", {"front_door_enabled": True, "front_door_config_dir": "/etc"},
     ["front_door_config_dir=/etc", "is a system directory", "file-hierarchy(7)"]),
    ("owned_power_state_dir_var_lib", {"nvidia_power_state_dir": "/var/lib"}, ["nvidia_power_state_dir=/var/lib", "system directory"]),
    ("owned_install_base_dir_usr", {"vllm_install_base_dir": "/usr"}, ["vllm_install_base_dir=/usr", "system directory"]),
    ("owned_service_env_file_passwd", {"vllm_service_env_file": "/etc/passwd"}, ["vllm_service_env_file=/etc/passwd", "system file"]),
    ("owned_service_config_dir_of_a_package", {"vllm_service_config_dir": "/etc/dpkg"},
     ["vllm_service_config_dir=/etc/dpkg", "dpkg own", "read on the target"]),
    ("owned_verify_state_dir_root", {"vllm_verify_state_dir": "/root"}, ["vllm_verify_state_dir=/root", "system directory"]),
    ("owned_metrics_textfile_dir_var_log", {"node_metrics_textfile_dir": "/var/log"},
     ["node_metrics_textfile_dir=/var/log", "system directory"]),
    # fleet_prometheus' Grafana directory (it wrote /etc/dashboards and /etc/gpuhost-*.yml before it was an owned path).
    ("owned_grafana_dir_etc", {"fleet_prometheus_grafana_dir": "/etc", "fleet_prometheus_gpu_group": "scrapes_no_box",
                               "fleet_prometheus_router_group": "scrapes_no_router"},
     ["fleet_prometheus_grafana_dir=/etc", "system directory"]),
    # 42.2 one table of listeners: two of ours on one port, a port a foreign process holds (FOREIGN_PORT, a fixture).
    ("listen_door_on_vllms_port", {"front_door_enabled": True, "front_door_port": 8000},
     ["front_door_port=8000", "vllm_service_port=8000", "two of the collection's listeners on port 8000"]),
    ("listen_node_exporter_on_vllms_port", {"node_metrics_port": 8000},
     ["node_metrics_port=8000", "vllm_service_port=8000", "two of the collection's listeners"]),
    ("listen_vllm_on_node_exporters_port", {"vllm_service_port": 9100},
     ["vllm_service_port=9100", "node_metrics_port=9100", "two of the collection's listeners"]),
    ("listen_port_of_a_foreign_process", {"node_metrics_port": 18123},
     ["node_metrics_port=18123", "already taken on this host by python3", "gpuhost-foreign-listener.service"]),
    # 42.3 secrets never shown, whatever the type (the value must be absent from the whole run's output).
    ("secret_api_key_as_a_mapping", {"vllm_service_api_key": {"k": "4306a1b2c3d4e5f6a7b8c9d0e1f2-vllm"}},
     ["vllm_service_api_key must be a str", "a mapping of 1 entries (a secret: not shown)"]),
    ("secret_hf_token_as_a_list", {"vllm_service_hf_token": ["hf_4306a1b2c3d4e5f6a7b8c9d0e1f2"]},
     ["vllm_service_hf_token must be a str", "a list of 1 items (a secret: not shown)"]),
    # the right type, a character that would break the env file or the header: the one secret rule names the variable
    ("secret_api_key_with_a_space", {"vllm_service_api_key": "4306a1b2c3d4 e5f6a7b8c9d0e1f2-key"},
     ["the API key (vllm_service_api_key) must be printable ASCII without spaces, quotes or backslashes"]),
    # vLLM takes a '$'; the front door on the same host cannot send it (an nginx variable): refused before vLLM gets it
    ("secret_api_key_with_a_dollar_behind_the_door",
     {"front_door_enabled": True, "front_door_api_keys": {"alice": "door-key-e-0123456789abcdef0123456789abcdef"},
      "vllm_service_api_key": "4306a1b2c3d4$e5f6a7b8c9d0e1f2-door"},
     ["the API key (vllm_service_api_key) (the front door on this host sends it in a quoted nginx string) must be "
      "printable ASCII without spaces, quotes, backslashes or '$'"]),
    # 42.4 a dict given as a string (what `-e name={...}` gives) is refused like any bad type, before any task.
    ("coerce_settings_as_a_string", {"vllm_service_settings": '{"max_num_seqs": 4}'},
     ["vllm_service_settings must be a dict", "-e vllm_service_settings=... gives a string"]),
    ("coerce_gpu_limits_as_a_string", {"nvidia_power_gpu_limits_w": "0=250"}, ["nvidia_power_gpu_limits_w must be a dict"]),
    # 42.5 config inputs checked as their programs check them (the door's: one task of its run-stopping preflight,
    # with bind_without_front_door, so that every refusal there is reported).
    ("door_revocation_of_no_client", {"front_door_enabled": True, "front_door_api_keys": {"alice": "door-key-a-0123456789abcdef0123456789abcdef"},
                                      "front_door_revoked_clients": ["mallory"]},
     ['front_door_revoked_clients: "mallory" is not a client (the clients are alice)']),
    ("door_env_name_with_spaces", {"front_door_enabled": True, "front_door_api_keys": {"alice": "door-key-a-0123456789abcdef0123456789abcdef"},
                                   "front_door_agent_api_key_env": "VLLM API KEY"},
     ["front_door_agent_api_key_env must be an environment variable name", '"VLLM API KEY"']),
    ("door_lab_cert_days_zero", {"front_door_enabled": True, "front_door_api_keys": {"alice": "door-key-a-0123456789abcdef0123456789abcdef"},
                                 "front_door_lab_cert_days": 0}, ["front_door_lab_cert_days must be 1-825"]),
    ("door_tls_files_without_pem", {"front_door_enabled": True, "front_door_api_keys": {"alice": "door-key-a-0123456789abcdef0123456789abcdef"},
                                    "front_door_tls_cert_file": "/etc/hostname", "front_door_tls_key_file": "/etc/hostname"},
     ["front_door_tls_cert_file=/etc/hostname is not a PEM certificate", "is not a PEM private key"]),
    # The lab CA's directory is made mode 0700 on the controller: /etc there would have been chmodded.
    ("door_lab_ca_dir_etc", {"front_door_enabled": True, "front_door_api_keys": {"alice": "door-key-a-0123456789abcdef0123456789abcdef"},
                             "front_door_lab_ca_dir": "/etc"},
     ["front_door_lab_ca_dir=/etc (on the controller): /etc is a system directory"]),
    # 42.6 no bypass: listen addresses only through the host variables; node exporter beyond loopback needs its opt-in.
    ("bypass_node_exporter_listen_arg", {"node_metrics_extra_args": ["--web.listen-address=0.0.0.0:9100"]},
     ["node_metrics_extra_args: sets where node exporter listens", "node_metrics_host"]),
    ("bypass_node_exporter_beyond_loopback", {"node_metrics_host": "0.0.0.0"},
     ["node_metrics_host=0.0.0.0 listens beyond this host", "node_metrics_allow_remote"]),
    ("bypass_vllm_host_setting", {"vllm_service_settings": {"host": "0.0.0.0"}},
     ["vllm_service_settings: 'host' sets where vLLM listens, which only vllm_service_host does"]),
    # 42.5 the files fleet_prometheus would write, rendered by its templates and checked by promtool / amtool on the
    # controller in play 1: values its Python checks take, which the programs refuse. A case of fleet_prometheus is a host
    # of `monitoring` too (the role list); it scrapes no group (the other cases' boxes listen on loopback). CASES stays a
    # literal (tests/unit/plugins/filter/matrix.py reads it with ast.literal_eval).
    ("prometheus_extra_scrape_interval_bad",
     {"fleet_prometheus_gpu_group": "scrapes_no_box", "fleet_prometheus_router_group": "scrapes_no_router",
      "fleet_prometheus_extra_scrape_configs": [{"job_name": "blackbox", "scrape_interval": "15x",
                                                 "static_configs": [{"targets": ["127.0.0.1:9115"]}]}]},
     ["/etc/prometheus/prometheus.yml as the role would write it is refused by `promtool check config`",
      'not a valid duration string: "15x"', "from fleet_prometheus_extra_scrape_configs[0].scrape_interval",
      "nothing was changed on the host"]),
    ("alertmanager_group_wait_bad",
     {"fleet_prometheus_gpu_group": "scrapes_no_box", "fleet_prometheus_router_group": "scrapes_no_router",
      "fleet_prometheus_alertmanager": True,
      "fleet_prometheus_alertmanager_config": {"route": {"receiver": "team", "group_wait": "10x"},
                                               "receivers": [{"name": "team"}]}},
     ["/etc/prometheus/alertmanager.yml as the role would write it is refused by `amtool check-config`",
      'not a valid duration string: "10x"', "from fleet_prometheus_alertmanager_config.route.group_wait",
      "nothing was changed on the host"]),
]
# Secret values of the cases above: none may appear anywhere in the run's output.
SECRET_VALUES = ["4306a1b2c3d4e5f6a7b8c9d0e1f2-vllm", "hf_4306a1b2c3d4e5f6a7b8c9d0e1f2", "4306a1b2c3d4 e5f6a7b8c9d0e1f2-key",
                 "4306a1b2c3d4$e5f6a7b8c9d0e1f2-door"]
# Cases refused by the same assert of play 1 share an inventory host (CI time: a host costs its whole play 1 up to
# that assert, ~2.7 CPU-s for one that reaches vllm_service): that assert names every problem it finds, so each case's
# strings are looked for in its host's message, as when it had a host of its own, and a case whose check were gone
# would miss its strings there. The cases of one host set different variables (a variable two of them set has the same
# value: test_shared_hosts_set_each_variable_once); a case in no group has a host of its own, and so have those whose
# refusal is about another value's absence (bind_without_front_door: no door) or about three listeners on one port.
SHARED_HOSTS = [
    # the host invariants (owned paths, the paths' characters, the listeners)
    ("owned_door_config_dir_etc", "owned_power_state_dir_var_lib", "owned_install_base_dir_usr",
     "owned_service_env_file_passwd", "owned_service_config_dir_of_a_package", "owned_verify_state_dir_root",
     "owned_metrics_textfile_dir_var_log", "owned_grafana_dir_etc", "path_percent_specifier", "path_quote",
     "download_dir_space", "listen_vllm_on_node_exporters_port"),
    # the typing against the argument specs
    ("bad_installer", "coerce_gpu_limits_as_a_string", "coerce_settings_as_a_string", "limit_not_a_number",
     "persistence_bad", "secret_api_key_as_a_mapping", "secret_hf_token_as_a_list", "type_not_an_int",
     "unsupported_variant"),
    # nvidia_power: the values written into its unit; the GPUs and their limits
    ("before_unit_bad", "nvidia_smi_path_bad", "power_unit_name_bad"),
    ("gpu_index_absent", "limit_above_max"),
    ("gpu_limit_above_max", "limit_below_min"),
    # vllm_service: its variables; its profiles against vLLM's flags
    ("api_key_file_missing", "model_line_break", "port_out_of_range", "service_user_root", "unit_extra_setting_cr",
     "unit_name_bad", "watchdog_tool_canary_failures_zero", "bypass_vllm_host_setting", "profile_setting_cr"),
    ("empty_model", "open_api_no_key", "port_privileged", "unit_template", "user_name_bad"),
    ("description_line_separator", "gpu_mem_util_1_5", "secret_in_environment", "tp_larger_than_gpus"),
    ("secret_in_profile_settings", "max_num_seqs_zero"),
    # vllm_verify, node_metrics, the front door, fleet_prometheus
    ("verify_base_url_ipv6_unbracketed", "verify_concurrency_zero", "verify_unit_name_lf"),
    ("bypass_node_exporter_beyond_loopback", "metrics_interval_too_short", "bypass_node_exporter_listen_arg"),
    ("door_revocation_of_no_client", "door_env_name_with_spaces", "door_lab_cert_days_zero", "door_tls_files_without_pem",
     "door_lab_ca_dir_etc"),
    ("prometheus_extra_scrape_interval_bad", "alertmanager_group_wait_bad"),
]


def case_hosts() -> dict:
    """{inventory host: the names of its cases}: one host per group of SHARED_HOSTS, one for each other case."""
    grouped = {name for group in SHARED_HOSTS for name in group}
    hosts = {f"bad_{group[0]}_and_{len(group) - 1}_more": list(group) for group in SHARED_HOSTS}
    hosts.update({f"bad_{name}": [name] for name, _bad, _expected in CASES if name not in grouped})
    return hosts


# The inventory hosts, each case's bad values and each case's host.
CASE_HOSTS = case_hosts()
BAD_OF = {name: bad for name, bad, _expected in CASES}
HOST_OF = {name: host_name for host_name, names in CASE_HOSTS.items() for name in names}


# What site.yml's play 1 gathers (its gather_subset), once for all the cases (gathered_once).
with open(f"{REPO}/playbooks/site.yml", encoding="utf-8") as _fh:
    GATHER_SUBSET = yaml.safe_load(_fh)[0]["gather_subset"]
# A process that is not the collection's, listening where case listen_port_of_a_foreign_process puts node exporter.
FOREIGN_PORT = 18123

# Mocked cards for the CUDA cases: a state file beside the box's own (the test double's
# NVIDIA_SMI_MOCK_STATE) and an nvidia-smi wrapper that reads it, named in the case's host vars.
MOCKED_CARDS = {
    "driver570": {"driver_version": "570.172.08", "nvml_version": "570.172", "cuda_version": "12.8"},
    "cc61": {"compute_cap": "6.1"},
}
MOCK_SETUP = r"""
import json, os, sys
name, change = sys.argv[1], json.loads(sys.argv[2])
state = json.load(open("/etc/nvidia-smi-mock/state.json"))
for key, value in change.items():
    if key == "compute_cap":
        for gpu in state["gpus"]:
            gpu[key] = value
    else:
        state[key] = value
path = "/etc/nvidia-smi-mock/%s.json" % name
json.dump(state, open(path, "w"))
wrapper = "/usr/local/bin/nvidia-smi-%s" % name
with open(wrapper, "w") as out:
    out.write("#!/bin/sh\nNVIDIA_SMI_MOCK_STATE=%s exec /usr/bin/nvidia-smi \"$@\"\n" % path)
os.chmod(wrapper, 0o755)
"""


@pytest.fixture(scope="module")
def mocked_cards(host):
    for name, change in MOCKED_CARDS.items():
        host.run_expect([0], "python3 -c %s %s %s", MOCK_SETUP, name, json.dumps(change))
    yield
    for name in MOCKED_CARDS:
        host.run_expect([0], "rm -f /usr/local/bin/nvidia-smi-%s /etc/nvidia-smi-mock/%s.json", name, name)


FAIL_LINE = re.compile(r"^(?:fatal|failed): \[(?P<host>[^\]]+)\](?: \(item=[^)]*\))?(?:: FAILED!)? => ", re.M)


def parse_failures(stdout: str) -> dict:
    decoder = json.JSONDecoder()
    out: dict = {}
    for m in FAIL_LINE.finditer(stdout):
        try:
            result, _end = decoder.raw_decode(stdout[m.end():].lstrip())
        except ValueError:
            result = {"msg": stdout[m.end():m.end() + 2000]}
        msgs = [result.get("msg", "")]
        msgs += [str(r.get("msg", "")) for r in result.get("results", []) if isinstance(r, dict)]
        msgs += [str(e) for e in result.get("argument_errors", [])]
        out.setdefault(m.group("host"), []).append("\n".join(x for x in msgs if x))
    return {h: "\n".join(v) for h, v in out.items()}


@pytest.fixture(scope="module")
def foreign_listener(host):
    """A listener of a unit that is not the collection's (a transient systemd unit: nothing under /etc changes)."""
    host.run_expect([0], "systemd-run --unit=gpuhost-foreign-listener --collect python3 -m http.server %s --bind 127.0.0.1",
                    str(FOREIGN_PORT))
    # the port in /proc/net/tcp's hex form, formatted here (testinfra quotes run()'s own arguments as strings)
    listening = ":%04X 00000000:0000 0A" % FOREIGN_PORT
    host.run_expect([0], "for i in $(seq 50); do grep -q %s /proc/net/tcp && exit 0; sleep 0.1; done; exit 1", listening)
    yield
    host.run("systemctl stop gpuhost-foreign-listener.service")


def gathered_once(inventory: dict, cache_dir) -> dict:
    """Every case host is the one box: play 1's facts (its gather_subset) gathered once, for the first case, into a
    jsonfile fact cache, copied for the others; the environment under which play 1 takes them from there (`smart`
    gathering skips a host whose facts are cached) instead of gathering them once per case (CI time)."""
    env = {"ANSIBLE_CACHE_PLUGIN": "jsonfile", "ANSIBLE_CACHE_PLUGIN_CONNECTION": str(cache_dir), "ANSIBLE_GATHERING": "smart"}
    first = next(iter(inventory["gpu_servers"]["hosts"]))
    one = cache_dir / "one.yml"
    one.write_text(yaml.safe_dump({"all": {"hosts": {first: inventory["gpu_servers"]["hosts"][first]}}}))
    play = cache_dir / "gather.yml"
    play.write_text(yaml.safe_dump([{"name": "Gather play 1's facts", "hosts": "all", "gather_facts": True,
                                     "gather_subset": GATHER_SUBSET, "tasks": []}]))
    proc = run_playbook(str(one), playbook=str(play), env=env)
    cached = sorted(p for p in cache_dir.iterdir() if p.name.endswith("_" + first))
    assert proc.returncode == 0 and len(cached) == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    for name in inventory["gpu_servers"]["hosts"]:
        if name != first:
            (cache_dir / cached[0].name.replace(first, name)).write_bytes(cached[0].read_bytes())
    return env


def matrix_inventory() -> dict:
    """The matrix's inventory: each host of CASE_HOSTS on the faults box, with its cases' bad values over the
    scenario's variables (group vars, then the box's host vars)."""
    with open(f"{REPO}/molecule/default/inventory/group_vars/gpu_servers.yml", encoding="utf-8") as fh:
        fleet = yaml.safe_load(fh)
    with open(f"{REPO}/molecule/default/inventory/host_vars/{BOX}.yml", encoding="utf-8") as fh:
        box_vars = yaml.safe_load(fh)
    hosts = {}
    for host_name, names in CASE_HOSTS.items():
        hosts[host_name] = {"ansible_connection": "lab_podman", "ansible_host": BOX,
                            "ansible_python_interpreter": "/usr/bin/python3"}
        for name in names:
            hosts[host_name].update(BAD_OF[name])
    inventory = {"gpu_servers": {"hosts": hosts, "vars": {**fleet, **box_vars}}}
    # A case of a role another group runs (the role list: fleet_prometheus on `monitoring`) is a host of that group too.
    with open(f"{REPO}/playbooks/vars/roles.yml", encoding="utf-8") as fh:
        role_groups = {r["role"]: r["group"] for r in yaml.safe_load(fh)["gpuhost_roles"]}
    for host_name, names in CASE_HOSTS.items():
        for role, group in role_groups.items():
            if group not in ("gpu_servers", "all") and any(var.startswith(role + "_") for n in names for var in BAD_OF[n]):
                inventory.setdefault(group, {"hosts": {}})["hosts"][host_name] = {}
    return inventory


@pytest.fixture(scope="module")
def matrix(host, mocked_cards, foreign_listener, tmp_path_factory):  # pylint: disable=unused-argument,redefined-outer-name
    inventory = matrix_inventory()
    inv = tmp_path_factory.mktemp("badinputs") / "hosts.yml"
    inv.write_text(yaml.safe_dump(inventory))
    facts = gathered_once(inventory, tmp_path_factory.mktemp("facts"))
    before = host_snapshot(host)
    proc = run_playbook(str(inv), "--forks", "5", env=facts)
    after = host_snapshot(host)
    failures = parse_failures(proc.stdout)
    refused = sum(1 for name, _bad, _expected in CASES if HOST_OF[name] in failures)
    print(f"\nbad-input matrix: {refused}/{len(CASES)} cases refused in preflight on {len(CASE_HOSTS)} inventory hosts; "
          f"host unchanged: {before == after}")
    return {"proc": proc, "failures": failures, "before": before, "after": after}


def test_shared_hosts_set_each_variable_once():
    """A host's cases set different variables, or the same value (the door's client key); each case is on one host."""
    names = [name for group in SHARED_HOSTS for name in group]
    assert sorted(set(names)) == sorted(names) and set(names) <= set(BAD_OF), names
    for group in SHARED_HOSTS:
        seen: dict = {}
        for name in group:
            for var, value in BAD_OF[name].items():
                assert seen.setdefault(var, (name, value))[1] == value, (var, seen[var][0], name)


@pytest.mark.parametrize("name,bad,expected", CASES, ids=[c[0] for c in CASES])
def test_bad_input_refused_in_preflight(matrix, name, bad, expected):
    msg = matrix["failures"].get(HOST_OF[name])
    assert msg is not None, f"case {name} ({bad}, host {HOST_OF[name]}) was not refused:\n{matrix['proc'].stdout[-3000:]}"
    missing = [s for s in expected if s not in msg]
    assert not missing, f"case {name} (host {HOST_OF[name]}): message lacks {missing}:\n{msg}"


def test_no_secret_in_the_output(matrix):
    out = matrix["proc"].stdout + matrix["proc"].stderr
    assert not [value for value in SECRET_VALUES if value in out]


def test_no_case_got_past_preflight(matrix):
    out = matrix["proc"].stdout
    assert matrix["proc"].returncode != 0
    if "PLAY [Turn GPU boxes" in out:
        second = out.split("PLAY [Turn GPU boxes", 1)[1].split("PLAY RECAP", 1)[0]
        assert "no hosts matched" in second or "NO MORE HOSTS LEFT" in second, second[:3000]


def test_nothing_on_the_host_changed(matrix):
    assert matrix["before"] == matrix["after"]
